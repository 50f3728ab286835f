"""The interval search inside ``optimal``: used when no schedule is in hand on a large graph."""

from __future__ import annotations

import time

import pytest

from poet_compiler.solve import guided, milp, presence_stage
from poet_compiler.solve.milp import solve_milp
from poet_compiler.solve.problem import Problem
from tests.support import oracle
from tests.support.graphs import cost_table_from_graph, forward_backward_chain


def test_no_schedule_in_hand_runs_the_interval_search(monkeypatch) -> None:
    """A forward/backward chain at the working set of one node, with the size threshold
    lowered to this graph and no schedule in hand (the heuristics and the cover's
    realization made to find none, as on a random layered DAG): ``optimal`` runs the
    interval search, which needs more than 3 copies here, and ends at the oracle's optimum."""
    graph = forward_backward_chain(6)
    problem = Problem(graph=graph, costs=cost_table_from_graph(graph), ram_budget_bytes=30, mode="remat")
    monkeypatch.setattr(guided, "INTERVAL_MIN_NODES", 5)
    monkeypatch.setattr(milp, "warm_start_candidates", lambda *_a, **_k: [])
    monkeypatch.setattr(guided, "cover_schedule", lambda *_a, **_k: None)
    monkeypatch.setattr(presence_stage, "PRESENCE_MAX_PAIRS", 0)   # its realization would be a schedule in hand
    res = solve_milp(problem, time_limit_s=60, gap_limit=0.0)
    assert res.extra.interval is not None and res.extra.interval["copies"] > 3, res.extra.interval
    best = oracle.search(problem)
    assert best is not None and res.ok
    assert res.energy_j == pytest.approx(best.energy_j, rel=1e-6)


def test_a_fragmented_optimum_is_kept_compacted() -> None:
    """A 9-node training problem whose interval optimum (25.175 J) has live bytes within
    the budget (24,576 of 25,292 B) but no static arena that fits (25,600 B): its arena
    is compacted (MOVEs), and the search returns the optimum without solving again."""
    from poet_compiler.schedule.program import Op
    from poet_compiler.solve import interval_search as search
    from tests.support.graphs import training_problem

    problem = training_problem(3, 4, "remat", slack=0.3)
    out = search.interval_search(problem, [], time_limit_s=30, threads=1)
    assert out.schedule is not None and out.arena_fits and out.arena_retries == 0
    assert out.energy_j == pytest.approx(25.175)
    assert out.layout is not None and out.layout.count(Op.MOVE) >= 1
    assert out.layout.arena_bytes is not None and out.layout.arena_bytes <= problem.activation_budget


def test_a_fragmented_schedule_is_solved_again_with_arena_reserves(monkeypatch) -> None:
    """The same optimum where compaction finds no room (as with buffers in flight): the
    search keeps free, where that layout overflowed, what it overflowed by, solves
    again, and returns a schedule whose laid-out arena fits."""
    import poet_compiler.solve.finalize as fin
    from poet_compiler.solve import interval_search as search
    from poet_compiler.solve.finalize import finalize
    from tests.support.graphs import training_problem

    monkeypatch.setattr(fin, "compact_arena", lambda *a, **kw: None)
    problem = training_problem(3, 4, "remat", slack=0.3)
    seen: list[int] = []
    real_solve = search._solve

    def spy(problem_, sync, usable, copies, until, target_j, threads, reserves, least_ram=False):
        if not least_ram:       # the energy model's solves (the least-RAM search runs first)
            seen.append(len(reserves))
        return real_solve(problem_, sync, usable, copies, until, target_j, threads, reserves, least_ram)

    monkeypatch.setattr(search, "_solve", spy)
    out = search.interval_search(problem, [], time_limit_s=30, threads=1)
    assert seen[0] == 0 and seen[-1] > 0 and out.arena_retries == len(seen) - 1 >= 1
    assert out.schedule is not None and out.arena_fits and out.layout is not None
    assert out.layout.arena_bytes is not None and out.layout.arena_bytes <= problem.activation_budget
    res = finalize(problem, out.schedule, strategy="interval", layout=out.layout)
    assert res.ok and res.energy_j == pytest.approx(out.energy_j)


def test_reserves_that_leave_no_schedule_are_halved(monkeypatch) -> None:
    """When the solve with arena reserves finds nothing (here: made to), the next one keeps
    half as many bytes free at the same events, instead of giving up (compaction made to
    find no room, so that reserves are made)."""
    import poet_compiler.solve.finalize as fin
    from poet_compiler.solve import interval_search as search
    from tests.support.graphs import training_problem

    monkeypatch.setattr(fin, "compact_arena", lambda *a, **kw: None)
    problem = training_problem(3, 4, "remat", slack=0.3)
    seen: list[list] = []
    real_solve = search._solve

    def spy(problem_, sync, usable, copies, until, target_j, threads, reserves, least_ram=False):
        if least_ram:
            return real_solve(problem_, sync, usable, copies, until, target_j, threads, reserves, least_ram)
        seen.append(list(reserves))
        if len(seen) == 2:
            return search.IntervalOutcome(None, None, copies=copies, status="unknown")
        return real_solve(problem_, sync, usable, copies, until, target_j, threads, reserves, least_ram)

    monkeypatch.setattr(search, "_solve", spy)
    search.interval_search(problem, [], time_limit_s=30, threads=1)
    assert len(seen) >= 3 and not seen[0] and seen[1]
    assert [(r.start, r.end) for r in seen[2]] == [(r.start, r.end) for r in seen[1]]
    assert [r.bytes for r in seen[2]] == [r.bytes // 2 for r in seen[1]]


def test_a_first_solve_that_finds_nothing_is_followed_by_another(monkeypatch) -> None:
    """With no schedule in hand, a first solve that neither finds one nor proves there is
    none (here: made to) does not end the search while time is left."""
    from poet_compiler.solve import interval_search as search
    from tests.support.graphs import training_problem

    problem = training_problem(2, 4, "remat", slack=0.3)
    calls: list[int] = []
    real_solve = search._solve

    def spy(problem_, sync, usable, copies, until, target_j, threads, reserves, least_ram=False):
        calls.append(1)
        if len(calls) == 1:
            return search.IntervalOutcome(None, None, copies=copies, status="unknown")
        return real_solve(problem_, sync, usable, copies, until, target_j, threads, reserves, least_ram)

    monkeypatch.setattr(search, "_solve", spy)
    out = search.interval_search(problem, [], time_limit_s=30, threads=1)
    assert len(calls) >= 2 and out.schedule is not None and out.arena_fits


def test_the_arena_fit_fallback_falls_back_on_the_interval_search(monkeypatch) -> None:
    """When the cover's arena-fit schedule is missing, the fallback that keeps a schedule
    whose static arena fits asks the interval search (graphs above its size threshold)."""
    import time

    from poet_compiler.solve.clock import Clock
    from poet_compiler.solve.cover import cover_bound
    from poet_compiler.solve.result import ResultExtra
    from tests.support.graphs import training_problem

    problem = training_problem(5, 4, "remat", slack=0.3)
    monkeypatch.setattr(guided, "INTERVAL_MIN_NODES", 5)
    monkeypatch.setattr(milp, "cover_schedule", lambda *_a, **_k: None)
    res = milp._arena_fit_fallback(problem, problem, cover_bound(problem), "auto", "fast", time.perf_counter(),
                                   ResultExtra(), Clock(30.0), 1)
    assert res is not None and res.ok and res.extra.solver_used == "interval (arena fit)"
    assert res.arena_bytes is not None and res.arena_bytes <= problem.activation_budget


def test_a_timeout_names_the_least_ram_the_search_reached() -> None:
    """When the least-RAM search ran out of time above the budget, the timeout's message
    gives the least RAM it reached (a budget to try); otherwise the message is unchanged."""
    from poet_compiler.solve.milp import with_least_ram
    from poet_compiler.solve.result import ResultExtra
    from tests.support.graphs import training_problem

    problem = training_problem(3, 4, "remat")
    budget = problem.activation_budget
    above = ResultExtra(interval={"least_ram_bytes": budget + budget // 4})
    msg = with_least_ram("timeout: no schedule", above, problem)
    assert msg.startswith("timeout: no schedule; the least activation RAM of a schedule found was ")
    assert "(125% of the budget's" in msg
    assert with_least_ram("m", ResultExtra(interval={"least_ram_bytes": budget}), problem) == "m"
    assert with_least_ram("m", ResultExtra(), problem) == "m"


def test_above_the_full_model_size_the_interval_model_takes_its_place() -> None:
    """Above FULL_MODEL_MAX_NODES nothing but the guided stage ran: now the interval search
    runs from the kept schedule with the time left and the better schedule is kept — never
    below the program optimum (the oracle), never worse than what was kept."""
    import time

    from poet_compiler.solve.clock import Clock
    from poet_compiler.solve.cover import cover_bound
    from poet_compiler.solve.finalize import finalize
    from poet_compiler.solve.result import ResultExtra
    from poet_compiler.solve.warm_start import warm_start_candidates
    from tests.support.graphs import training_problem

    problem = training_problem(4, 4, "remat", slack=0.3)
    worst = max(warm_start_candidates(problem, None), key=lambda c: c[0])
    kept = finalize(problem, worst[2], strategy="optimal", status="feasible")
    assert kept.ok
    cover = cover_bound(problem)
    extra = ResultExtra()
    res = milp._interval_for_full_model(problem, problem, cover, None, kept, extra, solver="auto",
                                        formulation="fast", clock=Clock(30.0), finalize_s=0.0, threads=1,
                                        gap=0.0, started=time.perf_counter())
    best = oracle.search(problem)
    assert best is not None and res.ok and res.energy_j is not None
    assert best.energy_j * (1 - 1e-6) <= res.energy_j <= kept.energy_j
    assert extra.interval is not None and extra.interval["energy_j"] is not None
    # Here (seed 4) the worst heuristic schedule is 19.366 J and the interval search's 17.843 J.
    assert res.energy_j < kept.energy_j and res.extra.solver_used == "interval"


def test_the_least_ram_search_starts_from_an_eviction_plan() -> None:
    """DAG 250 at 80 % (no heuristic fits): the least-RAM search's start is an
    offline-eviction plan between the budget and checkpoint-all's peak, a valid schedule
    (the simulator replays it) that the interval model holds with at most MAX_COPIES
    stays per tensor; in paging mode (no recomputation) there is none."""
    import dataclasses
    import time

    from poet_compiler.devices.cost_model import costs_for
    from poet_compiler.solve import interval_search as search
    from poet_compiler.solve.budgets import reference, resolve_ram
    from poet_compiler.solve.formulation.interval import stays_needed
    from poet_compiler.solve.problem import simulate_schedule
    from tests.support.layered import layered_graph

    graph = layered_graph(250)
    costs = costs_for(graph, None)
    ref = reference(graph, costs)
    problem = Problem(graph, costs, resolve_ram("80%", ref, costs), mode="remat")
    start = search._eviction_start(problem, time.perf_counter() + 60)
    assert start is not None
    peak = simulate_schedule(problem, start).peak_bytes
    assert problem.activation_budget < peak < ref.peak_bytes
    assert stays_needed(start) <= search.MAX_COPIES
    assert search._eviction_start(dataclasses.replace(problem, mode="paging"), time.perf_counter() + 60) is None


def test_the_least_ram_model_runs_the_interleaved_search(monkeypatch) -> None:
    """On two workers the least-RAM model runs CP-SAT's interleaved search (on DAG 250 at
    80 % it reached the budget after 61.4 and 61.3 s, the default search after 39-114 s),
    the energy model the default one. Twice from the same start, the least-RAM search
    returns a schedule within the budget (not always the same schedule: under CI's load
    two runs differed; it stops at the first one within the budget)."""
    from poet_compiler.devices.cost_model import costs_for
    from poet_compiler.solve import interval_search as search
    from poet_compiler.solve.budgets import reference, resolve_ram
    from poet_compiler.solve.problem import feasible_energy
    from tests.support.layered import layered_graph

    graph = layered_graph(40)
    costs = costs_for(graph, None)
    problem = Problem(graph, costs, resolve_ram("80%", reference(graph, costs), costs), mode="remat")
    seen: list[bool] = []
    real = search.solve_native

    def spy(model, limits, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        seen.append(limits.interleave)
        return real(model, limits, *args, **kwargs)

    monkeypatch.setattr(search, "solve_native", spy)
    runs = [search._least_ram_search(problem, problem, 3, time.perf_counter() + 30, 2) for _ in range(2)]
    assert seen and all(seen)
    assert all(r.schedule is not None and feasible_energy(problem, r.schedule) is not None for r in runs)
    assert all(r.least_ram_bytes is not None and r.least_ram_bytes <= problem.activation_budget for r in runs)
    seen.clear()
    out = search.interval_search(problem, [runs[0].schedule], time_limit_s=20, threads=2)   # type: ignore[list-item]
    assert out.schedule is not None and seen and not any(seen)
