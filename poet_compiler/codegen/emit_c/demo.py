"""``make device-demo``: one training step of a model on an emulated Cortex-M4, checked.

``python -m poet_compiler.codegen.emit_c.demo MODEL SCHEDULE [--work DIR]`` emits the C
(:func:`~.emit.emit_c`), builds the firmware with arm-none-eabi-gcc, runs it under
``qemu-system-arm -M mps2-an386`` with semihosting files for the batch, the page file
(the SD card) and the results, compares the gradients with PyTorch's (metric:
:mod:`.run`), prints the firmware's RAM map, and ends with the line::

    device step on mps2-an386 (Cortex-M4): max rel grad diff X, loss diff Y,
    arena N B (planned N B), paged out P B / in Q B, instructions I, firmware RAM R B of 262144 B

(one line; R: .data + .bss + .stack of the linked ELF). Exit code 1 when the arena is not
the planned one, the paging bytes differ from the schedule's, the max rel grad diff
exceeds 1e-4, R exceeds the nRF52840's 262,144 B, or the stack's high-water mark reaches
the stack reserved; 2 on bad input.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from poet_compiler.codegen.emit_c import run as runner
from poet_compiler.codegen.emit_c.emit import emit_c, load_traced
from poet_compiler.codegen.emit_c.ram_map import NRF52840_RAM, firmware_ram, ram_line, ram_map, ram_problems
from poet_compiler.errors import PoetError

TOLERANCE = 1e-4


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="device-demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("schedule", type=Path)
    ap.add_argument("--work", type=Path, default=None, help="working directory (default: a temporary one)")
    ap.add_argument("--timeout", type=float, default=600.0, help="QEMU time limit in seconds")
    ap.add_argument("--require-paging-and-remat", action="store_true",
                    help="fail unless the schedule both pages and recomputes")
    args = ap.parse_args(argv)
    if not runner.tools_for_m4():
        print("error: device-demo needs arm-none-eabi-gcc and qemu-system-arm "
              "(apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="poet-device-") as tmp:
        work = args.work or Path(tmp)
        try:
            emitted = emit_c(args.model, args.schedule, work / "emit")
            tm = load_traced(args.model, args.schedule)
        except PoetError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        try:
            step = runner.run_qemu(emitted.out_dir, work / "sd", timeout=args.timeout)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"FAIL: the device step did not complete: {' '.join(str(exc).split())[:300]}", file=sys.stderr)
            return 1
        cmp = runner.compare(tm, step)
        ref64 = runner.float64_reference(tm)
        dev64 = max(runner.grad_diffs(tm, step.outputs, ref64).values())
        pt64 = max(runner.grad_diffs(tm, dict(zip(step.outputs, runner.reference(tm))), ref64).values())
        elf = emitted.out_dir / "build" / "step_m4.elf"
        ram = ram_map(elf, emitted.out_dir / "manifest.json")
        sections = firmware_ram(elf)
        fig = step.figures
        instructions = round(step.step_ticks * runner.instructions_per_tick())
        total = sections["total"]
        print(f"{args.model} with {args.schedule.name}: {emitted.n_nodes} nodes, {fig['computes']} computes "
              f"({fig['computes'] - emitted.n_nodes} recomputed), stack high-water {fig['stack']} B "
              f"of {sections['.stack']} B")
        print(f"  gradients: {cmp.n_grads} tensors, worst {cmp.worst_grad} ({cmp.max_rel_grad_diff:.3g}); "
              f"against float64 PyTorch: device {dev64:.3g}, PyTorch float32 {pt64:.3g}; "
              f"buffer updates max rel diff {cmp.max_rel_update_diff:.3g}")
        print(ram_line(ram, sections))
        problems = ram_problems(fig["stack"], sections)
        if fig["arena"] != fig["planned"] or fig["arena"] != emitted.arena_bytes:
            problems.append(f"arena {fig['arena']} B is not the planned {emitted.arena_bytes} B")
        if (fig["paged_out"], fig["paged_in"]) != (emitted.page_out_bytes, emitted.page_in_bytes):
            problems.append(f"paged {fig['paged_out']}/{fig['paged_in']} B but the schedule pages "
                            f"{emitted.page_out_bytes}/{emitted.page_in_bytes} B")
        if args.require_paging_and_remat and not (fig["paged_out"] and fig["computes"] > emitted.n_nodes):
            problems.append("the schedule does not both page and recompute")
        if not cmp.max_rel_grad_diff <= TOLERANCE:
            problems.append(f"max rel grad diff {cmp.max_rel_grad_diff:.3g} > {TOLERANCE}")
        for p in problems:
            print(f"  FAIL: {p}")
        print(f"device step on {runner.BOARD} (Cortex-M4): max rel grad diff {cmp.max_rel_grad_diff:.2e}, "
              f"loss diff {cmp.loss_diff:.2e}, arena {fig['arena']} B (planned {emitted.arena_bytes} B), "
              f"paged out {fig['paged_out']} B / in {fig['paged_in']} B, instructions {instructions}, "
              f"firmware RAM {total} B of {NRF52840_RAM} B")
        return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
