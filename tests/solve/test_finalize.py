"""finalize: every Result figure comes from the simulator; budgets and gaps are honest."""

from __future__ import annotations

import pytest

from poet_compiler.schedule.linearize import linearize
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.schedule.simulate import simulate
from poet_compiler.solve.finalize import finalize, result_of
from poet_compiler.solve.problem import Problem
from poet_compiler.solve.tuning import TUNING
from tests.support.graphs import (
    cost_table_from_graph,
    forward_backward_chain,
    random_problem,
)
from tests.support.oracle import as_program, brute_force


def test_checkpoint_all_result():
    g = forward_backward_chain(2)
    p = Problem(graph=g, costs=cost_table_from_graph(g), ram_budget_bytes=64)
    r = finalize(p, Schedule.checkpoint_all(g.n), strategy="checkpoint_all", lower_bound_j=4.0)
    assert r.status == "feasible" and r.ok
    assert (r.energy_j, r.runtime_s, r.peak_ram_bytes, r.arena_bytes) == (5.0, 5.0, 40, 40)
    assert (r.n_compute, r.n_page_in, r.n_page_out, r.n_nodes) == (5, 0, 0, 5)
    assert r.gap == pytest.approx(0.2) and r.notes.fragmentation == 1.0
    assert r.report()["arena_bytes"] == 40
    simulate(g, p.costs, r.program, ram_budget_bytes=64)


def test_over_budget_and_deadline_are_infeasible_with_reason():
    g = forward_backward_chain(2)
    costs = cost_table_from_graph(g)
    r = finalize(Problem(graph=g, costs=costs, ram_budget_bytes=25), Schedule.checkpoint_all(g.n), strategy="x")
    assert r.status == "infeasible" and "peak live bytes 40 exceed the activation budget 25" in r.message
    assert r.energy_j == 5.0          # figures are still reported
    r = finalize(Problem(graph=g, costs=costs, ram_budget_bytes=64, deadline_s=4.0),
                 Schedule.checkpoint_all(g.n), strategy="x", status="optimal")
    assert r.status == "infeasible" and "exceeds the deadline" in r.message


@pytest.mark.parametrize("seed", range(10))
def test_optimal_schedules_round_trip(seed):
    problem = random_problem(seed, 6, "poet")
    found = brute_force(problem)
    if found is None:
        pytest.skip("infeasible budget")
    program = as_program(problem, found[1])
    r = finalize(problem, program, strategy="oracle", status="optimal", lower_bound_j=found[0])
    assert r.energy_j == pytest.approx(found[0]) and r.gap == pytest.approx(0.0, abs=1e-12)
    assert r.peak_ram_bytes <= problem.activation_budget
    assert r.arena_bytes >= r.peak_ram_bytes
    if r.arena_bytes <= problem.activation_budget:
        assert r.status == "optimal"
    else:   # fragmentation: reported, not hidden
        assert r.status == "infeasible" and "arena" in r.message
    # Same inputs, same program.
    again = finalize(problem, program, strategy="oracle", status="optimal", lower_bound_j=found[0])
    assert again.program == r.program


def test_accepts_a_program():
    g = forward_backward_chain(2)
    p = Problem(graph=g, costs=cost_table_from_graph(g), ram_budget_bytes=64)
    r = finalize(p, linearize(g, Schedule.checkpoint_all(g.n)), strategy="p")
    assert r.schedule is None and r.energy_j == 5.0 and r.program.arena_bytes == 40


@pytest.mark.parametrize("exact_max", [10_000, 0])
def test_the_harder_plan_runs_only_where_the_exact_packing_does(monkeypatch, exact_max: int) -> None:
    """A schedule whose first arena is over the budget (made so here) is planned again
    harder only if the planner's exact packing applies to it; beyond that, compaction
    lays it out without that plan (on gpt2_large_mini it took 103 s for nothing)."""
    import poet_compiler.schedule.arena as arena
    from poet_compiler.solve.finalize import Layout, finalize_plan
    from tests.support.fragmentation import costlier_below_peak, wasting

    efforts: list[int] = []
    waste = wasting(3)

    def wasteful(graph, program, **kw):  # noqa: ANN001, ANN003, ANN202
        efforts.append(kw.get("effort", 0))
        return waste(graph, program, **kw)

    monkeypatch.setattr(arena, "EXACT_MAX_BUFFERS", exact_max)   # the schedule layer's, read by finalize
    problem, _, _ = next(costlier_below_peak(3))
    optimum = brute_force(problem)
    assert optimum is not None
    done = finalize_plan(problem, as_program(problem, optimum[1]), strategy="t", arena_time_s=30.0,
                         layout=Layout(plan_arena=wasteful))
    res = result_of(problem, done, strategy="t")
    assert res.ok and res.arena_bytes <= problem.activation_budget
    assert res.program.meta["arena_order"] == "compacted"
    assert efforts == ([0, TUNING.arena_retry_effort] if exact_max else [0])
