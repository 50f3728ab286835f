"""checkmate / paging_only honour the solver options a user gives: --gap and progress
(they used to reach the MILP with its defaults only)."""

from __future__ import annotations

import dataclasses

import pytest

import poet_compiler.solve.milp as milp
from poet_compiler.solve.strategies import SolveOptions, run_strategy
from tests.support.graphs import random_problem


@pytest.mark.parametrize(("name", "mode"), [("checkmate", "remat"), ("paging_only", "paging")])
def test_gap_and_progress_reach_the_solver(monkeypatch: pytest.MonkeyPatch, name: str, mode: str) -> None:
    seen: list[tuple[str, SolveOptions | None]] = []
    real = milp.solve_milp

    def spy(problem, options=None, **kwargs):  # noqa: ANN001, ANN003, ANN202
        seen.append((problem.mode, options))
        return real(problem, options, **kwargs)

    # What the baselines hand to solve_milp, the strategy's entry point (their results do
    # not show the progress flag).
    monkeypatch.setattr(milp, "solve_milp", spy)
    opts = SolveOptions(solver="cpsat", time_limit_s=7.0, threads=1, progress=True, gap_limit=0.25, effort="quick")
    result = run_strategy(name, random_problem(1, 8, "poet"), opts)
    assert result.strategy == name
    # Every setting but the effort, which stays 0.3 units per second of the limit.
    assert seen == [(mode, dataclasses.replace(opts, effort=None))]


def test_a_heuristics_cp_sat_calls_stop_on_work_within_the_time_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A heuristic strategy runs metered: the arena's exact packing inside its finalize gets
    a deterministic limit and the time limit as its wall allowance, not a wall limit of its
    own (which a loaded machine reached: belady on DAG 100 at 70 % wrote other bytes)."""
    from poet_compiler import api, work
    from tests.support.layered import layered_graph

    limits: list[tuple[float | None, float]] = []
    real = work.solver_limits

    def spy(limit: float) -> tuple[float | None, float]:
        limits.append(real(limit))
        return limits[-1]

    monkeypatch.setattr(work, "solver_limits", spy)
    result = api.compile(layered_graph(100), ram="70%", mode="remat", strategy="belady", time_limit_s=50.0)
    assert result.result.strategy == "belady" and result.result.ok
    assert limits, "no CP-SAT call: the test would not see the limits"
    assert all(det is not None and 0 < wall <= 50.0 for det, wall in limits)


def test_a_heuristic_strategy_stops_at_its_time_limit() -> None:
    """capuchin improves its plan one whole-plan replay at a time (51 s on gpt2_large): as a
    --strategy it stops at the time limit with the plan it has, and says so."""
    import dataclasses

    from poet_compiler.solve.budgets import reference

    p = random_problem(4, 30, "remat", deadline_prob=0.0)
    problem = dataclasses.replace(p, ram_budget_bytes=int(0.7 * reference(p.graph, p.costs).peak_bytes))
    free = run_strategy("capuchin", problem, SolveOptions(time_limit_s=60.0))
    assert free.ok and free.notes.stopped_by is None and "6 recomputations" in free.message, free.message
    capped = run_strategy("capuchin", problem, SolveOptions(time_limit_s=0.0))
    assert capped.notes.stopped_by == "time"
    assert capped.status == "infeasible" and "needs" in capped.message, capped.message
