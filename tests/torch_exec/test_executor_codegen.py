"""The generated straight-line Python runs the schedule with the same gradients and the
same page-file traffic as the interpreting executor, and reads like the schedule."""

from __future__ import annotations

import torch

from poet_compiler.schedule.simulate import simulate
from poet_compiler.torch_exec.executor import ScheduledStep
from poet_compiler.torch_exec.pager import PageFile
from poet_compiler.torch_exec.pygen import run_python, to_python
from poet_compiler.torch_exec.verification import autograd_step
from tests.torch_exec.test_executor import compiled, traced


def _same(tm, c, tmp_path) -> str:
    ref_loss, ref_grads, _, _ = autograd_step(tm)
    sim = simulate(c.graph, c.costs, c.program)
    with PageFile(tmp_path / "pages.bin") as pages:
        loss, grads = run_python(tm, c.program, pages)
        assert (pages.bytes_written, pages.bytes_read) == (sim.page_out_bytes, sim.page_in_bytes)
    assert torch.equal(loss, ref_loss)
    assert all(torch.equal(grads[k], ref_grads[k]) for k in ref_grads)
    return to_python(tm, c.program)


def test_generated_code_pages_and_matches_autograd(tmp_path) -> None:
    tm, c = traced("kws_dscnn"), compiled("kws_dscnn", "30%", "paging")  # must page
    src = _same(tm, c, tmp_path)
    assert src == to_python(tm, c.program)  # deterministic
    for marker in ("# [0] COMPUTE 0 ", "PAGE_OUT", "PAGE_IN", "FREE", "FENCE", "_pages.page_out(", "del "):
        assert marker in src, marker
    # One line per FX op: every op of the graph appears as an assignment.
    for fx in tm.node_fx[0]:
        assert f"    {fx} = " in src


def test_generated_code_recomputes(tmp_path) -> None:
    tm, c = traced("kws_dscnn"), compiled("kws_dscnn", "50%", "remat")  # must recompute
    assert c.program.n_recompute > 0
    src = _same(tm, c, tmp_path)
    assert src.count("RECOMPUTE") == c.program.n_recompute


def test_source_method_matches_executor() -> None:
    tm, c = traced("cifar_cnn_tiny"), compiled("cifar_cnn_tiny", "70%", "paging")
    with ScheduledStep(tm, c.program) as step:
        assert step.source() == to_python(tm, c.program)
