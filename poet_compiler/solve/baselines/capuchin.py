"""Capuchin-like (Peng et al., ASPLOS 2020): page first, then recompute by memory saving per second.

From checkpoint-all, the strategy lowers the peak step by step, acting on tensors idle in
RAM *at the current peak* (the stage whose memory is highest):

1. **Paging** (modes ``poet``/``paging``): idle intervals long enough to page (out in the
   stage after the use, in in the stage before the next use), by decreasing idle time —
   Capuchin's "largest free time first". One is taken if it lowers the peak and the plan
   still meets the deadline (with DMA, paging hidden under compute costs no time), i.e.
   paging is used while it "can be hidden or afforded".
2. **Recomputation** (modes ``poet``/``remat``): while the peak is over budget, intervals
   of unpinned forward tensors become a recompute at the next use, by Capuchin's *memory
   saving per second* ``bytes / recompute time`` (inputs that must be recomputed too
   included), taken on the same condition.

The simulator judges every step. The strategy stops when the peak fits the budget, else
reports infeasible with the lowest peak it reached (also when the deadline of
:func:`~poet_compiler.solve.clock.step_until` passes first: each step simulates the plan).
"""

from __future__ import annotations

import numpy as np

from poet_compiler.schedule.memory import stage_memory
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.baselines._common import (
    Figures,
    Gap,
    Trial,
    assemble,
    evaluate,
    heuristic,
    idle_gaps,
    recomputable,
)
from poet_compiler.solve.baselines.remat import closure
from poet_compiler.solve.clock import past_step_deadline
from poet_compiler.solve.problem import Problem
from poet_compiler.solve.result import Result


class _Plan:
    """R plus paged intervals, with the simulator's verdict on them."""

    def __init__(self, problem: Problem, R: np.ndarray, paged: frozenset[tuple[int, int]]) -> None:
        self.R = R
        self.paged = paged
        self.schedule: Schedule = assemble(problem.graph, R, paged)
        self.fig: Figures = evaluate(problem, self.schedule)
        mem = stage_memory(problem.graph, self.schedule)
        self.peak_stage = int(np.argmax(mem.max(axis=1)))

    def idle_at_peak(self, problem: Problem) -> list[Gap]:
        """Intervals of tensors kept idle across the peak stage (in RAM there, unused)."""
        t = self.peak_stage
        return [g for g in idle_gaps(problem.graph, self.R) if g.last < t < g.next]

    def better(self, old: _Plan, problem: Problem) -> bool:
        return self.fig.peak_bytes < old.fig.peak_bytes and self.fig.in_time(problem)


@heuristic("capuchin")
def capuchin(trial: Trial) -> Result:
    problem = trial.problem
    graph = problem.graph
    budget = problem.activation_budget
    plan = _Plan(problem, np.eye(problem.n, dtype=bool), frozenset())
    tried: set[tuple[str, int, int]] = set()
    steps = {"page": 0, "recompute": 0}

    # Phase 1: paging, largest idle interval first.
    while problem.allows_paging and plan.fig.peak_bytes > budget and not past_step_deadline():
        cands = [g for g in plan.idle_at_peak(problem)
                 if not graph.nodes[g.node].pinned and g.next - g.last >= 3 and ("page", g.node, g.last) not in tried]
        cands.sort(key=lambda g: (g.last - g.next, -graph.nodes[g.node].output_bytes, g.node))
        for g in cands:
            if past_step_deadline():
                break
            tried.add(("page", g.node, g.last))
            new = _Plan(problem, plan.R, plan.paged | {(g.node, g.last)})
            if new.better(plan, problem):
                plan = new
                steps["page"] += 1
                break
        else:
            break

    # Phase 2: recomputation, largest memory saving per second first.
    droppable = recomputable(graph)
    while problem.allows_remat and plan.fig.peak_bytes > budget and not past_step_deadline():
        scored = []
        for g in plan.idle_at_peak(problem):
            if not droppable[g.node] or ("re", g.node, g.next) in tried:
                continue
            # Inputs that are resident there, computed there anyway, or never dropped are
            # simply kept (assemble extends their life); the others are recomputed too.
            avail = set(np.flatnonzero(plan.schedule.S_RAM[g.next] | plan.R[g.next] | ~droppable).tolist())
            stage = closure(graph, {g.node}, avail - {g.node})
            secs = sum(problem.costs.compute_s[k] for k in stage) or 1e-12
            scored.append((graph.nodes[g.node].output_bytes / secs, g, stage))
        scored.sort(key=lambda x: (-x[0], x[1].node, x[1].next))
        for _, g, stage in scored:
            if past_step_deadline():
                break
            tried.add(("re", g.node, g.next))
            R = plan.R.copy()
            R[g.next, sorted(stage)] = True
            new = _Plan(problem, R, plan.paged)
            if new.better(plan, problem):
                plan = new
                steps["recompute"] += 1
                break
        else:
            break

    return trial.finish(plan.schedule, fig=plan.fig,
                        note=f"{steps['page']} paged intervals, {steps['recompute']} recomputations")
