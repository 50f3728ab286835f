"""``make measure-reserve``: measure the device runtime's RAM reserve from built firmware.

``python -m poet_compiler.codegen.emit_c.reserve [--write] [--profile m4] [--work DIR]``
emits, builds (arm-none-eabi-gcc) and runs under ``qemu-system-arm -M mps2-an386`` the
firmware poetc emits, for a few models and schedules that page and recompute: one
training step (``poet_main.c``) and the training loop (``train_main.c``, with the update in
the schedule and with the driver's SGD), each built with a 16 KiB stack so that the
measurement is not capped by the stack it sizes. From each firmware:

- the stack's high-water mark, which the firmware measures itself (``startup_m4.c`` paints
  the stack at reset, ``plat_stack_used`` finds the deepest word written);
- per node: the runtime's ``where`` table and the driver's profiling counters, from the
  ELF's symbols (:data:`.ram_map.PER_NODE_SYMBOLS`) divided by the graph's nodes;
- the state: the rest of .data + .bss once the model's arrays (arena, parameters,
  gradients, optimizer state, batch, outputs, scratch) and the per-node tables are taken
  out: the runtime's ``poet_prog``, the C library's and the driver's statics, and the
  alignment padding between arrays.

The reserve takes the largest of each over the firmwares, adds :data:`STATE_SLACK` bytes
to the state (the padding varies with the model's arrays: 11 B in cifar_cnn_tiny's step,
whose BatchNorm counters are 8-byte aligned), and sizes the
stack at :data:`STACK_MARGIN` times the deepest high-water mark, rounded up to
:data:`STACK_ROUND` bytes (the margin covers kernels and call paths these models do not
reach). It prints the figures and, with ``--write``, records them in the profile
(``reserve``, cited in ``sources.reserve`` with this command and the figures). Re-run it
after changing the kernels, the runtime or the drivers.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from poet_compiler.codegen.emit_c import dataset, train_run
from poet_compiler.codegen.emit_c import run as runner
from poet_compiler.codegen.emit_c.emit import emit_c
from poet_compiler.codegen.emit_c.ram_map import PER_NODE_SYMBOLS, firmware_ram, ram_symbols
from poet_compiler.codegen.emit_c.train import TrainLoop

#: The stack reserved: this many times the deepest high-water mark measured...
STACK_MARGIN = 2.0
#: ... rounded up to a multiple of this (bytes).
STACK_ROUND = 512
#: Added to the largest state measured (bytes): alignment padding differs by model.
STATE_SLACK = 64
#: The stack the measured firmware is built with (bytes): far above any high-water mark.
MEASURE_STACK = 16 * 1024
#: Classes of :func:`.ram_map.ram_symbols` that are the model's arrays (counted by the
#: compiler from the graph), not the runtime's reserve.
MODEL_CLASSES = ("arena", "params", "grads", "outputs", "buffers", "optimizer_state", "batch", "scratch")


@dataclass(frozen=True)
class Firmware:
    """One firmware measured: a model, a schedule (activation-only budget, a quick
    strategy), a step or a training loop."""

    label: str
    model: str
    ram: str
    strategy: str
    optimizer: str | None = None
    loop: bool = False


FIRMWARES = (
    Firmware("kws_dscnn step, pages", "models/kws_dscnn.onnx", "35%", "capuchin"),
    Firmware("kws_dscnn step, recomputes", "models/kws_dscnn.onnx", "60%", "chen_greedy"),
    Firmware("cifar_cnn_tiny step, pages", "cifar_cnn_tiny", "70%", "capuchin"),
    Firmware("digits_cnn loop, SGD in the schedule", "digits_cnn", "80%", "capuchin",
             optimizer="sgd:lr=0.02,momentum=0.9", loop=True),
    Firmware("digits_cnn loop, SGD in the driver", "digits_cnn", "75%", "chen_greedy", loop=True),
)


@dataclass(frozen=True)
class Measured:
    label: str
    n_nodes: int
    stack_high_water: int
    per_node: int
    state: int
    total: int


def measure(fw: Firmware, work: Path) -> Measured:
    """Compile, emit, build and run ``fw`` in ``work``; its figures."""
    # The schedule comes from poetc's own command, as `make device-demo`'s do: codegen sits
    # below the API (tests/test_imports.py, LAYERS).
    schedule = work / "schedule.poet"
    cmd = [sys.executable, "-m", "poet_compiler.cli", "compile", fw.model, "--device", "m4", "--ram", fw.ram,
           "--strategy", fw.strategy, "--activations-only", "--quiet", "-o", str(schedule),
           *(["--optimizer", fw.optimizer] if fw.optimizer else [])]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{fw.label}: no schedule at {fw.ram} with {fw.strategy}: {proc.stderr.strip()}")
    loop = TrainLoop(epochs=1, lr=0.02, momentum=0.9, log_every=1) if fw.loop else None
    emitted = emit_c(fw.model, schedule, work / "emit", loop, stack_bytes=MEASURE_STACK)
    if fw.loop:
        full = dataset.digits(seed=0)
        batch = json.loads((emitted.out_dir / "manifest.json").read_text())["train"]["batch"]
        small = dataset.Split(full.x_train[:2 * batch], full.y_train[:2 * batch], full.x_test[:batch],
                              full.y_test[:batch])
        manifest = json.loads((emitted.out_dir / "manifest.json").read_text())
        train_run.prepare(work / "sd", small, None, manifest)
        stack = train_run.run_firmware(emitted.out_dir, work / "sd", qemu=True).figures["stack"]
    else:
        stack = runner.run_qemu(emitted.out_dir, work / "sd").figures["stack"]
    elf = emitted.out_dir / "build" / "step_m4.elf"
    symbols = ram_symbols(elf, emitted.out_dir / "manifest.json")
    per_node_total = sum(size for name, _, size in symbols if name in PER_NODE_SYMBOLS)
    model = sum(size for _, cls, size in symbols if cls in MODEL_CLASSES)
    sections = firmware_ram(elf)
    state = sections[".data"] + sections[".bss"] - model - per_node_total
    if stack >= MEASURE_STACK:
        raise RuntimeError(f"{fw.label}: the stack's high-water mark reached the {MEASURE_STACK} B built in")
    return Measured(fw.label, emitted.n_nodes, stack, math.ceil(per_node_total / emitted.n_nodes), state,
                    sections["total"])


def reserve_from(found: list[Measured]) -> dict[str, int]:
    """The profile's ``reserve`` from the firmwares measured."""
    high = max(m.stack_high_water for m in found)
    return {"stack_bytes": math.ceil(STACK_MARGIN * high / STACK_ROUND) * STACK_ROUND,
            "stack_high_water_bytes": high,
            "state_bytes": max(m.state for m in found) + STATE_SLACK,
            "per_node_bytes": max(m.per_node for m in found)}


def citation(reserve: dict[str, int], found: list[Measured]) -> str:
    worst = max(found, key=lambda m: m.stack_high_water)
    return (f"python -m poet_compiler.codegen.emit_c.reserve --write (make measure-reserve), "
            f"{datetime.date.today().isoformat()}: {len(found)} firmwares emitted by poetc emit-c "
            f"(arm-none-eabi-gcc -O2, {runner.BOARD} under QEMU): {'; '.join(m.label for m in found)}. "
            f"Stack: high-water mark of the painted stack, deepest {worst.stack_high_water} B ({worst.label}); "
            f"reserved {STACK_MARGIN:g} x that, rounded up to {STACK_ROUND} B = {reserve['stack_bytes']} B. "
            f"Per node: where table + profiling counters from the ELF symbols ({reserve['per_node_bytes']} B). "
            f"State: the rest of .data + .bss (poet_prog, C library and driver statics, alignment padding), "
            f"at most {max(m.state for m in found)} B, + {STATE_SLACK} B for other models' padding "
            f"= {reserve['state_bytes']} B")


def record(path: Path, reserve: dict[str, int], ref: str) -> None:
    """Record ``reserve`` and its citation in the profile file (canonical form), its other
    fields untouched."""
    from poet_compiler.devices.profile import profile_from_dict, write_profile

    data = json.loads(path.read_text())
    data["reserve"] = reserve
    data["sources"] = dict(data["sources"], reserve={"kind": "measurement", "ref": ref})
    write_profile(profile_from_dict(data, str(path)), path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="measure-reserve", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="m4", help="the profile to record the reserve in (a shipped name)")
    ap.add_argument("--write", action="store_true", help="record the reserve in profiles/<profile>.json")
    ap.add_argument("--work", type=Path, default=None, help="working directory (default: a temporary one)")
    args = ap.parse_args(argv)
    if not runner.tools_for_m4():
        print("error: measure-reserve needs arm-none-eabi-gcc and qemu-system-arm", file=sys.stderr)
        return 2
    found = []
    with tempfile.TemporaryDirectory(prefix="poet-reserve-") as tmp:
        root = args.work or Path(tmp)
        for k, fw in enumerate(FIRMWARES):
            m = measure(fw, root / f"fw{k}")
            found.append(m)
            print(f"{m.label}: {m.n_nodes} nodes, stack high-water {m.stack_high_water} B, per node {m.per_node} B, "
                  f"state {m.state} B (firmware RAM {m.total:,} B with a {MEASURE_STACK} B stack)", flush=True)
    reserve = reserve_from(found)
    print("reserve: " + ", ".join(f"{k} {v}" for k, v in reserve.items()))
    if args.write:
        from poet_compiler.devices.profile import _shipped_dir

        path = _shipped_dir() / f"{args.profile}.json"
        record(path, reserve, citation(reserve, found))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
