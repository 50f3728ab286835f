"""A user's own nn.Module through ``poet_compiler.compile`` and ``training_step()``.

The schedule must train the module exactly as plain autograd does: after several SGD
steps on new batches the parameters and BatchNorm statistics are bitwise equal.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import poet_compiler
from poet_compiler.errors import PoetError
from tests.api.usermodel import TinyResNet, batch, refusal


@pytest.fixture(scope="module")
def compiled() -> tuple[torch.nn.Module, torch.nn.Module, poet_compiler.Compilation]:
    torch.manual_seed(0)
    model = TinyResNet().train()
    reference = copy.deepcopy(model)
    x, y = batch(0)
    c = poet_compiler.compile(model, device="m4", ram="40%", example_inputs=(x,), target=y,
                              loss_fn=F.cross_entropy, time_limit_s=5, threads=1)
    return model, reference, c


def test_schedule_is_not_trivial(compiled) -> None:
    _, _, c = compiled
    assert c.result.ok, c.result.message
    assert c.model == "TinyResNet"
    program = c.result.program
    # 40% of the checkpoint-all peak forces the schedule to drop activations.
    assert program.n_recompute + program.n_page_out > 0
    assert c.result.peak_ram_bytes <= c.problem.ram_budget_bytes < c.reference.peak_bytes


def test_three_sgd_steps_bitwise_equal_to_autograd(compiled) -> None:
    model, reference, c = compiled
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    with c.training_step() as step:
        for k in range(1, 4):  # new batches, not the example the model was traced with
            x, y = batch(k)
            opt.zero_grad()
            loss = step(x, y)
            opt.step()
            ref_opt.zero_grad()
            ref_loss = F.cross_entropy(reference(x), y)
            ref_loss.backward()
            ref_opt.step()
            assert torch.equal(loss, ref_loss.detach()), k
    params = dict(reference.named_parameters())
    for name, p in model.named_parameters():
        assert torch.equal(p, params[name]), name
    buffers = dict(reference.named_buffers())
    assert buffers  # BatchNorm running statistics and batch counters
    for name, b in model.named_buffers():
        assert torch.equal(b, buffers[name]), name
    assert int(dict(model.named_buffers())["bn.num_batches_tracked"]) == 3


def test_grad_accumulates_like_backward(compiled) -> None:
    model, _, c = compiled
    twin = copy.deepcopy(model)
    model.zero_grad(set_to_none=True)
    with c.training_step() as step:
        for k in (5, 6):  # two micro-batches without zero_grad: .grad is created, then added to
            x, y = batch(k)
            step(x, y)
            F.cross_entropy(twin(x), y).backward()
    grads = {n: p.grad for n, p in twin.named_parameters()}
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.equal(p.grad, grads[name]), name


@pytest.mark.parametrize("which", ["shape", "dtype", "target", "arity", "mode", "frozen"])
def test_another_batch_is_refused_in_one_line(compiled, which: str) -> None:
    model, _, c = compiled
    x, y = batch(1)
    args = {"shape": (batch(1, n=8)[0], y), "dtype": (x.double(), y), "target": (x, y[:2]),
            "arity": (x,), "mode": (x, y), "frozen": (x, y)}[which]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    step = c.training_step()
    try:
        msg = refusal(model, which, step, *args)
    finally:
        step.close()
    assert "\n" not in msg
    expect = {"shape": "(8, 3, 12, 12)", "dtype": "float64", "target": "target is (2,)",
              "arity": "step(*inputs, target)", "mode": "eval()", "frozen": "'head.bias'"}[which]
    assert expect in msg, msg
    # Nothing ran: the parameters are untouched.
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_module_needs_example_target_and_loss() -> None:
    with pytest.raises(PoetError, match="needs target, loss_fn"):
        poet_compiler.compile(TinyResNet(), device="m4", ram="50%", example_inputs=(batch(0)[0],))


def test_graph_only_models_have_no_training_step() -> None:
    from poet_compiler.graph.io import graph_from_dict
    from tests.viz.graphs import chain_dict

    c = poet_compiler.compile(graph_from_dict(chain_dict(4), "chain"), device=None, ram="80%",
                              time_limit_s=5, threads=1)
    with pytest.raises(PoetError, match="needs the model's weights"):
        c.training_step()


def test_zoo_model_trains_by_its_schedule_too() -> None:
    """A zoo model's Compilation keeps its module: one scheduled step equals autograd's."""
    c = poet_compiler.compile("mlp", device="m4", ram="100%", strategy="chen_greedy")
    model = c.traced.module
    twin = copy.deepcopy(model)
    x, y = c.traced.example_inputs, c.traced.target
    model.zero_grad(set_to_none=True)
    with c.training_step() as step:
        loss = step(*x, y)
    ref = c.traced.loss_fn(twin(*x), y)
    ref.backward()
    assert torch.equal(loss, ref.detach())
    grads = {n: p.grad for n, p in twin.named_parameters()}
    assert all(torch.equal(p.grad, grads[n]) for n, p in model.named_parameters())


def test_zoo_model_weights_are_not_held_through_the_solve(monkeypatch: pytest.MonkeyPatch) -> None:
    """The solve gets poetc's memory: a zoo module is traced again when it is needed."""
    import gc

    import poet_compiler.api as api
    from models.mlp import MLP

    alive: list[int] = []
    solve = api.run_strategy

    def counting(*args, **kwargs):
        gc.collect()
        alive.append(sum(type(o) is MLP for o in gc.get_objects()))
        return solve(*args, **kwargs)

    monkeypatch.setattr(api, "run_strategy", counting)
    c = poet_compiler.compile("mlp", device="m4", ram="100%", strategy="chen_greedy")
    assert alive == [0]
    assert isinstance(c.traced.module, MLP)
    assert c.traced is c.traced  # traced once, then kept for training
