"""checkmate / paging_only honour the solver options a user gives: --gap and progress
(they used to reach the MILP with its defaults only)."""

from __future__ import annotations

import pytest

import poet_compiler.solve.milp as milp
from poet_compiler.solve.strategies import SolveOptions, run_strategy
from tests.support.graphs import random_problem


@pytest.mark.parametrize(("name", "mode"), [("checkmate", "remat"), ("paging_only", "paging")])
def test_gap_and_progress_reach_the_solver(monkeypatch: pytest.MonkeyPatch, name: str, mode: str) -> None:
    seen: list[dict[str, object]] = []
    real = milp.solve_milp

    def spy(problem, **kwargs):
        seen.append({"mode": problem.mode, **kwargs})
        return real(problem, **kwargs)

    monkeypatch.setattr(milp, "solve_milp", spy)
    opts = SolveOptions(solver="cpsat", time_limit_s=7.0, threads=1, progress=True, gap_limit=0.25)
    result = run_strategy(name, random_problem(1, 8, "poet"), opts)
    assert result.strategy == name
    assert seen == [{"mode": mode, "solver": "cpsat", "formulation": "fast", "time_limit_s": 7.0,
                     "threads": 1, "progress": True, "gap_limit": 0.25}]
