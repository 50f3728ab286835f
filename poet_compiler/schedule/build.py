"""Schedules from decisions: the stage matrices of docs/model.md for a choice of computes.

* :func:`need_stages` — the stages at whose start a tensor must be in RAM (a compute of
  the stage reads it and the stage does not compute it first);
* :func:`compute_stages` — the stages that compute each node;
* :func:`assemble` — the cheapest consistent ``S_RAM``/``S_AUX``/``M_in``/``M_out`` for an
  ``R`` and a set of paged intervals: a tensor is kept from its last computation up to
  each need and freed otherwise ("free after last use" across stages), and a paged
  interval becomes page-out in the stage after the use and page-in in the stage before
  the next need.

Used by the baselines, the cover's realization, the budgets' reference (checkpoint-all)
and the infeasibility analysis.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from poet_compiler.errors import ScheduleError
from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schedule.schedule import Schedule


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
