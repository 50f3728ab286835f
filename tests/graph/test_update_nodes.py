"""Update nodes in poet-graph/1 (docs/training.md): ``after``, the in-place rules, and a
graph file with updates compiled like a traced one (parameters and state counted)."""

from __future__ import annotations

import copy

import pytest

import poet_compiler as pc
from poet_compiler.errors import GraphError
from poet_compiler.graph import graph_from_dict, graph_to_dict

COST = {"compute_s": 0.001, "compute_j": 1e-6, "page_in_s": 0.002, "page_in_j": 2e-6, "page_out_s": 0.002,
        "page_out_j": 2e-6}


def _node(i: int, name: str, kind: str, inputs: list[int], size: int, **extra: object) -> dict:
    return {"id": i, "name": name, "kind": kind, "op": f"x.{name}", "op_class": "elementwise", "inputs": inputs,
            "output_bytes": size, "cost": COST, **extra}


GRAPH = {
    "format": "poet-graph/1",
    "name": "linear_sgd",
    "nodes": [
        _node(0, "fc", "forward", [], 400),
        _node(1, "loss", "loss", [0], 4),
        _node(2, "grad_x", "backward", [1], 400),
        _node(3, "grad_w", "backward", [1], 64),
        _node(4, "update_w", "update", [3], 0, after=[0, 2]),
        _node(5, "tail", "backward", [2], 400),
    ],
    "param_bytes": 64,
    "optimizer_state_bytes": 64,
    "input_bytes": 100,
}


def test_after_round_trips() -> None:
    g = graph_from_dict(GRAPH)
    assert g.nodes[4].after == (0, 2) and g.has_updates
    assert g.last_compute_stage == (4, 5, 4, 5, 4, 5)
    assert graph_to_dict(g)["nodes"][4]["after"] == [0, 2]
    assert "after" not in graph_to_dict(g)["nodes"][0]


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["nodes"][4].update(output_bytes=8), "writes its parameter in place"),
    (lambda d: d["nodes"][4].update(after=[5]), "after 5 is not an earlier node"),
    (lambda d: d["nodes"][2].update(after=[0]), "only update nodes have"),
    (lambda d: d["nodes"][5].update(inputs=[2, 4]), "reads update node 4"),
])
def test_update_rules(change, message: str) -> None:
    d = copy.deepcopy(GRAPH)
    change(d)
    with pytest.raises(GraphError, match=message):
        graph_from_dict(d)


def test_graph_file_with_updates_counts_fixed_bytes_and_keeps_the_order() -> None:
    g = graph_from_dict(GRAPH)
    c = pc.compile(g, None, 1100 + g.fixed_bytes, mode="remat", strategy="optimal", time_limit_s=10)
    assert c.problem.fixed.total == g.fixed_bytes and c.problem.activation_budget == 1100
    assert c.result.ok, c.result.message
    # Never recomputed after the update: the simulator judged the program already.
    seen_update = False
    for ins in c.program.instructions:
        if ins.node == 4 and ins.op.name == "COMPUTE":
            seen_update = True
        assert not (seen_update and ins.op.name == "COMPUTE" and ins.node in (0, 2))
