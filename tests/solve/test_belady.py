"""Offline eviction (``belady``): plans the simulator accepts where online DTR has none.

The oracle-level checks (never below the exhaustive optimum, valid plans, honest
statuses) run for every heuristic in test_baselines.py; here, what this one adds."""

from __future__ import annotations

import math

import pytest

from poet_compiler.devices.cost_model import costs_for
from poet_compiler.schedule.simulate import simulate
from poet_compiler.solve.baselines import BASELINES
from poet_compiler.solve.baselines.belady import RULES, _OfflineRun
from poet_compiler.solve.baselines.dtr import EvictionFailed
from poet_compiler.solve.budgets import reference, resolve_ram
from poet_compiler.solve.problem import Problem
from tests.support.graphs import chain_graph
from tests.support.layered import layered_graph


def _layered(n: int, ram: str) -> Problem:
    graph = layered_graph(n)
    costs = costs_for(graph, None)
    return Problem(graph, costs, resolve_ram(ram, reference(graph, costs), costs), mode="remat")


def _accepted(problem: Problem, program) -> float:
    """The simulator's energy for ``program`` under the problem's budget (raises if not)."""
    return simulate(problem.graph, problem.costs, program, ram_budget_bytes=problem.activation_budget).energy_j


@pytest.mark.parametrize("n,ram", [(250, "90%"), (500, "80%"), (1000, "90%")])
def test_plans_where_dtr_finds_none(n: int, ram: str) -> None:
    """The benchmark's layered DAGs: online DTR's recompute chains lock the whole budget."""
    problem = _layered(n, ram)
    assert not BASELINES["dtr"](problem).ok
    result = BASELINES["belady"](problem)
    assert result.ok, result.message
    assert result.program.n_recompute > 0
    assert _accepted(problem, result.program) == pytest.approx(result.energy_j)
    assert result.peak_ram_bytes <= problem.activation_budget


def test_far_cheaper_than_dtr_where_both_plan() -> None:
    """100 nodes at 80 %: DTR recomputes 589 times (1,706 J); the optimum is near 269 J."""
    problem = _layered(100, "80%")
    online, offline = BASELINES["dtr"](problem), BASELINES["belady"](problem)
    assert online.ok and offline.ok
    assert offline.energy_j < 0.25 * online.energy_j
    assert offline.program.n_recompute < online.program.n_recompute


@pytest.mark.parametrize("rule", RULES)
def test_every_rule_is_a_valid_program_or_a_clean_failure(rule: str) -> None:
    for n, ram in ((100, "80%"), (250, "80%"), (500, "90%")):
        problem = _layered(n, ram)
        try:
            program = _OfflineRun(problem.graph, problem.costs.compute_s, problem.activation_budget, rule).execute()
        except EvictionFailed:
            continue
        _accepted(problem, program)


def test_next_use_follows_evicted_readers() -> None:
    """A tensor whose reader was evicted and is still needed is read again when that
    reader is recomputed; one no future compute can need is never read again."""
    graph = chain_graph(6)
    run = _OfflineRun(graph, (1.0,) * 6, 10**6, "cost")
    for t in range(4):          # 0..3 computed and resident
        run.stage = t
        run.materialize(t)
    run.stage = 4
    run._free(3)                # node 4 reads 3: 3 is needed again at stage 4
    run._free(2)                # 2 is read only by 3, evicted and needed: 2 is read at stage 4 too
    nxt = run.next_uses()
    assert nxt[3] == 4 and nxt[2] == 4
    assert nxt[1] == 4          # 2's recompute reads it
    assert nxt[0] == math.inf   # its reader 1 is resident: nothing will read 0 again


def test_modes_without_recomputation_are_refused_in_one_line() -> None:
    problem = _layered(100, "80%")
    problem = Problem(problem.graph, problem.costs, problem.ram_budget_bytes, mode="paging")
    result = BASELINES["belady"](problem)
    assert not result.ok
    assert result.message.startswith("belady: ") and "\n" not in result.message
