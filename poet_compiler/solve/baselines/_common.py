"""Shared machinery of the baselines: gaps, evaluation, Result.

Every matrix-producing baseline decides *which nodes run in which stage* (``R``) and
*which idle intervals of a tensor are spent on flash* (paging); the schedule follows
(docs/model.md), built by :mod:`poet_compiler.schedule.build` (re-exported here).
:func:`evaluate` replays a plan in the independent simulator without budgets (the
heuristics compare candidates by it). :func:`heuristic` makes a function of a
:class:`Trial` a baseline, Problem -> Result; :meth:`Trial.finish` turns the final plan
into a Result through :func:`poet_compiler.solve.finalize.finalize`, or into an
"infeasible" one with a one-line reason when it misses the budget or deadline.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np

from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schedule.build import assemble, compute_stages, need_stages  # noqa: F401 (re-exported)
from poet_compiler.schedule.linearize import linearize
from poet_compiler.schedule.program import Program
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.schedule.simulate import simulate
from poet_compiler.solve.finalize import build_result, finalize
from poet_compiler.solve.problem import Problem
from poet_compiler.solve.result import NO_NOTES, Judged, Notes, Result, Run
from poet_compiler.units import format_bytes


@dataclass(frozen=True)
class Gap:
    """An idle interval of tensor ``node``: in RAM after stage ``last`` (its last use or
    computation), needed again at the start of stage ``next``, not computed in between."""

    node: int
    last: int
    next: int


def idle_gaps(graph: TrainingGraph, R: np.ndarray) -> list[Gap]:
    """Every interval in which the minimal schedule of ``R`` keeps a tensor idle in RAM."""
    needs = need_stages(graph, R)
    comps = compute_stages(R)
    gaps = []
    for i in range(graph.n):
        events = sorted({(t, 0) for t in comps[i]} | {(t, 1) for t in needs[i]})
        for (a, _), (b, kind_b) in zip(events, events[1:]):
            if kind_b == 1 and b > a:
                gaps.append(Gap(i, a, b))
    return gaps


@dataclass(frozen=True)
class Figures:
    """What a heuristic needs to compare candidates: simulated peak, time, energy."""

    peak_bytes: int
    runtime_s: float
    energy_j: float

    def in_time(self, problem: Problem) -> bool:
        return problem.deadline_s is None or self.runtime_s <= problem.deadline_s * (1 + 1e-9)

    def fits(self, problem: Problem) -> bool:
        return self.peak_bytes <= problem.activation_budget and self.in_time(problem)


def to_program(problem: Problem, plan: Schedule | Program) -> Program:
    if isinstance(plan, Program):
        return plan
    return linearize(problem.graph, plan, mode=problem.mode, dma=not problem.synchronous)


def evaluate(problem: Problem, plan: Schedule | Program) -> Figures:
    """Simulate ``plan`` with no budget or deadline (raises ScheduleError if invalid)."""
    sim = simulate(problem.graph, problem.costs, to_program(problem, plan))
    return Figures(sim.peak_bytes, sim.runtime_s, sim.energy_j)


def miss_reason(problem: Problem, fig: Figures) -> str:
    """Why figures miss the budgets, in a few words ('' when they fit)."""
    parts = []
    if fig.peak_bytes > problem.activation_budget:
        parts.append(f"needs {format_bytes(fig.peak_bytes)} of RAM > budget {format_bytes(problem.activation_budget)}")
    if problem.deadline_s is not None and fig.runtime_s > problem.deadline_s * (1 + 1e-9):
        parts.append(f"takes {fig.runtime_s:.6g} s > deadline {problem.deadline_s:.6g} s")
    return " and ".join(parts)


def infeasible(problem: Problem, strategy: str, reason: str, *, started: float,
               attempt: Figures | None = None) -> Result:
    """An 'infeasible' Result: no plan, a one-line reason, the best attempt's figures in its notes."""
    notes = NO_NOTES if attempt is None else Notes(attempt=dataclasses.asdict(attempt))
    return build_result(problem, None, Judged("infeasible", f"{strategy}: {reason}"),
                        Run(strategy, time.perf_counter() - started), notes)


#: Inside :func:`plans_only`, :meth:`Trial.finish` returns a fitting plan without finalizing it.
#: Ambient, not an argument: a heuristic is Problem -> Result (the registry's one signature,
#: also a --strategy), and only the warm starts (solve/warm_start.py) want its plan alone.
_PLANS_ONLY: ContextVar[bool] = ContextVar("plans_only", default=False)


@contextmanager
def plans_only() -> Iterator[None]:
    """Heuristics called within return their plan (``schedule`` or ``program``) and its
    simulated figures, "feasible" when its live bytes and time fit, without finalizing it:
    no arena is planned. The warm starts need only the plan; the arena planning was nearly
    all of a heuristic's time (7.0 of 7.0 s for dtr on VGG16-CIFAR op level)."""
    token = _PLANS_ONLY.set(True)
    try:
        yield
    finally:
        _PLANS_ONLY.reset(token)


class Trial:
    """One heuristic on one problem: its name and start, for the Result, and of the plans
    :meth:`offer`-ed the least-energy one that fits the budgets and the lowest-peak one."""

    def __init__(self, problem: Problem, strategy: str) -> None:
        self.problem = problem
        self.strategy = strategy
        self.started = time.perf_counter()
        self.best: tuple[Schedule, Figures, int] | None = None
        self.fallback: tuple[Schedule, Figures] | None = None

    def finish(self, plan: Schedule | Program, *, fig: Figures | None = None, note: str = "") -> Result:
        """Result of the final plan: finalize when it fits, 'infeasible' otherwise."""
        problem, strategy = self.problem, self.strategy
        fig = fig or evaluate(problem, plan)
        if not fig.fits(problem):
            return infeasible(problem, strategy, f"best plan {miss_reason(problem, fig)}", started=self.started,
                              attempt=fig)
        if _PLANS_ONLY.get():
            # Not finalized: the simulator's figures of the plan alone, no arena.
            return Result(status="feasible", strategy=strategy, mode=problem.mode,
                          ram_budget_bytes=problem.ram_budget_bytes, deadline_s=problem.deadline_s,
                          program=plan if isinstance(plan, Program) else None,
                          schedule=plan if isinstance(plan, Schedule) else None, energy_j=fig.energy_j,
                          runtime_s=fig.runtime_s, peak_ram_bytes=fig.peak_bytes,
                          solve_time_s=time.perf_counter() - self.started, n_nodes=problem.n, message=note)
        # A plan that breaks a rule is a bug (finalize raises InternalError); one that misses
        # the budget, the deadline or (fragmentation) the arena comes back "infeasible".
        result = finalize(problem, plan, strategy=strategy, status="feasible", message=note)
        # Not fitting here is the arena's (fragmentation): the message names the heuristic.
        return dataclasses.replace(result, solve_time_s=time.perf_counter() - self.started,
                                   message=result.message if result.ok else f"{strategy}: {result.message}")

    def infeasible(self, reason: str) -> Result:
        return infeasible(self.problem, self.strategy, reason, started=self.started)

    def offer(self, plan: Schedule, tag: int = 0) -> None:
        """Simulate a candidate plan; ``tag`` goes to the note of :meth:`finish_best`."""
        fig = evaluate(self.problem, plan)
        if fig.fits(self.problem):
            if self.best is None or fig.energy_j < self.best[1].energy_j - 1e-15:
                self.best = (plan, fig, tag)
        elif self.fallback is None or fig.peak_bytes < self.fallback[1].peak_bytes:
            self.fallback = (plan, fig)

    def finish_best(self, note: Callable[[int], str]) -> Result:
        """:meth:`finish` the best plan offered with ``note(its tag)``, else the lowest-peak one."""
        if self.best is not None:
            return self.finish(self.best[0], fig=self.best[1], note=note(self.best[2]))
        assert self.fallback is not None
        return self.finish(self.fallback[0], fig=self.fallback[1])


def heuristic(strategy: str, *,
              remat: bool = False) -> Callable[[Callable[[Trial], Result]], Callable[[Problem], Result]]:
    """Make ``run(trial)`` the baseline ``strategy``, Problem -> Result. With ``remat`` it
    needs recomputation: in a mode that forbids it, the Result is 'infeasible' at once."""

    def wrap(run: Callable[[Trial], Result]) -> Callable[[Problem], Result]:
        @functools.wraps(run)
        def baseline(problem: Problem) -> Result:
            trial = Trial(problem, strategy)
            if remat and not problem.allows_remat:
                return trial.infeasible(f"needs recomputation, which mode {problem.mode!r} forbids")
            return run(trial)
        return baseline
    return wrap


def forward_phase(graph: TrainingGraph) -> np.ndarray:
    """Boolean mask of the nodes of the forward phase (forward and loss kinds)."""
    return np.array([node.kind in ("forward", "loss") for node in graph.nodes], dtype=bool)


def recomputable(graph: TrainingGraph) -> np.ndarray:
    """Nodes a remat baseline may drop and recompute: unpinned forward-kind nodes."""
    return np.array([node.kind == "forward" and not node.pinned for node in graph.nodes], dtype=bool)
