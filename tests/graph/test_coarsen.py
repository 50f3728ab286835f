"""Module-level coarsening keeps a DAG with exact or conservative memory figures."""

from __future__ import annotations

import pytest

from poet_compiler.graph.coarsen import coarsen, coarsen_by_module, module_groups
from poet_compiler.graph.ir import Node, TrainingGraph


def _node(i: int, prov: str, kind: str, inputs: tuple[int, ...], size: int) -> Node:
    return Node(id=i, name=f"n{i}", kind=kind, op="x", op_class="elementwise", inputs=inputs,
                output_bytes=size, flops=10, extra={"provenance": prov})


def _chain() -> TrainingGraph:
    nodes = (
        _node(0, "a", "forward", (), 100),
        _node(1, "a", "forward", (0,), 10),      # internal to group a? no: read by 3 below
        _node(2, "b", "forward", (1,), 50),
        _node(3, "b", "forward", (2,), 5),
        _node(4, "b", "backward", (3, 1), 7),
    )
    return TrainingGraph(name="t", nodes=nodes)


def test_groups_are_consecutive_runs_of_kind_and_module() -> None:
    assert module_groups(_chain()) == [[0, 1], [2, 3], [4]]


def test_group_bytes_and_workspace() -> None:
    g, groups = coarsen_by_module(_chain())
    assert g.n == 3
    a, b, back = g.nodes
    assert a.output_bytes == 10 and a.workspace_bytes == 100      # node 0 only lives inside the group
    assert b.output_bytes == 5 and b.workspace_bytes == 50
    assert back.inputs == (0, 1) and b.inputs == (0,)
    assert a.flops == 20 and a.extra["members"] == ["n0", "n1"]


def test_rejects_non_consecutive_groups() -> None:
    with pytest.raises(ValueError):
        coarsen(_chain(), [[0, 2], [1, 3, 4]])


def test_traced_model_coarsening_keeps_every_fx_op() -> None:
    import models

    from poet_compiler.frontends import trace_zoo

    tm = trace_zoo("resnet18_cifar", granularity="module", batch=2)
    op = trace_zoo("resnet18_cifar", batch=2)
    assert sorted(f for fx in tm.node_fx for f in fx) == sorted(f for fx in op.node_fx for f in fx)
    assert tm.graph.n < op.graph.n
    assert tm.graph.count("forward") and tm.graph.count("backward")
    # Whatever leaves a group is exactly the op-level bytes of the members read outside it.
    assert sum(n.output_bytes for n in tm.graph.nodes) <= op.graph.activation_bytes
    assert models.get("resnet18_cifar").default_batch == 16
