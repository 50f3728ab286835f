"""checkmate / paging_only: the MILP in one mode, compared with the oracle and the heuristics."""

from __future__ import annotations

import dataclasses

import pytest

from poet_compiler.solve.baselines import HEURISTICS
from poet_compiler.solve.strategies import BASELINES
from tests.support.graphs import random_problem
from tests.support.oracle import brute_force


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("name,mode", [("checkmate", "remat"), ("paging_only", "paging")])
def test_solver_baselines_match_oracle_and_beat_heuristics(seed: int, name: str, mode: str) -> None:
    problem = random_problem(seed, 6, "poet")
    result = BASELINES[name](problem)
    assert result.strategy == name and result.mode == mode
    best = brute_force(dataclasses.replace(problem, mode=mode))
    if best is None:
        assert result.status == "infeasible"
        return
    assert result.status == "optimal"
    assert result.energy_j == pytest.approx(best[0], rel=1e-6)
    restricted = dataclasses.replace(problem, mode=mode)
    for h in HEURISTICS:
        r = BASELINES[h](restricted)
        if r.ok:
            assert result.energy_j <= r.energy_j * (1 + 1e-9), h
