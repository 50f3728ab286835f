"""Warm starts (poet_compiler/solve/warm_start.py): every heuristic baseline's plan, and
the MILP's answer never above any of them."""

from __future__ import annotations

import pytest

from poet_compiler.solve.baselines import BASELINES, HEURISTICS
from poet_compiler.solve.baselines._common import plans_only
from poet_compiler.solve.milp import solve_milp
from poet_compiler.solve.options import SolveOptions
from poet_compiler.solve.problem import feasible_energy
from poet_compiler.solve.warm_start import warm_start_candidates
from tests.support.graphs import random_problem


def _baseline_energies(problem) -> dict[str, float]:  # noqa: ANN001
    out = {}
    for name in HEURISTICS:
        res = BASELINES[name](problem)
        if res.ok and res.energy_j is not None:
            out[name] = res.energy_j
    return out


def test_plans_only_returns_the_plan_unfinalized_at_the_same_energy() -> None:
    problem = random_problem(7, 90, "remat", deadline_prob=0.0, budget_fraction=0.3)
    with plans_only():
        quick = BASELINES["dtr"](problem)
    full = BASELINES["dtr"](problem)    # the context is over: finalized again
    assert quick.status == "feasible" and quick.program is not None and quick.arena_bytes is None
    assert full.ok and full.arena_bytes is not None
    assert quick.energy_j == pytest.approx(full.energy_j, rel=1e-12)
    assert quick.peak_ram_bytes <= problem.activation_budget


@pytest.mark.parametrize("seed", range(6))
def test_every_baseline_that_fits_is_a_candidate_on_graphs_of_90_nodes(seed: int) -> None:
    """dtr included (it joined only below 80 nodes when each plan was finalized): the
    cheapest candidate is at most every baseline's energy."""
    problem = random_problem(seed, 90, "remat", deadline_prob=0.0, budget_fraction=0.3)
    candidates = warm_start_candidates(problem)
    names = {name for _, name, _ in candidates}
    energies = _baseline_energies(problem)
    assert set(energies) <= names, (energies, names)
    for _, name, schedule in candidates:
        assert feasible_energy(problem, schedule) is not None, name
    if energies:
        assert candidates[0][0] <= min(energies.values()) * (1 + 1e-9)


@pytest.mark.parametrize("seed", range(3))
def test_the_milp_is_never_above_a_baseline(seed: int) -> None:
    problem = random_problem(seed, 90, "remat", deadline_prob=0.0, budget_fraction=0.2)
    with plans_only():       # the baselines' energies, without finalizing their arenas
        energies = _baseline_energies(problem)
    res = solve_milp(problem, SolveOptions(time_limit_s=15, effort=1.0))
    if not energies:
        return
    assert res.ok, res.message
    assert res.energy_j <= min(energies.values()) * (1 + 1e-9), (res.energy_j, energies)


@pytest.mark.parametrize("seed", range(4))
def test_refit_keeps_what_fits_a_lower_budget_with_its_energy_there(seed: int) -> None:
    """A re-solve's warm starts: the first attempt's candidates (and the schedule it
    re-solves) that meet the lower budget, with their energy judged there, cheapest
    first; no heuristic runs again."""
    import dataclasses

    from poet_compiler.solve.warm_start import refit

    problem = random_problem(seed, 30, "poet", deadline_prob=0.0, budget_fraction=0.6)
    candidates = warm_start_candidates(problem)
    assert candidates
    given = candidates[-1][2]
    peaks = sorted({feasible_peak for feasible_peak in (_peak(problem, s) for _, _, s in candidates)})
    lower = dataclasses.replace(problem, ram_budget_bytes=problem.ram_budget_bytes
                                - (problem.activation_budget - peaks[len(peaks) // 2]))
    kept = refit(candidates, lower, given)
    expected = {name for _, name, s in candidates if feasible_energy(lower, s) is not None}
    if feasible_energy(lower, given) is not None:
        expected.add("given")
    assert {name for _, name, _ in kept} == expected
    assert all(e == feasible_energy(lower, s) for e, _, s in kept)
    assert [e for e, _, _ in kept] == sorted(e for e, _, _ in kept)
    assert refit([], lower, None) == []


def _peak(problem, schedule) -> int:  # noqa: ANN001
    from poet_compiler.schedule.linearize import linearize
    from poet_compiler.schedule.simulate import simulate

    program = linearize(problem.graph, schedule, mode=problem.mode, dma=not problem.synchronous)
    return simulate(problem.graph, problem.costs, program).peak_bytes


def test_refit_reruns_the_named_heuristics_at_the_lower_budget() -> None:
    """``rerun`` heuristics are run again at the re-solve's budget: their plans there meet
    it even where the first attempt's do not."""
    import dataclasses

    from poet_compiler.solve.warm_start import refit

    seen = 0
    for seed in range(8):
        problem = random_problem(seed, 40, "remat", deadline_prob=0.0, budget_fraction=0.5)
        candidates = warm_start_candidates(problem)
        lower = dataclasses.replace(problem, ram_budget_bytes=problem.ram_budget_bytes - problem.activation_budget // 10)
        fresh = BASELINES["dtr"](lower)
        if not fresh.ok:
            continue
        kept = refit(candidates, lower, rerun=["dtr"])
        assert any(name == "dtr" and e == pytest.approx(fresh.energy_j, rel=1e-9) for e, name, _ in kept)
        assert all(feasible_energy(lower, s) == e for e, _, s in kept)
        seen += 1
    assert seen


def test_no_heuristic_but_checkpoint_all_starts_after_the_deadline(monkeypatch) -> None:
    """``until`` in the past: checkpoint-all still runs (the fallback of every solve), no
    other heuristic starts, and what comes back is still only schedules that fit."""
    import time

    ran: list[str] = []

    def recorded(name: str):  # noqa: ANN202
        run = BASELINES[name]
        return lambda problem: ran.append(name) or run(problem)

    for name in HEURISTICS:
        monkeypatch.setitem(BASELINES, name, recorded(name))
    problem = random_problem(3, 60, "poet", deadline_prob=0.0, budget_fraction=1.0)
    found = warm_start_candidates(problem, until=time.perf_counter() - 1.0)
    assert ran == ["checkpoint_all"]
    assert [name for _, name, _ in found] == ["checkpoint_all"]
    assert all(feasible_energy(problem, s) == e for e, _, s in found)
    ran.clear()
    warm_start_candidates(problem)
    assert set(ran) == set(HEURISTICS)     # no deadline: every heuristic runs
    ran.clear()
    from poet_compiler import work

    with work.metered(work.Meter(wall_at=time.perf_counter() - 1.0)):   # the wall cap has passed
        warm_start_candidates(problem, until=1e9)
    assert ran == ["checkpoint_all"]


def test_iterative_heuristics_stop_at_the_deadline_with_their_plan_so_far() -> None:
    """capuchin and chen_greedy, given no time: capuchin takes no step (its plan is
    checkpoint-all, over the budget, so "infeasible" with its figures), chen_greedy
    tries one segment budget; both answer, neither raises."""
    import time

    from poet_compiler.solve.clock import step_until

    problem = random_problem(5, 60, "poet", deadline_prob=0.0, budget_fraction=0.1)
    unlimited = BASELINES["capuchin"](problem)
    assert unlimited.ok and unlimited.message.startswith("14 paged intervals")
    with step_until(time.perf_counter() - 1.0):
        cut = BASELINES["capuchin"](problem)
        greedy = BASELINES["chen_greedy"](problem)
    assert cut.status == "infeasible" and cut.notes.attempt is not None
    assert greedy.status in ("feasible", "infeasible") and greedy.message
