"""One training step on the emulated Cortex-M4 (qemu-system-arm -M mps2-an386).

Skipped without arm-none-eabi-gcc and qemu-system-arm. A schedule that pages (capuchin
at 35 % on kws_dscnn) is built for the M4, run with semihosting files for the batch,
the page file and the results, and checked against PyTorch: gradients, the arena of the
planned size, the schedule's paging bytes, and a deterministic instruction count.
Bounded: each QEMU run has a 240 s subprocess timeout (it takes about a second).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from poet_compiler.codegen.emit_c import emit_c
from poet_compiler.codegen.emit_c import run as runner
from poet_compiler.codegen.emit_c.emit import load_traced
from tests.codegen.emit_cases import CASES, compile_case

pytestmark = pytest.mark.skipif(not runner.tools_for_m4(), reason="needs arm-none-eabi-gcc and qemu-system-arm")


def test_qemu_step_matches_pytorch(tmp_path: Path) -> None:
    case = CASES[1]  # kws_dscnn, pages
    path = compile_case(case, tmp_path)
    emitted = emit_c(case.model, path, tmp_path / "emit")
    first = runner.run_qemu(emitted.out_dir, tmp_path / "sd", timeout=240)
    cmp = runner.compare(load_traced(case.model, path), first)
    assert cmp.max_rel_grad_diff <= 1e-4, f"{cmp.worst_grad}: {cmp.max_rel_grad_diff:.3g}"
    assert cmp.loss_diff <= 1e-5 * abs(cmp.loss_ref)
    fig = first.figures
    assert fig["arena"] == fig["planned"] == emitted.arena_bytes
    assert (fig["paged_out"], fig["paged_in"]) == (emitted.page_out_bytes, emitted.page_in_bytes) != (0, 0)
    assert first.step_ticks > 0 and (first.node_ticks[first.node_runs > 0] > 0).all()
    # The stack the m4 profile reserves holds the step (painted stack, high-water mark); when
    # the kernels or the runtime change, `make measure-reserve` measures it again.
    assert 0 < fig["stack"] < emitted.stack_bytes, (fig["stack"], emitted.stack_bytes)
    # -icount makes the count exact: a second run gives the same ticks, node by node
    second = runner.run_qemu(emitted.out_dir, tmp_path / "sd2", timeout=240)
    assert second.step_ticks == first.step_ticks
    assert (second.node_ticks == first.node_ticks).all()


def test_timer_counts_instructions(tmp_path: Path) -> None:
    """runtime/c/device/calibrate.c spins exactly 2N instructions between two timer reads:
    the ticks must be 2N / instructions_per_tick, plus the few instructions of the reads."""
    import subprocess

    dev = Path(runner.__file__).resolve().parents[3] / "runtime" / "c" / "device"
    elf = tmp_path / "calibrate.elf"
    subprocess.run(["arm-none-eabi-gcc", "-std=c99", "-O2", "-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard",
                    "-mfpu=fpv4-sp-d16", "-nostartfiles", "-T", str(dev / "mps2_an386.ld"), "--specs=nano.specs",
                    "--specs=nosys.specs", f"-I{dev}", str(dev / "calibrate.c"), str(dev / "platform_semihost.c"),
                    str(dev / "startup_m4.c"), "-o", str(elf)], check=True, capture_output=True, text=True)
    proc = subprocess.run(["qemu-system-arm", "-M", runner.BOARD, "-nographic", "-monitor", "none", "-serial", "none",
                           "-semihosting-config", "enable=on,target=native", "-icount",
                           f"shift={runner.ICOUNT_SHIFT}", "-kernel", str(elf)],
                          capture_output=True, text=True, timeout=60)
    line = next(ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("calibrate:"))
    ticks = dict(tok.split("=") for tok in line.split()[1:])
    for key, n in (("ticks_1M", 1_000_000), ("ticks_4M", 4_000_000)):
        instructions = int(ticks[key]) * runner.instructions_per_tick()
        assert 2 * n <= instructions <= 2 * n + 20, (key, instructions)


def test_qemu_step_with_moves_matches_pytorch(tmp_path: Path) -> None:
    """A compacted schedule on the emulated M4: kws_dscnn's program laid out online at its
    own live peak (so that buffers must move), written as a version-4 file, emitted and
    run: the runtime's MOVEs carry the tensors the later kernels read, so the gradients are
    PyTorch's, in an arena of exactly the live peak."""
    import poet_compiler as pc
    from poet_compiler.codegen.bytecode.format import MOVE_VERSION
    from poet_compiler.schedule.compact import compact_arena, without_moves
    from poet_compiler.schedule.program import Op
    from poet_compiler.schedule.simulate import simulate

    case = CASES[0]  # kws_dscnn, recomputes
    comp = pc.compile(case.model, "m4", case.ram, strategy=case.strategy)
    bare = without_moves(comp.program)
    peak = simulate(comp.graph, comp.costs, bare).peak_bytes
    program = compact_arena(comp.graph, bare, peak)
    assert program is not None and program.count(Op.MOVE) > 0
    comp.result = dataclasses.replace(comp.result, program=program, arena_bytes=program.arena_bytes)
    path, _ = comp.save(tmp_path / "moved.poet")
    assert path.read_bytes()[4] == MOVE_VERSION
    emitted = emit_c(case.model, path, tmp_path / "emit")
    run = runner.run_qemu(emitted.out_dir, tmp_path / "sd", timeout=240)
    cmp = runner.compare(load_traced(case.model, path), run)
    assert cmp.max_rel_grad_diff <= 1e-4, f"{cmp.worst_grad}: {cmp.max_rel_grad_diff:.3g}"
    assert cmp.loss_diff <= 1e-5 * abs(cmp.loss_ref)
    assert run.figures["arena"] == run.figures["planned"] == emitted.arena_bytes == program.arena_bytes <= peak
