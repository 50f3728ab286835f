"""The brute-force oracle: equal to a naive enumeration of every schedule, and consistent."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from poet_compiler.errors import ScheduleError
from poet_compiler.schedule.linearize import check_schedule, linearize
from poet_compiler.schedule.memory import peak_memory
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.schedule.simulate import simulate
from poet_compiler.solve.bruteforce import brute_force
from poet_compiler.solve.problem import Problem
from tests.support.graphs import (
    chain_graph,
    cost_table_from_graph,
    forward_backward_chain,
    random_problem,
)


def _subsets(items):
    items = list(items)
    for r in range(len(items) + 1):
        yield from itertools.combinations(items, r)


def naive_minimum(problem: Problem, keep_flash: bool = False) -> float | None:
    """Every schedule the matrix rules allow (no pruning at all), judged by linearize+simulate.

    ``keep_flash`` only tries S_AUX[t+1] = S_AUX[t] | M_out[t] (flash copies are never
    dropped), which makes n = 5 tractable while still trying every other choice.
    """
    n = problem.n
    best: list[float | None] = [None]

    def stage(t: int, s: Schedule) -> None:
        if t == n:
            try:
                check_schedule(problem.graph, s, problem.mode)
                sim = simulate(problem.graph, problem.costs, linearize(problem.graph, s, mode=problem.mode),
                               ram_budget_bytes=problem.activation_budget, deadline_s=problem.deadline_s)
            except ScheduleError:
                return
            if best[0] is None or sim.energy_j < best[0]:
                best[0] = sim.energy_j
            return
        ram = [i for i in range(t) if s.S_RAM[t, i]]
        flash = [i for i in range(t) if s.S_AUX[t, i]]
        for extra in _subsets(range(t)):
            R = set(extra) | {t}
            if any(s.S_RAM[t, i] for i in extra):
                continue
            if any(not (i in R or s.S_RAM[t, i]) for k in R for i in problem.graph.nodes[k].inputs):
                continue
            for m_out in _subsets(ram):
                for m_in in _subsets(i for i in flash if i not in ram and i not in R):
                    for keep in (_subsets(sorted(set(ram) | R | set(m_in))) if t + 1 < n else [()]):
                        fl_all = sorted(set(flash) | set(m_out))
                        for fl in ([tuple(fl_all)] if keep_flash else _subsets(fl_all)) if t + 1 < n else [()]:
                            s2 = s.copy()
                            for i in R:
                                s2.R[t, i] = True
                            for i in m_out:
                                s2.M_out[t, i] = True
                            for i in m_in:
                                s2.M_in[t, i] = True
                            for i in keep:
                                s2.S_RAM[t + 1, i] = True
                            for i in fl:
                                s2.S_AUX[t + 1, i] = True
                            stage(t + 1, s2)

    stage(0, Schedule.empty(n))
    return best[0]


CASES = (
    [(seed, 3, mode, q, False) for seed in range(4) for mode in ("poet", "remat", "paging", "none")
     for q in (0.0, 0.4, 1.0)]
    + [(seed, 4, mode, 0.0, False) for seed in range(2) for mode in ("poet", "remat")]
)


@pytest.mark.parametrize("seed, n, mode, fraction, keep_flash", CASES)
def test_agrees_with_naive_enumeration(seed, n, mode, fraction, keep_flash):
    problem = random_problem(seed, n, mode, deadline_prob=0.5, budget_fraction=fraction, max_bytes=30, max_inputs=2)
    found = brute_force(problem)
    naive = naive_minimum(problem, keep_flash=keep_flash)
    if naive is None:
        assert found is None
    else:
        assert found is not None and found[0] == pytest.approx(naive, rel=1e-9)


def skip_graph():
    """0 -> 1 -> 2 -> 3 with 3 also reading 0; node 0 is big, node 3 tiny."""
    g = chain_graph(4)
    sizes = (30, 10, 10, 1)
    nodes = tuple(replace(nd, output_bytes=sizes[nd.id], inputs=(0, 2) if nd.id == 3 else nd.inputs)
                  for nd in g.nodes)
    return replace(g, nodes=nodes)


@pytest.mark.parametrize("mode, budget, energy", [
    ("poet", 50, 4.0), ("poet", 45, 5.0), ("remat", 45, 5.0), ("none", 45, None), ("paging", 45, None),
    ("poet", 40, None),
])
def test_naive_agrees_where_recompute_is_needed(mode, budget, energy):
    # Keeping node 0 through stage 2 needs 50 bytes; recomputing it in stage 3 needs 41.
    g = skip_graph()
    problem = Problem(graph=g, costs=cost_table_from_graph(g), ram_budget_bytes=budget, mode=mode)
    found = brute_force(problem)
    assert (found[0] if found else None) == energy == naive_minimum(problem)
    if found:
        assert found[1].R.sum() == 4 + (energy == 5.0)


def tight_chain_problem(mode: str, budget: int, dma: bool = False, deadline: float | None = None) -> Problem:
    g = forward_backward_chain(3)
    return Problem(graph=g, costs=cost_table_from_graph(g, dma=dma), ram_budget_bytes=budget,
                   deadline_s=deadline, mode=mode)


@pytest.mark.parametrize(
    "mode, budget, energy",
    [
        ("poet", 30, 8.0),     # recompute one activation (paging cannot fit: see below)
        ("remat", 30, 8.0),
        ("paging", 30, None),  # a page-in holds RAM during the stage before its use
        ("none", 30, None),    # keeping f0 and f1 through the loss needs 40
        ("none", 40, 7.0),
        ("paging", 40, 7.0),
        ("poet", 29, None),    # b1 with its two inputs needs 30
    ],
)
def test_hand_computed_training_chain(mode, budget, energy):
    g = forward_backward_chain(3)
    found = brute_force(Problem(graph=g, costs=cost_table_from_graph(g), ram_budget_bytes=budget, mode=mode))
    assert (found[0] if found else None) == energy


@pytest.mark.parametrize("seed, mode", [(s, m) for s in range(10) for m in ("poet", "remat", "paging", "none")])
def test_result_replays_in_the_simulator(seed, mode):
    problem = random_problem(seed, 6, mode)
    found = brute_force(problem)
    if found is None:
        pytest.skip("infeasible budget")
    energy, schedule = found
    check_schedule(problem.graph, schedule, mode)
    sim = simulate(problem.graph, problem.costs, linearize(problem.graph, schedule, mode=mode),
                   ram_budget_bytes=problem.activation_budget, deadline_s=problem.deadline_s)
    assert sim.energy_j == pytest.approx(energy, rel=1e-12)
    assert peak_memory(problem.graph, schedule) <= problem.activation_budget


def test_mode_ordering_and_budget_monotonicity():
    # poet <= remat, poet <= paging <= none; more RAM never costs more energy.
    g = skip_graph()
    for budget in (41, 45, 50):
        e = {}
        for mode in ("poet", "remat", "paging", "none"):
            found = brute_force(Problem(graph=g, costs=cost_table_from_graph(g), ram_budget_bytes=budget, mode=mode))
            e[mode] = found[0] if found else float("inf")
        assert e["poet"] <= min(e["remat"], e["paging"]) and e["paging"] <= e["none"]
    values = []
    for budget in range(38, 60, 3):
        found = brute_force(Problem(graph=g, costs=cost_table_from_graph(g), ram_budget_bytes=budget))
        values.append(found[0] if found else float("inf"))
    assert values == sorted(values, reverse=True) and values[0] == float("inf") and values[-1] == 4.0


def test_deadline_forces_a_different_schedule():
    # Without a deadline the cheapest way under 30 bytes is a recompute; it costs time,
    # so the compute-only deadline makes it infeasible.
    free = brute_force(tight_chain_problem("remat", 30))
    assert free is not None and free[0] == 8.0
    assert brute_force(tight_chain_problem("remat", 30, deadline=7.0)) is None
    assert brute_force(tight_chain_problem("remat", 30, deadline=8.0))[0] == 8.0
