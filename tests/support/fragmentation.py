"""Problems where fragmentation matters: shared by the arena-rescue and finalize tests."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator

from poet_compiler.schedule.arena import plan_arena
from poet_compiler.schedule.program import Program
from poet_compiler.solve.budgets import reference
from poet_compiler.solve.finalize import Layout, finalize_plan
from poet_compiler.solve.pipeline.context import Steps
from poet_compiler.solve.pipeline.steps import STEPS
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


def wasting(waste: int, *, scale: int = 1) -> Callable[..., Program]:
    """An arena planner that reports ``scale`` times the real arena plus ``waste`` bytes (a
    layout that fragments on purpose), for finalize's :class:`~poet_compiler.solve.finalize.Layout`."""
    def plan(graph, program, **kw):  # noqa: ANN001, ANN003, ANN202
        out = plan_arena(graph, program, **kw)
        return dataclasses.replace(out, arena_bytes=(out.arena_bytes or 0) * scale + waste)
    return plan


def no_room(*args, **kwargs) -> None:  # noqa: ANN002, ANN003
    """A compactor that finds no room (as when buffers in flight block every move)."""
    return None


def laid_out(**layout: Callable[..., object]) -> Steps:
    """The pipeline's steps with finalize laying arenas out by ``layout`` (:class:`Layout`'s
    fields: ``plan_arena``, ``compact_arena``), wherever the pipeline finalizes."""
    return dataclasses.replace(STEPS, finalize=functools.partial(finalize_plan, layout=Layout(**layout)))
