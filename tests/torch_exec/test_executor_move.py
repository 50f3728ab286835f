"""A compacted schedule (MOVEs in its Program) runs in PyTorch, interpreted and as
generated Python, with autograd's gradients bitwise: a MOVE relocates a buffer in the
device's arena and changes nothing of the values."""

from __future__ import annotations

import torch

from poet_compiler.schedule.compact import compact_arena, without_moves
from poet_compiler.schedule.program import Op
from poet_compiler.schedule.simulate import simulate
from poet_compiler.torch_exec.executor import ScheduledStep
from poet_compiler.torch_exec.pager import PageFile
from poet_compiler.torch_exec.pygen import run_python, to_python
from poet_compiler.torch_exec.verification import autograd_step
from tests.torch_exec.test_executor import compiled, traced


def _moving_schedule():  # noqa: ANN202
    """A kws schedule that, laid out online at its own live peak with no static plan to
    keep, must move. Which budget gives one depends on the schedule the optimizer finds
    in its 1 s (50 % remat did until the warm starts took every baseline), so a few."""
    for ram, mode in (("50%", "remat"), ("45%", "remat"), ("30%", "poet")):
        c = compiled("kws_dscnn", ram, mode)
        bare = without_moves(c.program)
        peak = simulate(c.graph, c.costs, bare).peak_bytes
        program = compact_arena(c.graph, bare, peak)
        if program is not None and program.count(Op.MOVE) > 0:
            return c, bare, peak, program
    raise AssertionError("no kws schedule needed a move at its own live peak")


def test_a_compacted_schedule_matches_autograd(tmp_path) -> None:
    tm = traced("kws_dscnn")
    c, bare, peak, program = _moving_schedule()
    sim = simulate(c.graph, c.costs, program, ram_budget_bytes=peak)
    assert sim.move_j > 0   # m4's memory rates price the copies
    ref_loss, ref_grads, _, _ = autograd_step(tm)
    with ScheduledStep(tm, program) as step:
        loss, grads = step.run()
    assert torch.equal(loss, ref_loss) and all(torch.equal(grads[k], ref_grads[k]) for k in ref_grads)
    with PageFile(tmp_path / "pages.bin") as pages:
        loss, grads = run_python(tm, program, pages)
    assert torch.equal(loss, ref_loss) and all(torch.equal(grads[k], ref_grads[k]) for k in ref_grads)
    assert to_python(tm, program).count("] MOVE ") == program.count(Op.MOVE)
    assert program == compact_arena(c.graph, bare, peak)  # deterministic
