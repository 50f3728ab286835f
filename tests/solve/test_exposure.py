"""The paging time that outlasts its stage (solve/exposure.py), in the deep cover: a bound
of the stage-long family, checked against that family's optimum (the fast formulation
solved to optimality) and, on a hand-built graph, against the program-level oracle."""

from __future__ import annotations

import pytest

from poet_compiler.graph.ir import Node, NodeCost, TrainingGraph
from poet_compiler.graph.validate import validate
from poet_compiler.solve.budgets import reference
from poet_compiler.solve.cover import cover_bound, deeper_cover
from poet_compiler.solve.exposure import applies
from poet_compiler.solve.formulation import build
from poet_compiler.solve.problem import Problem
from poet_compiler.solvers import BackendOptions, solve_model
from tests.support.graphs import cost_table_from_graph, training_problem
from tests.support.oracle import brute_force


def _node(i: int, inputs: tuple[int, ...], size: int, name: str, kind: str = "forward", *,
          page_out_s: float = 0.5, workspace: int = 0, pinned: bool = False) -> Node:
    """1 J and 1 s per compute; page-ins 0.1 J and 0.5 s, page-outs 0.1 J and ``page_out_s``."""
    cost = NodeCost(compute_s=1.0, compute_j=1.0, page_in_s=0.5, page_in_j=0.1, page_out_s=page_out_s, page_out_j=0.1)
    return Node(id=i, name=name, kind=kind, op="test.op", op_class="other", inputs=inputs, output_bytes=size,
                workspace_bytes=workspace, pinned=pinned, cost=cost)


def test_a_page_out_longer_than_its_stage_pays_static_power() -> None:
    """x (pinned) -> f1 -> f2 -> f3 -> loss, x, f1 and f2 saved for their gradients; f3's
    workspace makes the peak, where f1 must be out of RAM. Paging it costs 0.2 J of
    transfers, but its page-out (3 s) can only overlap f2's compute (1 s; f1 is read
    there), so the step is 2 s longer: 2 J more at 1 W. Recomputing f1 costs 1 J and 1 s:
    2 J, the optimum (the program-level oracle). The cover charged paging no time (its
    bound: compute-once + 0.2 J); the deep cover's exposure proves the optimum."""
    graph = validate(TrainingGraph(name="slow_page_out", nodes=(
        _node(0, (), 10, "x", pinned=True), _node(1, (0,), 10, "f1", page_out_s=3.0),
        _node(2, (1,), 10, "f2"), _node(3, (2,), 2, "f3", workspace=60), _node(4, (3,), 2, "loss", "loss"),
        _node(5, (2, 4), 10, "g2", "backward"), _node(6, (0, 1, 5), 10, "g1", "backward"))))
    costs = cost_table_from_graph(graph, static_w=1.0, dma=True)
    problem = Problem(graph=graph, costs=costs, ram_budget_bytes=reference(graph, costs).peak_bytes - 1)
    assert applies(problem)
    exact = brute_force(problem)
    assert exact is not None and exact[0] == pytest.approx(costs.compute_only_j + 2.0)
    cover = cover_bound(problem)
    assert cover.closed and cover.energy_j == pytest.approx(costs.compute_only_j + 0.2)
    deep = deeper_cover(problem, cover, time_limit_s=10.0)
    assert deep.closed and deep.energy_j == pytest.approx(exact[0])
    assert deep.restores == cover.restores      # the bound only: the guide stays the cover's


@pytest.mark.parametrize("mode", ["poet", "paging"])
def test_the_deep_cover_is_below_the_stage_long_optimum(mode: str) -> None:
    """Random training-shaped graphs with DMA, static power and/or a deadline: the
    deep cover never goes above the optimum of the family it bounds, and the exposure
    raises it above the cover on some."""
    raised = checked = 0
    for seed in range(18):
        # Static power, static power and a deadline, or a deadline alone (no static power:
        # the excess counts against the deadline's slack only).
        static_w, deadline = ((0.3, False), (1.0, True), (0.0, True))[seed % 3]
        problem = training_problem(seed, 6, mode, dma=True, static_w=static_w, deadline=deadline)
        assert applies(problem)
        cover = cover_bound(problem)
        if cover.infeasible:
            continue
        out = solve_model(build(problem, "fast").model, "cpsat", BackendOptions(time_limit_s=60, threads=2))
        if out.status == "infeasible":
            continue            # the cover need not see every infeasibility
        assert out.status == "optimal", out.message
        deep = deeper_cover(problem, cover, time_limit_s=10.0)
        assert deep.energy_j is not None and cover.energy_j is not None
        assert cover.energy_j <= deep.energy_j <= out.objective * (1 + 1e-7) + 1e-12, f"seed {seed}"
        checked += 1
        raised += deep.energy_j > cover.energy_j * (1 + 1e-6)
    assert checked >= 4 and raised >= 2, (checked, raised)
