"""``compile(..., optimizer=torch.optim.X(...))``: ``training_step()`` applies the update
itself; the loop is ``step(x, y)``, and the module ends equal to plain autograd +
torch.optim (single-tensor path) after several steps on new batches."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import poet_compiler
from poet_compiler.errors import FrontendError, PoetError
from tests.api.usermodel import TinyResNet, batch


@pytest.mark.parametrize("make_opt", [
    lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3),
    lambda ps: torch.optim.AdamW(ps, lr=1e-2),
], ids=["sgd-nesterov", "adamw"])
def test_training_step_applies_the_update(make_opt) -> None:
    torch.manual_seed(0)
    model = TinyResNet().train()
    for p in model.stem.parameters():   # frozen: no gradient, no update
        p.requires_grad_(False)
    reference = copy.deepcopy(model)
    stem = {n: p.detach().clone() for n, p in model.stem.named_parameters()}
    x, y = batch(0)
    c = poet_compiler.compile(model, device="m4", ram="70%", example_inputs=(x,), target=y, loss_fn=F.cross_entropy,
                              strategy="chen_greedy", optimizer=make_opt(model.parameters()))
    assert c.result.ok, c.result.message
    assert c.graph.count("update") == sum(p.requires_grad for p in model.parameters())
    assert c.problem.fixed == c.ram and c.ram.optimizer_state > 0 and c.ram.grads == 0
    assert c.report()["optimizer"] == c.traced.optimizer.describe()
    assert c.program.n_recompute > 0
    opt = make_opt([p for p in reference.parameters() if p.requires_grad])
    for group in opt.param_groups:
        group["foreach"] = False
    with c.training_step() as step:
        for k in range(3):
            xb, yb = batch(k)
            loss = step(xb, yb)
            opt.zero_grad()
            ref_loss = F.cross_entropy(reference(xb), yb)
            ref_loss.backward()
            opt.step()
            assert torch.equal(loss, ref_loss.detach())
        ref_params = dict(reference.named_parameters())
        for key, value in step.optimizer_state.items():
            name, _, state = key.rpartition("@")
            assert torch.equal(value, opt.state[ref_params[name]][state]), key
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert torch.equal(p, q), name
    for (name, b), r in zip(model.named_buffers(), reference.buffers()):
        assert torch.equal(b, r), name
    for name, p in model.stem.named_parameters():
        assert torch.equal(p, stem[name]), name


def test_optimizer_arguments_are_checked() -> None:
    model = TinyResNet()
    x, y = batch(0)
    with pytest.raises(FrontendError, match="dampening"):
        poet_compiler.compile(model, "m4", "50%", example_inputs=(x,), target=y, loss_fn=F.cross_entropy,
                              optimizer=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, dampening=0.5))
    with pytest.raises(FrontendError, match="unknown optimizer"):
        poet_compiler.compile("kws_dscnn", "m4", "50%", optimizer="lion:lr=1")
    with pytest.raises(PoetError, match="apply to traced models"):
        poet_compiler.compile(poet_compiler.compile("kws_dscnn", "m4", "90%", strategy="checkpoint_all").graph,
                              "m4", "90%", train="bias")
