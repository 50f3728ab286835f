"""The interval formulation against the program-level oracle and the simulator.

Its optimum is over a restriction of the Programs (at most C stays per tensor, page-ins
in the tensor's own slot), so it may be above the oracle's optimum but never below it;
and its memory and time rules are its own, so every schedule it decodes must pass the
simulator at the model's own figures. A model that counted too little RAM or time would
fail both checks.
"""

from __future__ import annotations

import itertools

import pytest

from poet_compiler.solve.backends.native import NativeLimits, solve_native
from poet_compiler.solve.baselines.keep_all import checkpoint_all_schedule
from poet_compiler.solve.formulation.interval import (
    DEFAULT_COPIES,
    build_interval,
    decode,
    event,
    hint,
    stage_of,
    stays_needed,
)
from poet_compiler.solve.interval_search import interval_search
from poet_compiler.solve.problem import Problem, feasible_energy, simulate_schedule
from poet_compiler.solve.warm_start import warm_start_candidates
from tests.support import oracle
from tests.support.graphs import cost_table_from_graph, forward_backward_chain, training_problem

REL = 1e-6
CASES = [(seed, mode, sw, dl) for seed, mode, (sw, dl) in
         itertools.product(range(16), ("poet", "remat", "paging"), [(0.0, False), (0.2, True)])]


def test_events_and_stages_round_trip() -> None:
    n = 60
    for t in range(n):
        for k in range(t + 1):
            assert stage_of(event(t, k, n), n) == t


@pytest.mark.parametrize("seed, mode, static_w, deadline", CASES)
def test_interval_optimum_is_a_real_program_never_below_the_oracle(seed, mode, static_w, deadline) -> None:
    problem = training_problem(seed, 3, mode, static_w=static_w, deadline=deadline)
    best = oracle.search(problem)
    im = build_interval(problem, copies=4)
    res = solve_native(im.model, NativeLimits(time_limit_s=30, workers=1))
    if best is None:
        # No program exists: neither can a schedule of the restriction.
        assert res.status == "infeasible", res.status
        return
    assert res.status in ("optimal", "infeasible"), res.status
    if res.status == "infeasible":
        return      # the optimum needs more than the model's stays (a restriction)
    schedule = decode(im, res.value)
    sim = simulate_schedule(problem, schedule, ram_budget_bytes=problem.activation_budget,
                            deadline_s=problem.deadline_s)
    model_j = (res.objective or 0.0) * im.obj_unit + im.obj_const
    assert sim.energy_j == pytest.approx(model_j, rel=1e-5)
    assert sim.energy_j >= best.energy_j * (1 - REL), (sim.energy_j, best.energy_j)
    assert im.energy_bound(res.bound or 0.0) <= sim.energy_j * (1 + REL)


@pytest.mark.parametrize("seed", range(12))
def test_a_recompute_schedule_is_a_solution(seed) -> None:
    """Without paging the model represents a stage schedule exactly: a heuristic's
    schedule, with as many copies as it has stays per tensor, is a solution of the model
    with every variable fixed to the hint (the model accepts what the simulator accepts).
    With paging it need not be (a page-in sits in its tensor's slot, holding RAM from
    there); hints are then only a start."""
    problem = training_problem(seed, 4, "remat", slack=0.3)
    for _energy, _name, schedule in warm_start_candidates(problem, None):
        copies = stays_needed(schedule)
        im = build_interval(problem, copies=max(2, copies))
        assert hint(im, schedule)
        res = solve_native(im.model, NativeLimits(time_limit_s=20, workers=1, fix_to_hint=True))
        assert res.status in ("optimal", "feasible"), res.status
        assert feasible_energy(problem, decode(im, res.value)) is not None


def test_interval_search_on_stage_long_transfers_keeps_only_valid_schedules() -> None:
    """With DMA and a deadline the search's synchronous schedule is carried over to
    stage-long transfers only when the simulator accepts it there."""
    kept = 0
    for seed in range(6):
        problem = training_problem(seed, 4, "poet", dma=True, static_w=0.2, deadline=True, slack=0.3)
        assert not problem.synchronous
        out = interval_search(problem, [], time_limit_s=10, threads=1)
        if out.schedule is not None:
            kept += 1
            assert feasible_energy(problem, out.schedule) == pytest.approx(out.energy_j)
        else:
            assert out.message, out
    assert kept, "no schedule carried over on any seed: the check above never ran"


def test_copies_grow_when_the_model_is_proven_empty() -> None:
    """A forward/backward chain at its smallest budget needs the first activations
    recomputed many times (Griewank's chains): with 3 copies the model is empty, and the
    search doubles the copies until it holds a schedule, which the simulator accepts."""
    graph = forward_backward_chain(6)
    # The working set of one backward node (its output, the incoming gradient, the saved
    # activation): nothing else fits beside it.
    problem = Problem(graph=graph, costs=cost_table_from_graph(graph), ram_budget_bytes=30, mode="remat")
    assert oracle.search(problem) is not None
    small = build_interval(problem, copies=DEFAULT_COPIES)
    assert solve_native(small.model, NativeLimits(time_limit_s=20, workers=1)).status == "infeasible"
    out = interval_search(problem, [], time_limit_s=60, threads=1)
    assert out.copies > DEFAULT_COPIES and out.schedule is not None
    assert feasible_energy(problem, out.schedule) == pytest.approx(out.energy_j)


@pytest.mark.parametrize("seed, mode", list(itertools.product(range(8), ("poet", "remat", "paging"))))
def test_least_ram_is_a_real_program_never_below_the_oracles_least_ram(seed, mode) -> None:
    """The least-RAM variant (capacity from 0 up, as the objective): its optimum decodes
    to a schedule that the simulator runs within that capacity, and is never below the
    least RAM of any Program (the oracle's), which it equals unless the optimum needs
    more stays than the model has."""
    import dataclasses

    problem = training_problem(seed, 3, mode, deadline=seed % 2 == 1)
    fewest = oracle.min_ram(problem)
    assert fewest is not None
    low = dataclasses.replace(problem, ram_budget_bytes=problem.ram_budget_bytes - problem.activation_budget)
    im = build_interval(low, copies=4, least_ram=True)
    assert hint(im, checkpoint_all_schedule(low))
    res = solve_native(im.model, NativeLimits(time_limit_s=30, workers=1))
    assert res.status == "optimal", res.status
    capacity = int(res.objective or 0) * im.unit
    assert capacity >= fewest
    simulate_schedule(low, decode(im, res.value), ram_budget_bytes=capacity, deadline_s=low.deadline_s)
    if mode == "remat" and seed < 4:
        assert capacity == fewest, (capacity, fewest)


def test_with_nothing_in_hand_the_cold_solve_comes_first() -> None:
    """No hint: the energy model is solved cold first; when that finds a schedule (as
    here) the least-RAM search does not run."""
    from poet_compiler import work

    problem = training_problem(3, 4, "remat", slack=0.05)
    with work.metered(work.Meter()):     # limits in deterministic seconds: not the machine's load
        out = interval_search(problem, [], time_limit_s=30, threads=1)
    assert out.schedule is not None and out.least_ram_s is None
    assert feasible_energy(problem, out.schedule) == pytest.approx(out.energy_j)


def test_with_nothing_in_hand_the_least_ram_search_finds_the_first_schedule(monkeypatch) -> None:
    """When the cold solve finds nothing (here: given no time), the search works
    checkpoint-all's peak down to the budget, then the energy model improves that
    schedule; below the least RAM of any Program it reports the least it found and no
    schedule."""
    import dataclasses

    from poet_compiler.solve import interval_search as search

    monkeypatch.setattr(search, "COLD_SHARE", 0.0)
    from poet_compiler import work

    problem = training_problem(3, 4, "remat", slack=0.05)
    with work.metered(work.Meter()):     # limits in deterministic seconds: not the machine's load
        out = interval_search(problem, [], time_limit_s=30, threads=1)
    assert out.schedule is not None and out.least_ram_s is not None
    assert out.least_ram_bytes is not None and out.least_ram_bytes <= problem.activation_budget
    assert feasible_energy(problem, out.schedule) == pytest.approx(out.energy_j)
    fewest = oracle.min_ram(problem)
    assert fewest is not None
    below = dataclasses.replace(problem, ram_budget_bytes=problem.ram_budget_bytes - problem.activation_budget
                                + fewest - 1)
    out = interval_search(below, [], time_limit_s=30, threads=1)
    assert out.schedule is None and out.least_ram_bytes is not None and out.least_ram_bytes >= fewest
    assert "least activation RAM found" in out.message and out.summary()["least_ram_bytes"] == out.least_ram_bytes
