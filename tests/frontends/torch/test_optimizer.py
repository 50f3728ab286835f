"""The optimizer's update inside the traced step (docs/training.md), against torch.optim.

Each case traces a small conv + BatchNorm + linear model with the update, runs a Program
that both recomputes and pages (built here with the schedule builder, checked by the
simulator) for three steps on new batches, and compares every parameter, the optimizer
state, the BatchNorm statistics and the losses bitwise with plain autograd followed by
``torch.optim`` on its single-tensor path (``foreach=False``): the ``poet.*`` ops run the
same aten ops in the same order.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from poet_compiler.api import load_costs
from poet_compiler.errors import FrontendError, UpdateOrderError
from poet_compiler.frontends.torch import trace_module
from poet_compiler.frontends.torch.optimizer import OptimizerSpec, as_optimizer, from_torch, parse_optimizer
from poet_compiler.frontends.torch.subset import select_trained
from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schedule.build import assemble
from poet_compiler.schedule.linearize import linearize
from poet_compiler.schedule.program import Op, Program
from poet_compiler.schedule.simulate import simulate
from poet_compiler.torch_exec.executor import ScheduledStep

SPECS = (
    "sgd:lr=0.1",
    "sgd:lr=0.05,momentum=0.9",
    "sgd:lr=0.05,momentum=0.9,nesterov=1,weight_decay=0.01",
    "adam:lr=0.01,weight_decay=0.001",
    "adamw:lr=0.01",
)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
        self.classifier = nn.Linear(4 * 6 * 6, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.conv1(x)))
        x = torch.relu(self.conv2(x))
        return self.classifier(x.flatten(1))


def batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(6, 1, 8, 8, generator=g), torch.randint(0, 5, (6,), generator=g)


def net(seed: int = 0) -> Net:
    torch.manual_seed(seed)
    return Net().train()


def trace(model: nn.Module, spec: OptimizerSpec | None, train: str | None = None):
    x, y = batch(0)
    return trace_module(model, (x,), y, nn.functional.cross_entropy, name="net", optimizer=spec, train=train)


def recompute_and_page(graph: TrainingGraph) -> Program:
    """Every forward activation that a backward node reads is dropped and recomputed at its
    first backward reader (where the update rule allows), except one, which is paged."""
    n, cons, last = graph.n, graph.consumers, graph.last_compute_stage
    R = np.eye(n, dtype=bool)
    saved = [(i, next(c for c in cons[i] if graph.nodes[c].kind == "backward")) for i, node in enumerate(graph.nodes)
             if node.kind == "forward" and any(graph.nodes[c].kind == "backward" for c in cons[i])]
    paged_node, _ = saved[0]
    for i, first in saved[1:]:
        if i + 1 < first <= last[i]:
            R[first, i] = True
    prev = max(c for c in cons[paged_node] if graph.nodes[c].kind != "backward")
    program = linearize(graph, assemble(graph, R, [(paged_node, prev)]), dma=False)
    assert program.count(Op.PAGE_OUT) and program.n_recompute, "the program must page and recompute"
    return program


def reference_steps(model: nn.Module, spec: OptimizerSpec, steps: int):
    opt = spec.to_torch([p for p in model.parameters() if p.requires_grad])
    losses = []
    for k in range(steps):
        x, y = batch(k)
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return losses, opt


@pytest.mark.parametrize("text", SPECS)
def test_update_nodes_equal_torch_optim(text: str) -> None:
    spec = parse_optimizer(text)
    model, ref = net(), net()
    tm = trace(model, spec)
    graph = tm.graph
    trained = [n for n, p in model.named_parameters() if p.requires_grad]
    assert graph.count("update") == len(trained)
    assert graph.grad_bytes == 0 and graph.optimizer_state_bytes == sum(
        t.numel() * t.element_size() for t in tm.opt_state.values())
    program = recompute_and_page(graph)
    simulate(graph, load_costs(graph, "m4"), program)   # the update rules hold
    with ScheduledStep(tm, program) as step:
        losses = [step.step((x,), y) for x, y in map(batch, range(3))]
    ref_losses, opt = reference_steps(ref, spec, 3)
    assert all(torch.equal(a, b) for a, b in zip(losses, ref_losses))
    ref_params = dict(ref.named_parameters())
    for name, p in model.named_parameters():
        assert torch.equal(p, ref_params[name]), name
        assert p.grad is None, "with the update in the step no gradient is left behind"
        for s, want in spec.torch_state(opt, ref_params[name]).items():
            assert torch.equal(tm.opt_state[f"{name}@{s}"], want), f"{name}@{s}"
    ref_buffers = dict(ref.named_buffers())
    for name, b in model.named_buffers():
        assert torch.equal(b, ref_buffers[name]), name


def test_update_follows_every_read_of_the_old_parameter() -> None:
    tm = trace(net(), parse_optimizer("sgd:lr=0.1"))
    graph = tm.graph
    for node in graph.nodes:
        if node.kind != "update":
            continue
        grad = node.inputs[0]
        assert node.output_bytes == node.workspace_bytes == 0
        assert node.after and max(node.after) < node.id and grad < node.id
        # As early as its dependencies allow: right after the latest of them (select nodes
        # of a multi-output op and other updates may sit in between).
        between = graph.nodes[max(grad, *node.after) + 1:node.id]
        assert all(n.kind == "update" or n.op == "getitem" for n in between), node.name
    # The classifier's weight is read by its forward addmm and by the backward mm that
    # computes the input gradient: both are in its update's after.
    upd = next(n for n in graph.nodes if n.name == "update.classifier.weight")
    readers = [graph.nodes[i] for i in upd.after]
    assert {n.kind for n in readers} == {"forward", "backward"}


def _update_program(graph: TrainingGraph) -> tuple[list[tuple[Op, int]], int]:
    ins = [(i.op, i.node) for i in linearize(graph, assemble(graph, np.eye(graph.n, dtype=bool))).instructions]
    upd = next(n for n in graph.nodes if n.kind == "update" and any(graph.nodes[r].kind == "backward"
                                                                   for r in n.after))
    return ins, upd.id


def _program(graph: TrainingGraph, ins: list[tuple[Op, int]]) -> Program:
    from poet_compiler.schedule.program import Instruction

    return Program(n_nodes=graph.n, instructions=tuple(Instruction(op, i) for op, i in ins))


def test_simulator_refuses_an_update_before_the_last_read() -> None:
    graph = trace(net(), parse_optimizer("sgd:lr=0.1")).graph
    costs = load_costs(graph, "m4")
    ins, u = _update_program(graph)
    upd = graph.nodes[u]
    simulate(graph, costs, _program(graph, ins))
    # The update moved right before the last op that reads the parameter's old value.
    last_read = max(upd.after)
    early = [x for x in ins if x != (Op.COMPUTE, u)]
    early.insert(early.index((Op.COMPUTE, last_read)), (Op.COMPUTE, u))
    with pytest.raises(UpdateOrderError, match=f"the update runs before node {last_read} .* old value"):
        simulate(graph, costs, _program(graph, early))
    # A reader of the old value recomputed after the update.
    late = list(ins)
    late.insert(late.index((Op.COMPUTE, u)) + 1, (Op.COMPUTE, min(upd.after)))
    with pytest.raises(UpdateOrderError, match=f"update node {u} .* has already overwritten"):
        simulate(graph, costs, _program(graph, late))
    # Apply it twice.
    twice = list(ins)
    twice.insert(twice.index((Op.COMPUTE, u)) + 1, (Op.COMPUTE, u))
    with pytest.raises(UpdateOrderError, match="computed twice"):
        simulate(graph, costs, _program(graph, twice))


def test_frozen_parameters_stay_bitwise_and_the_backward_shrinks() -> None:
    full = trace(net(), parse_optimizer("sgd:lr=0.1,momentum=0.9")).graph
    model = net()
    for p in model.conv1.parameters():
        p.requires_grad_(False)
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    tm = trace(model, parse_optimizer("sgd:lr=0.1,momentum=0.9"))
    assert tm.graph.count("backward") < full.count("backward")
    assert tm.graph.count("update") == full.count("update") - 2
    with ScheduledStep(tm, recompute_and_page(tm.graph)) as step:
        for x, y in map(batch, range(3)):
            step.step((x,), y)
    now = dict(model.named_parameters())
    assert torch.equal(now["conv1.weight"], start["conv1.weight"])
    assert torch.equal(now["conv1.bias"], start["conv1.bias"])
    assert not torch.equal(now["conv2.weight"], start["conv2.weight"])


@pytest.mark.parametrize(("patterns", "trained"), [
    ("bias", ["conv1.bias", "bn.bias", "conv2.bias", "classifier.bias"]),
    ("classifier.*,*.bias", ["conv1.bias", "bn.bias", "conv2.bias", "classifier.weight", "classifier.bias"]),
    ("conv?.weight", ["conv1.weight", "conv2.weight"]),
])
def test_train_patterns(patterns: str, trained: list[str]) -> None:
    model = net()
    assert list(select_trained(model, patterns)) == trained
    assert [n for n, p in model.named_parameters() if p.requires_grad] == trained


def test_train_subset_shrinks_the_backward() -> None:
    full = trace(net(), None).graph
    head = trace(net(), None, train="classifier.*").graph
    assert head.count("backward") < full.count("backward") / 2
    biases = trace(net(), parse_optimizer("sgd:lr=0.1"), train="bias")
    assert biases.graph.count("update") == 4
    assert [n.name for n in biases.graph.nodes if n.kind == "update"] == sorted(
        (f"update.{n}" for n in ("conv1.bias", "bn.bias", "conv2.bias", "classifier.bias")),
        key=[n.name for n in biases.graph.nodes].index)


def test_a_pattern_that_matches_nothing_is_refused() -> None:
    with pytest.raises(FrontendError, match="pattern 'head.*' matches no parameter of Net"):
        select_trained(net(), "classifier.*,head.*")


def test_without_an_optimizer_the_graph_is_unchanged() -> None:
    from poet_compiler.graph.io import graph_to_dict

    a, b = trace(net(), None), trace(net(), None)
    assert graph_to_dict(a.graph) == graph_to_dict(b.graph)
    assert a.graph.count("update") == 0 and not a.graph.has_updates and a.state_names == ()
    assert a.grad_names == tuple(n for n, _ in net().named_parameters())


@pytest.mark.parametrize(("text", "message"), [
    ("rmsprop:lr=1", "unknown optimizer 'rmsprop'"),
    ("sgd:momentum=0.9", "sgd needs lr"),
    ("sgd:lr=0.1,beta1=0.9", "'beta1=0.9' is not key=value with a key of sgd"),
    ("adam:lr=fast", "lr='fast' is not a number"),
    ("sgd:lr=0.1,nesterov=1", "nesterov needs a momentum"),
    ("adam:lr=1e-3,beta2=1", "betas must be in"),
    ("sgd:lr=-1", "lr must be a finite number >= 0"),
])
def test_bad_specs(text: str, message: str) -> None:
    with pytest.raises(FrontendError, match=message):
        parse_optimizer(text)


def test_torch_optim_instances() -> None:
    params = list(net().parameters())
    assert from_torch(torch.optim.SGD(params, lr=0.05, momentum=0.9)) == parse_optimizer("sgd:lr=0.05,momentum=0.9")
    assert from_torch(torch.optim.AdamW(params, lr=1e-3)) == parse_optimizer("adamw:lr=1e-3")
    assert as_optimizer("adam:lr=1e-3") == OptimizerSpec("adam", 1e-3)
    for opt, message in [
        (torch.optim.SGD(params, lr=0.1, momentum=0.9, dampening=0.1), "dampening"),
        (torch.optim.Adam(params, amsgrad=True), "amsgrad"),
        (torch.optim.RMSprop(params), "RMSprop is not supported"),
        (torch.optim.SGD([{"params": params[:2]}, {"params": params[2:]}], lr=0.1), "2 parameter groups"),
    ]:
        with pytest.raises(FrontendError, match=message):
            from_torch(opt)
    assert parse_optimizer("sgd:lr=0.05,momentum=0.9,nesterov=1").describe() == "sgd:lr=0.05,momentum=0.9,nesterov=1"


def test_state_is_counted_and_the_copy_is_independent() -> None:
    model = net()
    ref = copy.deepcopy(model)
    tm = trace(model, parse_optimizer("adam:lr=0.01"))
    assert {n.rpartition("@")[2] for n in tm.state_names} == {"exp_avg", "exp_avg_sq", "step"}
    # Outputs beside the arena: the loss and BatchNorm's new statistics (not the parameters and
    # state, updated in place).
    bn = sum(b.numel() * b.element_size() for b in model.buffers())
    assert tm.graph.grad_bytes == 0 and tm.graph.step_output_bytes == 4 + bn
    assert tm.graph.fixed_bytes == tm.graph.param_bytes + tm.graph.optimizer_state_bytes + tm.graph.input_bytes \
        + tm.graph.step_output_bytes
    # Tracing reads the module; it does not train it.
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), ref.parameters()))
