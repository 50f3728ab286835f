"""Layer granularity: contiguous DAG-preserving groups, exact exported bytes, conservative
peaks close to op level, and coarse TracedModels that execute bitwise like the op graph."""

from __future__ import annotations


import pytest
import torch
import torch.fx

from poet_compiler.errors import FrontendError
from poet_compiler.graph.coarsen import (
    HEAVY_CLASSES, coarsen, coarsen_to, group_excess, groups_for, layer_groups, merge_groups,
)
from poet_compiler.graph.ir import Node, TrainingGraph
from poet_compiler.graph.validate import validate

ZOO = ("resnet18_cifar", "vgg16_cifar", "bert_tiny")


def _n(i: int, kind: str, cls: str, inputs: tuple[int, ...], size: int, prov: str = "") -> Node:
    return Node(id=i, name=f"n{i}", kind=kind, op=cls, op_class=cls, inputs=inputs, output_bytes=size,  # type: ignore[arg-type]
                flops=i + 1, extra={"provenance": prov or f"m{i}"})


def _toy() -> TrainingGraph:
    """conv, bn, relu, conv, bn, relu, loss, then the backward chain."""
    f = "forward"
    nodes = [
        _n(0, f, "conv", (), 100), _n(1, f, "norm", (0,), 100), _n(2, f, "elementwise", (1,), 100),
        _n(3, f, "conv", (2,), 50), _n(4, f, "norm", (3,), 50), _n(5, f, "elementwise", (4,), 50),
        _n(6, "loss", "reduction", (5,), 4), _n(7, "loss", "data", (6,), 4),
        _n(8, "backward", "elementwise", (5, 7), 50), _n(9, "backward", "norm", (3, 8), 50),
        _n(10, "backward", "conv", (2, 9), 100), _n(11, "backward", "elementwise", (2, 10), 100),
        _n(12, "backward", "norm", (0, 11), 100), _n(13, "backward", "conv", (12,), 8),
    ]
    return TrainingGraph(name="toy", nodes=tuple(nodes))


def _check_partition(graph: TrainingGraph, groups: list[list[int]]) -> None:
    assert [i for g in groups for i in g] == list(range(graph.n))      # contiguous, in order
    for g in groups:
        assert g == list(range(g[0], g[-1] + 1))
        assert len({graph.nodes[i].kind for i in g}) == 1                # kinds never mixed


def _check_coarse(graph: TrainingGraph, coarse: TrainingGraph, groups: list[list[int]]) -> None:
    validate(coarse)                                                      # a DAG in topological order
    assert sum(n.flops for n in coarse.nodes) == sum(n.flops for n in graph.nodes)
    assert sum(n.bytes_accessed for n in coarse.nodes) == sum(n.bytes_accessed for n in graph.nodes)
    gid = {i: k for k, g in enumerate(groups) for i in g}
    for k, g in enumerate(groups):
        exported = [i for i in g if not graph.consumers[i] or any(gid[c] != k for c in graph.consumers[i])]
        assert coarse.nodes[k].output_bytes == sum(graph.nodes[i].output_bytes for i in exported)
        assert set(coarse.nodes[k].inputs) == {gid[j] for i in g for j in graph.nodes[i].inputs} - {k}


def test_toy_layers_group_each_heavy_op_with_its_cheap_ops() -> None:
    g = _toy()
    groups = layer_groups(g, slack=float("inf"))
    _check_partition(g, groups)
    # Without extra cuts: one group per heavy op, the loss as one group.
    assert len(groups) == 5 and [6, 7] in groups
    assert all(sum(g.nodes[i].op_class in HEAVY_CLASSES for i in grp) == 1 for grp in groups if grp != [6, 7])
    _check_coarse(g, coarsen(g, groups), groups)


@pytest.mark.parametrize("slack", [0.0, 0.02, float("inf")])
def test_every_layer_group_holds_at_most_one_heavy_span(slack: float) -> None:
    g = _toy()
    groups = layer_groups(g, slack=slack)
    _check_partition(g, groups)
    for grp in groups:
        heavy = [i for i in grp if g.nodes[i].op_class in HEAVY_CLASSES]
        assert len(heavy) <= 1


def test_group_excess_is_zero_for_single_ops_and_counts_held_bytes() -> None:
    g = _toy()
    assert all(group_excess(g, i, i) == 0 for i in range(g.n))
    # Backward [9, 10]: input 8 (50 B) dies at 9 but is held while 10 runs.
    assert group_excess(g, 9, 10) >= 50


def test_merge_groups_reaches_target_within_kinds() -> None:
    g = _toy()
    merged = merge_groups(g, [[i] for i in range(g.n)], 4)
    _check_partition(g, merged)
    assert len(merged) == 4 or len(merged) == 3
    # Three kind runs cannot merge further.
    assert len(merge_groups(g, [[i] for i in range(g.n)], 1)) == 3
    with pytest.raises(FrontendError):
        merge_groups(g, [[0]], 0)


def test_unknown_granularity_is_a_frontend_error() -> None:
    with pytest.raises(FrontendError, match="granularity"):
        groups_for(_toy(), "block")


# ---- zoo models -----------------------------------------------------------------------

class _Traced(dict):
    """Zoo models traced at batch 2 on first use, once per test process."""

    def __missing__(self, name: str) -> object:
        from poet_compiler.frontends import trace_zoo

        self[name] = trace_zoo(name, batch=2)
        return self[name]


_TRACED = _Traced()


@pytest.fixture()
def traced() -> _Traced:
    return _TRACED


@pytest.mark.parametrize("name", ZOO)
def test_zoo_layer_graphs_are_small_exact_and_conservative(traced: dict, name: str) -> None:
    from poet_compiler.api import load_costs
    from poet_compiler.solve.budgets import reference

    op = traced[name].graph
    coarse, groups = coarsen_to(op, "layer")
    _check_partition(op, groups)
    _check_coarse(op, coarse, groups)
    assert coarse.n <= 0.35 * op.n
    assert coarse.count("forward") and coarse.count("backward") and coarse.count("loss") >= 1
    op_peak = reference(op, load_costs(op, "m4")).peak_bytes
    layer_peak = reference(coarse, load_costs(coarse, "m4")).peak_bytes
    # Coarsening is never optimistic, and the DP keeps the price small (measured <= 6%).
    assert op_peak <= layer_peak <= 1.10 * op_peak


def test_auto_caps_the_node_count(traced: dict) -> None:
    op = traced["resnet18_cifar"].graph
    coarse, groups = coarsen_to(op, "layer", max_nodes=20)
    _check_partition(op, groups)
    _check_coarse(op, coarse, groups)
    assert coarse.n <= 20
    assert coarsen_to(op, "auto")[0].n <= 80


def _run_coarse(tm) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Execute ``tm`` node by node (every node's FX list in order), freeing a node's
    values after the last node that reads it: the executor's contract."""
    gm = tm.gm
    by_name = {n.name: n for n in gm.graph.nodes}
    interp = torch.fx.Interpreter(gm)
    env: dict[torch.fx.Node, object] = {}
    interp.env = env
    for node, value in zip((n for n in gm.graph.nodes if n.op == "placeholder"), tm.flat_args()):
        env[node] = value
    outputs = tm.output_names
    got: dict[str, torch.Tensor] = {}
    graph = tm.graph
    last_reader = [max(c) if c else i for i, c in enumerate(graph.consumers)]
    with torch.no_grad():
        for name in tm.prelude_fx:
            env[by_name[name]] = interp.run_node(by_name[name])
        for k, names in enumerate(tm.node_fx):
            for name in names:
                env[by_name[name]] = interp.run_node(by_name[name])
                if name in outputs:
                    got[name] = env[by_name[name]]
            for j in range(k + 1):
                if last_reader[j] == k:
                    for name in tm.node_fx[j]:
                        env.pop(by_name[name], None)
    for name in outputs:
        if name not in got:  # outputs computed in the prelude or passed through
            got[name] = env[by_name[name]]
    grads = {g: got[outputs[1 + i]] for i, g in enumerate(tm.grad_names)}
    return got[outputs[0]], grads


# Small models: CPU convolution backward makes a resnet18 step take seconds.
@pytest.mark.parametrize("name", ["cifar_cnn_tiny", "bert_tiny"])
def test_coarse_traced_model_runs_bitwise_like_the_reference(traced: dict, name: str) -> None:
    from poet_compiler.graph.coarsen import coarsen_traced

    op = traced[name]
    tm = coarsen_traced(op, "layer")
    assert tm.granularity == "layer" and tm.graph.n == len(tm.node_fx)
    # The coarse FX lists are the op-level lists concatenated per group, in order.
    assert [f for fx in tm.node_fx for f in fx] == [f for fx in op.node_fx for f in fx]
    assert all(tm.fx_owner[f] == k for k, fx in enumerate(tm.node_fx) for f in fx)
    loss, grads = _run_coarse(tm)
    ref_loss, ref_grads = op.run_reference()
    assert torch.equal(loss, ref_loss)
    assert grads.keys() == ref_grads.keys()
    assert all(torch.equal(grads[k], ref_grads[k]) for k in grads)


def test_coarsen_traced_rejects_coarse_input(traced: dict) -> None:
    from poet_compiler.graph.coarsen import coarsen_traced

    with pytest.raises(FrontendError, match="op-level"):
        coarsen_traced(coarsen_traced(traced["bert_tiny"], "layer"), "layer")


def test_frontend_accepts_layer_granularity() -> None:
    from poet_compiler.frontends import load_graph

    g = load_graph("mlp", granularity="layer", batch=2)
    assert g.n < load_graph("mlp", batch=2).n
    with pytest.raises(FrontendError, match="granularity"):
        load_graph("mlp", granularity="block")


