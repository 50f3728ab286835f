"""Problems where fragmentation matters: shared by the arena-rescue and finalize tests."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from poet_compiler.solve.budgets import reference
from poet_compiler.solve.problem import Problem
from tests.support.graphs import random_problem
from tests.support.oracle import brute_force


def costlier_below_peak(waste: int) -> Iterator[tuple[Problem, float, float]]:
    """``(problem, optimum, optimum waste bytes lower)``: random problems at checkpoint-all's
    peak whose optimum ``waste`` bytes lower costs more, so an optimum whose arena is
    inflated by ``waste`` bytes does not fit and a re-solve loses energy."""
    for seed in range(20):
        p = random_problem(seed, 6, "poet", deadline_prob=0.0)
        problem = dataclasses.replace(p, ram_budget_bytes=reference(p.graph, p.costs).peak_bytes)
        lowered = dataclasses.replace(problem, ram_budget_bytes=problem.ram_budget_bytes - waste)
        first, worse = brute_force(problem), brute_force(lowered)
        if first is not None and worse is not None and worse[0] > first[0]:
            yield problem, first[0], worse[0]
