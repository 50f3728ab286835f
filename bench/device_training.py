"""Training set-ups side by side on the emulated Cortex-M4: where the RAM goes, what it costs.

    .venv/bin/python bench/device_training.py [--quick] [-o bench/results/device_training.md]

digits_cnn (models/digits.py, batch 16) trained with SGD (lr 0.02, momentum 0.9) in three
set-ups, every one compiled for the m4 profile with ``--ram`` as poetc reads it by default:
the arena plus parameters, gradients, optimizer state, batch, outputs and the runtime's
reserve (docs/model.md, "RAM budget"):

- (a) gradients out: the step hands every gradient out (static arrays beside the
  parameters) and the firmware's driver applies SGD after it, momentum buffers in
  static arrays;
- (b) update in the schedule (``--optimizer sgd:lr=0.02,momentum=0.9``): each
  parameter's update node runs as soon as its gradient exists, the gradient lives in
  the arena and dies there, the momentum buffers are the optimizer state;
- (c) as (b), training only the classifier and the biases
  (``--train 'classifier.*,*.bias'``): the convolution weights are frozen, so their
  gradients are never computed and they keep no optimizer state.

For each: the least RAM budget the compiler finds a schedule for (bisection on
``--ram`` in 512 B steps, no deadline); then, at one budget shared by all three
(``BUDGET``), the schedule's computes, paging and the m4 profile's predicted energy of
a step, and the firmware of ``poetc emit-c --train-loop`` run under ``qemu-system-arm
-M mps2-an386 -icount shift=6`` on scikit-learn's digits: its RAM map from the linked
ELF (arena, parameters, gradients, optimizer state, batch, stack reserved) and the
instructions of a training step (exact under -icount: timer ticks x 0.625; the mean
over the steps run, batch read and driver update included). ``--quick`` runs 2 steps per
set-up instead of 20, and bisects from a coarser bracket.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import poet_compiler as pc  # noqa: E402
from poet_compiler.codegen.emit_c import TrainLoop, dataset, emit_c, train_run  # noqa: E402
from poet_compiler.codegen.emit_c import run as runner  # noqa: E402
from poet_compiler.codegen.emit_c.ram_map import NRF52840_RAM, firmware_ram, ram_map  # noqa: E402
from poet_compiler.errors import PoetError  # noqa: E402
from poet_compiler.fileio import atomic_write_text  # noqa: E402
from poet_compiler.frontends import load_model  # noqa: E402
from poet_compiler.frontends.torch.optimizer import parse_optimizer  # noqa: E402
from poet_compiler.schedule.program import Op  # noqa: E402

MODEL = "digits_cnn"
OPTIMIZER = "sgd:lr=0.02,momentum=0.9"
SUBSET = "classifier.*,*.bias"
BUDGET = 128 * 1024  # just above the least budget of (a) and (b)
SETUPS = {
    "a": ("(a) gradients out, SGD in the driver", None, None),
    "b": ("(b) update in the schedule", OPTIMIZER, None),
    "c": ("(c) bias + classifier only, update in the schedule", OPTIMIZER, SUBSET),
}


def feasible(graph: object, ram: int) -> bool:
    try:
        comp = pc.compile(graph, "m4", ram, time_limit_s=30)  # type: ignore[arg-type]
    except PoetError:
        return False
    return comp.program is not None


def least_ram(optimizer: str | None, train: str | None, quick: bool) -> int:
    """The least --ram (512 B steps) with a schedule: bisection."""
    tm = load_model(MODEL, optimizer=parse_optimizer(optimizer) if optimizer else None, train=train)
    assert tm is not None
    graph = tm.graph
    lo, hi = 64 * 1024, 192 * 1024  # infeasible / feasible for every set-up (checked)
    if feasible(graph, lo) or not feasible(graph, hi):
        raise RuntimeError(f"bracket [{lo}, {hi}] does not hold for {optimizer}, {train}")
    step = 4096 if quick else 512
    while hi - lo > step:
        mid = (lo + hi) // 2 // step * step or lo + step
        if mid in (lo, hi):
            mid = lo + step
        lo, hi = (lo, mid) if feasible(graph, mid) else (mid, hi)
    return hi


def measure(key: str, work: Path, steps: int) -> dict:
    label, optimizer, train = SETUPS[key]
    comp = pc.compile(MODEL, "m4", BUDGET, optimizer=optimizer, train=train, time_limit_s=60)
    program = comp.program
    if program is None:
        raise RuntimeError(f"{label}: no schedule at {BUDGET} B")
    sched, _ = comp.save(work / f"{key}.poet")
    loop = TrainLoop(epochs=1, lr=0.02, momentum=0.9, log_every=1000)
    emitted = emit_c(MODEL, sched, work / f"emit_{key}", loop)
    manifest = json.loads((emitted.out_dir / "manifest.json").read_text())
    full = dataset.digits()
    split = dataset.Split(full.x_train[:16 * steps], full.y_train[:16 * steps], full.x_test[:16], full.y_test[:16])
    train_run.prepare(work / f"sd_{key}", split, None, manifest)
    run = train_run.run_firmware(emitted.out_dir, work / f"sd_{key}", qemu=True)
    elf = emitted.out_dir / "build" / "step_m4.elf"
    ram = ram_map(elf, emitted.out_dir / "manifest.json")
    sections = firmware_ram(elf)
    fig = run.figures
    ipt = runner.instructions_per_tick()
    trained = [p for p in manifest["train"]["params"] if p["trained"]]
    return {
        "label": label, "optimizer": optimizer, "train": train,
        "trained": f"{len(trained)} of {len(manifest['train']['params'])} tensors, "
                   f"{sum(p['bytes'] for p in trained) // 4:,} of "
                   f"{sum(p['bytes'] for p in manifest['train']['params']) // 4:,} values",
        "nodes": comp.graph.n, "computes": program.count(Op.COMPUTE), "page_outs": program.count(Op.PAGE_OUT),
        "energy_j": comp.result.energy_j, "runtime_s": comp.result.runtime_s,
        "ram": ram, "sections": sections, "stack_used": fig["stack"],
        "instr_per_step": round(fig["train_ticks"] * ipt / fig["steps"]), "steps": fig["steps"],
        "update_in_schedule": manifest["train"]["update_in_schedule"],
    }


def tool_versions() -> str:
    qemu = subprocess.run(["qemu-system-arm", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    gcc = subprocess.run(["arm-none-eabi-gcc", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    return f"{platform.machine()} {platform.system()}, {qemu}, {gcc}, -O2 -mcpu=cortex-m4 -mfloat-abi=hard"


def render(rows: dict[str, dict], least: dict[str, int], argv: list[str], wall: float) -> str:
    keys = list(rows)
    head = "| | " + " | ".join(rows[k]["label"] for k in keys) + " |\n|---|" + "---|" * len(keys) + "\n"

    def line(name: str, cells: list[str]) -> str:
        return f"| {name} | " + " | ".join(cells) + " |\n"

    def b(v: int) -> str:
        return f"{v:,}"

    r = {k: rows[k]["ram"] for k in keys}
    s = {k: rows[k]["sections"] for k in keys}
    out = f"Command: `.venv/bin/python bench/device_training.py {' '.join(argv)}`".rstrip() + "\n"
    rss = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    out += (f"Machine: {tool_versions()}; wall {wall:.0f} s (shared 2-core machine: timings are noisy), "
            f"peak RSS {rss / 1024:.0f} MiB (this process or its largest child: QEMU, the compiler)\n\n")
    out += (f"digits_cnn, batch 16, SGD lr 0.02 momentum 0.9, m4 profile, every budget counting parameters, "
            f"gradients, optimizer state, batch, outputs and the runtime's reserve (poetc's default). Shared budget: "
            f"--ram {BUDGET // 1024}k.\n\n")
    out += head
    out += line("trained", [rows[k]["trained"] for k in keys])
    out += line("**least RAM budget with a schedule** (B)", [f"**{b(least[k])}**" if k in least else "-" for k in keys])
    outside = {k: r[k]["optimizer_state"] if not rows[k]["update_in_schedule"] else 0 for k in keys}
    out += line("least budget + state the budget does not see (the driver's momentum)",
                [b(least[k] + outside[k]) for k in keys])
    out += line("schedule at the shared budget", [f"{rows[k]['nodes']} nodes, {rows[k]['computes']} computes, "
                                                  f"{rows[k]['page_outs']} page-outs" for k in keys])
    out += line("predicted energy of a step (m4 profile)", [f"{rows[k]['energy_j'] * 1e3:.3f} mJ" for k in keys])
    out += line("predicted time of a step", [f"{rows[k]['runtime_s']:.3f} s" for k in keys])
    out += line("instructions of a step (QEMU -icount)", [f"{rows[k]['instr_per_step']:,}" for k in keys])
    out += line("RAM: arena", [b(r[k]["arena"]) for k in keys])
    out += line("RAM: parameters (frozen included)", [b(r[k]["params"]) for k in keys])
    out += line("RAM: gradients (outside the arena)", [b(r[k]["grads"]) for k in keys])
    out += line("RAM: optimizer state", [b(r[k]["optimizer_state"]) for k in keys])
    out += line("RAM: batch", [b(r[k]["batch"]) for k in keys])
    out += line("RAM: runtime, loss, libc", [b(r[k]["runtime"] + r[k]["outputs"] + r[k]["other"] + r[k]["buffers"]
                                              + r[k]["profiling"]) for k in keys])
    out += line("RAM: stack reserved (high-water)", [f"{b(s[k]['.stack'])} ({b(rows[k]['stack_used'])})" for k in keys])
    out += line("**RAM: total** (.data + .bss + stack)", [f"**{b(s[k]['total'])}**" for k in keys])
    out += (f"\nnRF52840 RAM: {NRF52840_RAM:,} B. Steps run per set-up: {rows[keys[0]]['steps']}. The budget counts "
            "the arena and everything beside it: the graph's fixed bytes (parameters, gradients or optimizer state, "
            "batch, outputs) and the m4 profile's runtime reserve (stack, runtime state, per-node tables); (a)'s "
            "driver keeps its momentum buffers outside what the compiler sees, hence the second row. At the shared "
            "budget each schedule spends what the fixed bytes leave on its arena (recomputing less where it can), "
            "so a set-up with fewer fixed bytes may show a larger arena. Stack: what the m4 profile's reserve gives "
            "the linker script (the measured high-water mark in brackets); runtime: the where table, poet_prog, "
            "loss, libc.\n")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("-o", "--out", type=Path, default=None, help="write the Markdown table here")
    ap.add_argument("--setups", default="abc", help="which set-ups (letters)")
    args = ap.parse_args(argv)
    if not runner.tools_for_m4():
        print("needs arm-none-eabi-gcc and qemu-system-arm", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    rows, least, failed = {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="poet-bench-train-") as tmp:
        for key in args.setups:
            _, optimizer, train = SETUPS[key]
            try:
                least[key] = least_ram(optimizer, train, args.quick)
                rows[key] = measure(key, Path(tmp), 2 if args.quick else 20)
            except (PoetError, RuntimeError) as exc:
                failed[key] = " ".join(str(exc).split())[:300]
                print(f"{SETUPS[key][0]}: FAILED {failed[key]}", file=sys.stderr)
                continue
            print(f"{SETUPS[key][0]}: least RAM {least[key]:,} B, total {rows[key]['sections']['total']:,} B, "
                  f"{rows[key]['instr_per_step']:,} instructions a step", flush=True)
    if not rows:
        return 1
    text = render(rows, least, list(argv if argv is not None else sys.argv[1:]), time.perf_counter() - t0)
    text += "".join(f"\n{SETUPS[k][0]}: not measured: {msg}\n" for k, msg in failed.items())
    print(text)
    if args.out:
        atomic_write_text(args.out, text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
