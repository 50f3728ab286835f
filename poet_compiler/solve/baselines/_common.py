"""Shared machinery of the baselines: matrices from decisions, evaluation, Result.

Every matrix-producing baseline decides two things: *which nodes run in which stage*
(``R``) and *which idle intervals of a tensor are spent on flash* (paging). Everything
else follows from docs/model.md:

* :func:`need_stages` — the stages at whose start a tensor must be in RAM (a compute
  of the stage reads it and the stage does not compute it first);
* :func:`assemble` — the cheapest consistent ``S_RAM``/``S_AUX``/``M_in``/``M_out`` for
  an ``R`` and a set of paged intervals: a tensor is kept from its last computation up to
  each need and freed otherwise ("free after last use" across stages), and a paged
  interval becomes page-out in the stage after the use and page-in in the stage before
  the next need.

:func:`evaluate` replays a plan in the independent simulator without budgets (the
heuristics compare candidates by it) and :func:`finish` turns the final plan into a
:class:`Result` through :func:`poet_compiler.solve.finalize.finalize`, or into an
"infeasible" Result with a one-line reason when the plan misses the budget or deadline.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from poet_compiler.errors import ScheduleError
from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schedule.program import Program
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.problem import Problem
from poet_compiler.solve.result import Result
from poet_compiler.units import format_bytes

#: Node kinds that belong to the forward phase of a training step (the loss closes it).
FORWARD_PHASE = ("forward", "loss")


def need_stages(graph: TrainingGraph, R: np.ndarray) -> list[list[int]]:
    """``needs[i]``: ascending stages whose start must find tensor ``i`` in RAM."""
    n = graph.n
    needs: list[set[int]] = [set() for _ in range(n)]
    for t in range(n):
        row = R[t]
        for k in np.flatnonzero(row):
            for i in graph.nodes[int(k)].inputs:
                if not row[i]:
                    needs[i].add(t)
    return [sorted(s) for s in needs]


def compute_stages(R: np.ndarray) -> list[list[int]]:
    """``stages[i]``: ascending stages in which node ``i`` is computed."""
    return [[int(t) for t in np.flatnonzero(R[:, i])] for i in range(R.shape[1])]


@dataclass(frozen=True)
class Gap:
    """An idle interval of tensor ``node``: in RAM after stage ``last`` (its last use or
    computation), needed again at the start of stage ``next``, not computed in between."""

    node: int
    last: int
    next: int

    @property
    def length(self) -> int:
        return self.next - self.last


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


def assemble(graph: TrainingGraph, R: np.ndarray, paged: Iterable[tuple[int, int]] = ()) -> Schedule:
    """The schedule of ``R`` that keeps tensors only until their next need.

    ``paged`` holds ``(node, last)`` pairs: the gap of ``node`` that starts after stage
    ``last`` is spent on flash — paged out in stage ``last+1`` (unless a flash copy
    already exists, then simply freed) and paged in in the stage before the next need.
    Pairs whose gap is too short to page (or that no longer name a gap of ``R``) are
    ignored, so a plan stays valid when recomputation decisions change the gaps.
    """
    n = graph.n
    R = np.asarray(R, dtype=bool)
    s = Schedule.empty(n)
    s.R[:] = R
    needs = need_stages(graph, R)
    comps = compute_stages(R)
    for i in range(n):
        for t in needs[i]:
            prior = [c for c in comps[i] if c < t]
            if not prior:
                raise ScheduleError(
                    f"stage {t}: node {i} {graph.nodes[i].name!r} is needed before it is ever computed"
                )
            s.S_RAM[prior[-1] + 1 : t + 1, i] = True
    if not paged:
        return s
    by_node: dict[int, set[int]] = {}
    for node, last in paged:
        by_node.setdefault(node, set()).add(last)
    for i, lasts in sorted(by_node.items()):
        flash_from: int | None = None   # first stage whose start finds a flash copy of i
        events = sorted({(t, 0) for t in comps[i]} | {(t, 1) for t in needs[i]})
        for (a, _), (b, kind_b) in zip(events, events[1:]):
            if kind_b != 1 or a not in lasts:
                continue
            if flash_from is not None and flash_from <= b - 1 and b - 1 >= a + 1:
                # A copy is on flash already: drop the RAM copy after stage a, page in at b-1.
                s.S_RAM[a + 1 : b, i] = False
                s.M_in[b - 1, i] = True
            elif b - 1 >= a + 2:
                # Page out in stage a+1 (the tensor is resident at its start), back at b-1.
                s.M_out[a + 1, i] = True
                s.S_RAM[a + 2 : b, i] = False
                s.M_in[b - 1, i] = True
                flash_from = a + 2
                s.S_AUX[a + 2 :, i] = True
    return s


def has_paging(schedule: Schedule) -> bool:
    return bool(schedule.M_in.any() or schedule.M_out.any())


@dataclass(frozen=True)
class Figures:
    """What a heuristic needs to compare candidates: simulated peak, time, energy."""

    peak_bytes: int
    runtime_s: float
    energy_j: float

    def fits(self, problem: Problem) -> bool:
        if self.peak_bytes > problem.activation_budget:
            return False
        return problem.deadline_s is None or self.runtime_s <= problem.deadline_s * (1 + 1e-9)


def to_program(problem: Problem, plan: Schedule | Program) -> Program:
    from poet_compiler.schedule.linearize import linearize

    if isinstance(plan, Program):
        return plan
    return linearize(problem.graph, plan, mode=problem.mode, dma=not problem.synchronous)


def evaluate(problem: Problem, plan: Schedule | Program) -> Figures:
    """Simulate ``plan`` with no budget or deadline (raises ScheduleError if invalid)."""
    from poet_compiler.schedule.simulate import simulate

    sim = simulate(problem.graph, problem.costs, to_program(problem, plan))
    return Figures(sim.peak_bytes, sim.runtime_s, sim.energy_j)


def miss_reason(problem: Problem, fig: Figures) -> str:
    """Why figures miss the budgets, in a few words ('' when they fit)."""
    parts = []
    if fig.peak_bytes > problem.activation_budget:
        parts.append(
            f"needs {format_bytes(fig.peak_bytes)} of RAM > budget {format_bytes(problem.activation_budget)}"
        )
    if problem.deadline_s is not None and fig.runtime_s > problem.deadline_s * (1 + 1e-9):
        parts.append(f"takes {fig.runtime_s:.6g} s > deadline {problem.deadline_s:.6g} s")
    return " and ".join(parts)


def infeasible(problem: Problem, strategy: str, reason: str, *, started: float,
               attempt: Figures | None = None) -> Result:
    """An 'infeasible' Result: no plan, a one-line reason, the best attempt's figures in extra."""
    extra: dict[str, object] = {}
    if attempt is not None:
        extra["attempt"] = dataclasses.asdict(attempt)
    return Result(
        status="infeasible",
        strategy=strategy,
        mode=problem.mode,
        ram_budget_bytes=problem.ram_budget_bytes,
        deadline_s=problem.deadline_s,
        n_nodes=problem.n,
        solve_time_s=time.perf_counter() - started,
        message=f"{strategy}: {reason}",
        extra=extra,
    )


def finish(problem: Problem, strategy: str, plan: Schedule | Program, *, started: float,
           fig: Figures | None = None, note: str = "") -> Result:
    """Result of a heuristic's final plan: finalize when it fits, 'infeasible' otherwise."""
    from poet_compiler.solve.finalize import finalize

    fig = fig or evaluate(problem, plan)
    if not fig.fits(problem):
        return infeasible(problem, strategy, f"best plan {miss_reason(problem, fig)}", started=started,
                          attempt=fig)
    try:
        result = finalize(problem, plan, strategy=strategy, status="feasible",
                          solve_time_s=time.perf_counter() - started, message=note)
    except ScheduleError as exc:   # e.g. the arena does not fit because of fragmentation
        return infeasible(problem, strategy, str(exc), started=started, attempt=fig)
    if not result.ok and not result.message.startswith(f"{strategy}: "):
        result.message = f"{strategy}: {result.message}"   # e.g. arena fragmentation
    return result


def forward_phase(graph: TrainingGraph) -> np.ndarray:
    """Boolean mask of the nodes of the forward phase (forward and loss kinds)."""
    return np.array([node.kind in FORWARD_PHASE for node in graph.nodes], dtype=bool)


def recomputable(graph: TrainingGraph) -> np.ndarray:
    """Nodes a remat baseline may drop and recompute: unpinned forward-kind nodes."""
    return np.array([node.kind == "forward" and not node.pinned for node in graph.nodes], dtype=bool)
