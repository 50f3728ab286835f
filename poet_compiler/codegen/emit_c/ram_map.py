"""The firmware's RAM map, from the symbols of the linked ELF (``arm-none-eabi-nm``).

Every data/bss symbol is put in one class by its name (the generator's naming scheme:
``model_arena``, ``p_*`` parameters, ``b_*`` buffers, ``s_*`` optimizer state, ``out_*``
outputs, ``in_*`` and ``target`` the batch, ``model_where``/``prog`` the runtime's state;
a training loop's manifest names its parameters, gradients and optimizer state in
``train.ram_classes``, frozen parameters included), the stack is the
``.stack`` section the linker script reserves, with the high-water mark the firmware
measured beside it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

NRF52840_RAM = 256 * 1024
RAM_START = 0x20000000


#: Symbols of the runtime and driver that take one entry per graph node: the runtime's
#: ``where`` table and the driver's profiling counters (the profile's reserve.per_node_bytes).
PER_NODE_SYMBOLS = ("model_where", "node_ticks", "node_runs")


def ram_symbols(elf: Path, manifest_path: Path) -> list[tuple[str, str, int]]:
    """``(name, class, bytes)`` of every data/bss symbol of the linked ELF in RAM."""
    manifest = json.loads(Path(manifest_path).read_text())
    grads = {f"out_{k}" for k, o in enumerate(manifest["outputs"]) if o["role"] == "grad"}
    classes = manifest.get("train", {}).get("ram_classes", {})
    out = subprocess.run(["arm-none-eabi-nm", "-S", "-t", "d", str(elf)], capture_output=True, text=True,
                         check=True).stdout
    found = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) != 4:
            continue
        addr, size, kind, name = int(parts[0]), int(parts[1]), parts[2], parts[3]
        if addr < RAM_START or kind.lower() not in ("b", "d"):
            continue
        found.append((name, classes.get(name) or _classify(name, grads), size))
    return found


def ram_map(elf: Path, manifest_path: Path) -> dict[str, int]:
    """Bytes of RAM per class: arena, params, grads, outputs (loss + buffer updates),
    buffers, batch, runtime (where table + poet_prog), profiling, scratch (outputs no op
    reads), other (C library, driver), stack."""
    sizes = dict.fromkeys(("arena", "params", "grads", "outputs", "buffers", "optimizer_state", "batch", "runtime",
                           "profiling", "scratch", "other"), 0)
    for _, cls, size in ram_symbols(elf, manifest_path):
        sizes[cls] += size
    sections = subprocess.run(["arm-none-eabi-size", "-A", "-d", str(elf)], capture_output=True, text=True,
                              check=True).stdout
    for line in sections.splitlines():
        parts = line.split()
        if parts and parts[0] == ".stack":
            sizes["stack"] = int(parts[1])
    return sizes


def firmware_ram(elf: Path) -> dict[str, int]:
    """The linked ELF's RAM sections (bytes): .data, .bss and .stack, and their sum."""
    text = subprocess.run(["arm-none-eabi-size", "-A", "-d", str(elf)], capture_output=True, text=True,
                          check=True).stdout
    sizes = {".data": 0, ".bss": 0, ".stack": 0}
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] in sizes:
            sizes[parts[0]] = int(parts[1])
    sizes["total"] = sizes[".data"] + sizes[".bss"] + sizes[".stack"]
    return sizes


def ram_line(ram: dict[str, int], sections: dict[str, int]) -> str:
    """The RAM map and the firmware's sections as the demos print them."""
    return ("  RAM map (B): " + ", ".join(f"{k} {v:,}" for k, v in ram.items() if v)
            + f"; .data {sections['.data']:,} + .bss {sections['.bss']:,} + stack {sections['.stack']:,} "
            f"= {sections['total']:,} of an nRF52840's {NRF52840_RAM:,}")


def ram_problems(stack_high: int, sections: dict[str, int]) -> list[str]:
    """Why the firmware's RAM fails the board: over the nRF52840's, or the run's stack
    high-water mark ``stack_high`` at the top of the stack reserved."""
    problems = []
    if sections["total"] > NRF52840_RAM:
        problems.append(f"firmware RAM {sections['total']} B > the nRF52840's {NRF52840_RAM} B")
    if stack_high >= sections[".stack"]:
        problems.append(f"the stack's high-water mark {stack_high} B reaches the {sections['.stack']} B reserved")
    return problems


def _classify(name: str, grads: set[str]) -> str:
    if name == "model_arena":
        return "arena"
    if name.startswith("p_"):
        return "params"
    if name in grads:
        return "grads"
    if name.startswith("out_"):
        return "outputs"
    if name.startswith("b_"):
        return "buffers"
    if name.startswith("s_"):
        return "optimizer_state"
    if name.startswith("in_") or name == "target":
        return "batch"
    if name in ("model_where", "prog"):
        return "runtime"
    if name in ("node_ticks", "node_runs"):
        return "profiling"
    if name.startswith(("scratch_", "pre_")):
        return "scratch"
    return "other"
