"""A compacted schedule (MOVEs in its Program) runs in PyTorch, interpreted and as
generated Python, with autograd's gradients bitwise: a MOVE relocates a buffer in the
device's arena and changes nothing of the values."""

from __future__ import annotations

import torch

from poet_compiler.codegen.executor import ScheduledStep
from poet_compiler.codegen.pager import PageFile
from poet_compiler.codegen.pygen import run_python, to_python
from poet_compiler.codegen.verification import autograd_step
from poet_compiler.schedule.compact import compact_arena, without_moves
from poet_compiler.schedule.program import Op
from poet_compiler.schedule.simulate import simulate
from tests.codegen.test_executor import compiled, traced


def test_a_compacted_schedule_matches_autograd(tmp_path) -> None:
    tm, c = traced("kws_dscnn"), compiled("kws_dscnn", "50%", "remat")
    bare = without_moves(c.program)
    peak = simulate(c.graph, c.costs, bare).peak_bytes
    # Laid out online at its own live peak, with no static plan to keep: it must move.
    program = compact_arena(c.graph, bare, peak)
    assert program is not None and program.count(Op.MOVE) > 0
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
