"""Random *valid* schedules (ignoring budgets), including wasteful ones.

Used to test the linearizer, simulator, memory formula, arena planner and cleanup on
far more shapes than optimal schedules have: random recomputes, page-outs that are never
paged back, page-ins that are never kept, tensors dropped early. Every schedule returned
passes :func:`check_schedule` in the requested mode.
"""

from __future__ import annotations

import random

from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schedule.schedule import Schedule


def random_schedule(graph: TrainingGraph, seed: int, mode: str = "poet", *, keep_prob: float = 0.6,
                    remat_prob: float = 0.2, out_prob: float = 0.3, in_prob: float = 0.3) -> Schedule:
    rng = random.Random(seed)
    n = graph.n
    remat, paging = mode in ("poet", "remat"), mode in ("poet", "paging")
    pinned = {node.id for node in graph.nodes if node.pinned}
    s = Schedule.empty(n)
    ram: set[int] = set()
    flash: set[int] = set()
    consumers = graph.consumers
    for t in range(n):
        # Recomputes: random extras, then close under the dependency rule.
        R = {t}
        if remat:
            R |= {i for i in range(t) if i not in ram and i not in pinned and rng.random() < remat_prob}
        changed = True
        while changed:
            changed = False
            for j in sorted(R, reverse=True):
                for i in graph.nodes[j].inputs:
                    if i not in ram and i not in R:
                        assert remat and i not in pinned, "generator invariant: a needed input is unavailable"
                        R.add(i)
                        changed = True
        m_out = {i for i in ram if i not in pinned and paging and rng.random() < out_prob}
        # Next stage's inputs that are not going to be in RAM must be paged in now (no-remat modes).
        need_next = set(graph.nodes[t + 1].inputs) if t + 1 < n else set()
        m_in = {i for i in flash if i not in ram and i not in R and i not in pinned and paging
                and (rng.random() < in_prob or (not remat and i in need_next))}
        kept: set[int] = set()
        if t + 1 < n:
            for i in sorted(ram | R | m_in):
                later = [c for c in consumers[i] if c > t]
                if i in pinned or (not remat and i in need_next and i not in m_in):
                    kept.add(i)
                elif not remat and later and i not in flash:
                    kept.add(i)           # cannot be restored later except from RAM
                elif not remat and later and min(later) == t + 1:
                    kept.add(i)           # needed next stage: no time to page it back in
                elif rng.random() < keep_prob:
                    kept.add(i)
        for i in R:
            s.R[t, i] = True
        for i in m_in:
            s.M_in[t, i] = True
        for i in m_out:
            s.M_out[t, i] = True
        flash |= m_out
        ram = kept
        if t + 1 < n:
            for i in ram:
                s.S_RAM[t + 1, i] = True
            for i in flash:
                s.S_AUX[t + 1, i] = True
    return s
