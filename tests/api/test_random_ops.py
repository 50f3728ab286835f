"""Random ops (dropout) under a schedule: a recomputation draws the numbers the first
computation drew, in every way poetc runs a schedule, so no budget changes the gradients.

The oracle is plain autograd on a copy of the module under the same seed; the traced step
draws as eager PyTorch does (the transformer layer's dropout after its attention output,
which is not contiguous, included), so the scheduled steps must equal it bitwise.
"""

from __future__ import annotations


import pytest
import torch
import torch.nn.functional as F

import poet_compiler
from poet_compiler.errors import ScheduleError
from poet_compiler.graph.ir import RNG_STATE_OP
from poet_compiler.schedule.program import Instruction, Op, Program
from poet_compiler.schedule.simulate import simulate
from poet_compiler.torch_exec.pager import PageFile
from poet_compiler.torch_exec.pygen import run_python
from poet_compiler.torch_exec.verification import verify
from tests.api.dropoutmodels import autograd_gradients, differing, gradients, mlp_case, transformer_case


def _compile(case, ram: str):
    model, x, y = case()
    c = poet_compiler.compile(model, device="a72", ram=ram, example_inputs=(x,), target=y, loss_fn=F.cross_entropy,
                              effort=0.3, time_limit_s=60, threads=1)
    assert c.result.ok, c.result.message
    return model, x, y, c


def _random_nodes(graph) -> list[int]:
    return [i for i, nd in enumerate(graph.nodes) if any(graph.nodes[j].op == RNG_STATE_OP for j in nd.inputs)]


def _recomputed(program: Program, nodes: list[int]) -> list[int]:
    seen: set[int] = set()
    again: list[int] = []
    for ins in program.instructions:
        if ins.op is Op.COMPUTE and ins.node in nodes:
            if ins.node in seen:
                again.append(ins.node)
            seen.add(ins.node)
    return again


def _step_grads(model, c, x, y) -> dict[str, torch.Tensor]:
    step = c.training_step()
    try:
        return gradients(model, lambda: step(x, y))
    finally:
        step.close()


def _checkpointed_grads(model, c, x, y, **compile_kw) -> dict[str, torch.Tensor]:
    m = c.checkpointed(allow_over_budget=True)   # a plan above the budget too: bits are what is checked
    run = torch.compile(m, **compile_kw) if compile_kw else m
    try:
        return gradients(model, lambda: F.cross_entropy(run(x), y).backward())
    finally:
        m.close()


@pytest.fixture(scope="module")
def mlp90():
    return _compile(mlp_case, "90%")


def test_a_random_op_reads_a_pinned_state_stash_the_simulator_requires(mlp90) -> None:
    _, _, _, c = mlp90
    graph, program = c.graph, c.program
    randoms = _random_nodes(graph)
    assert len(randoms) == 3
    for r in randoms:
        (stash,) = [j for j in graph.nodes[r].inputs if graph.nodes[j].op == RNG_STATE_OP]
        assert graph.nodes[stash].pinned and stash == r - 1
        assert graph.nodes[stash].output_bytes == torch.get_rng_state().numel()
    # A recomputation of the first random op once its stash is freed is not a schedule.
    r = randoms[0]
    stash = r - 1
    ins = list(program.instructions)
    freed = next(k for k, i in enumerate(ins) if i.op is Op.FREE and i.node == stash)
    gone = next(k for k, i in enumerate(ins) if k > freed and i.op is Op.FREE and i.node == r)
    late = Program(n_nodes=program.n_nodes, instructions=tuple(
        ins[:gone + 1] + [Instruction(Op.COMPUTE, r), Instruction(Op.FREE, r)] + ins[gone + 1:]))
    with pytest.raises(ScheduleError, match="not resident|not in RAM"):
        simulate(graph, c.costs, late)


def test_a_recomputed_random_op_replays_in_every_executor(mlp90, tmp_path) -> None:
    model, x, y, c = mlp90
    assert _recomputed(c.program, _random_nodes(c.graph)), "the schedule recomputes no random op"
    ref = autograd_gradients(model, x, y)
    assert not differing(_step_grads(model, c, x, y), ref)
    with PageFile(tmp_path / "pages") as pages:
        torch.manual_seed(1)
        _, grads = run_python(c.traced, c.program, pages)
    assert not differing(grads, ref)
    v = verify(c.traced, c.program, c.costs, seed=1)
    assert v.ok and v.grads_bitwise, v.failures
    assert not differing(_checkpointed_grads(model, c, x, y), ref)
    torch._dynamo.reset()
    try:
        # The compiled forward recomputes what the schedule recomputes, the random op too:
        # AOTAutograd stashes its generator state (aot_eager: eager kernels, bitwise).
        assert "bernoulli" in c.torch_plan()[0].schedule_recompute
        assert not differing(_checkpointed_grads(model, c, x, y, backend="aot_eager"), ref)
    finally:
        torch._dynamo.reset()


@pytest.mark.parametrize("case, budgets", [(mlp_case, ("100%", "70%", "60%")),
                                           (transformer_case, ("100%", "50%"))], ids=["mlp", "transformer"])
def test_gradients_do_not_depend_on_the_budget(case, budgets) -> None:
    model, x, y = case()
    ref = autograd_gradients(model, x, y)
    for ram in budgets:
        model, x, y, c = _compile(case, ram)
        assert not differing(_step_grads(model, c, x, y), ref), ram
        assert not differing(_checkpointed_grads(model, c, x, y), ref), ram
