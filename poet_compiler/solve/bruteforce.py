"""Exhaustive search for the minimum-energy schedule of a tiny graph: the tests' oracle.

It shares nothing with the MILP formulations. It walks the stages with the state
``(RAM set, flash set)`` between stages and, per stage, tries every combination the
execution model (docs/model.md) allows: every recompute set ``R`` closed under the
dependency rule, every page-out set ``M_out ⊆ RAM``, every page-in set
``M_in ⊆ flash ∖ RAM``, and every set of tensors kept into the next stage. Each stage
is judged exactly with the model's memory formula (:func:`stage_point_memory`), stage
time and energy. Without a deadline the best energy per state suffices (dynamic
programming over stages); with one, every state keeps its Pareto set of (energy, time).

Only choices that can never help are skipped, each of which yields a schedule that is no
worse in energy, time and memory than one that is searched:
- a page-in that is not kept into the next stage (it is usable only from there on);
- a page-out of a tensor already on flash, or of one nobody reads (no consumer);
- any transfer in the last stage; flash copies are never dropped (they cost nothing);
- a recompute whose output nothing in the stage reads and that is not kept;
- keeping a tensor nothing can read later (no consumer; without remat, no consumer
  after the stage).

Sizes supported in reasonable time (a few seconds in CPython): mode ``poet`` up to
n = 6 (n = 7 takes tens of seconds to minutes on loose budgets), ``remat`` and
``paging`` up to 7, ``none`` any size.
"""

from __future__ import annotations

import numpy as np

from poet_compiler.schedule.memory import bits, stage_point_memory
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.problem import Problem

_EPS = 1e-12


def _subsets(mask: int):
    """Every subset of ``mask`` (including 0 and ``mask`` itself), largest first."""
    sub = mask
    while True:
        yield sub
        if sub == 0:
            return
        sub = (sub - 1) & mask


class _Stage:
    """One stage decision, linked to the state it came from (for reconstruction)."""

    __slots__ = ("R", "M_in", "M_out", "kept", "flash", "parent")

    def __init__(self, R: int, M_in: int, M_out: int, kept: int, flash: int, parent: object) -> None:
        self.R, self.M_in, self.M_out, self.kept, self.flash, self.parent = R, M_in, M_out, kept, flash, parent


def _pareto_insert(front: list[tuple[float, float, object]], e: float, t: float, link: object) -> None:
    """Keep ``front`` the set of (energy, time) points no other point dominates."""
    for fe, ft, _ in front:
        if fe <= e + _EPS and ft <= t + _EPS:
            return
    front[:] = [p for p in front if not (e <= p[0] + _EPS and t <= p[1] + _EPS)]
    front.append((e, t, link))


def brute_force(problem: Problem) -> tuple[float, Schedule] | None:
    """Minimum energy and one schedule achieving it, or None when no schedule is feasible.

    Exact over every schedule of docs/model.md in the problem's mode, with the problem's
    activation budget and deadline. Exponential: meant for n <= 6 (see module docstring).
    """
    g, c = problem.graph, problem.costs
    n = g.n
    budget = problem.activation_budget
    deadline = problem.deadline_s
    sizes = [node.output_bytes for node in g.nodes]
    work = [node.workspace_bytes for node in g.nodes]
    inputs = [sum(1 << i for i in node.inputs) for node in g.nodes]
    pinned = sum(1 << i for i, node in enumerate(g.nodes) if node.pinned)
    remat, paging = problem.allows_remat, problem.allows_paging
    has_consumer = sum(1 << i for i, users in enumerate(g.consumers) if users)
    # consumer_after[t]: tensors that some node > t reads.
    consumer_after = [sum(1 << i for i, users in enumerate(g.consumers) if users and users[-1] > t) for t in range(n)]

    def mask_sum(values, mask: int) -> float:
        return sum(values[i] for i in bits(mask))

    # frontier: state (ram, flash) -> list of (energy, time, link); link = _Stage or None.
    frontier: dict[tuple[int, int], list[tuple[float, float, object]]] = {(0, 0): [(0.0, 0.0, None)]}
    best_final: tuple[float, float, object] | None = None
    for t in range(n):
        last = t == n - 1
        nxt: dict[tuple[int, int], list[tuple[float, float, object]]] = {}
        useful = has_consumer if remat else consumer_after[t]
        for (ram, flash), points in sorted(frontier.items()):
            rc = (((1 << t) - 1) & ~ram & ~pinned) if remat else 0
            outable = (ram & ~flash & ~pinned & has_consumer) if (paging and not last) else 0
            for X in _subsets(rc):
                R = X | (1 << t)
                if any(inputs[j] & ~(ram | R) for j in bits(R)):
                    continue   # dependency rule: an input neither resident nor computed in the stage
                read = 0
                for j in bits(R):
                    read |= inputs[j]
                must_keep = X & ~read          # a recompute nobody reads must at least be kept
                if must_keep & ~useful:
                    continue
                if max(m for _, m in stage_point_memory(sizes, work, inputs, ram, R, 0, must_keep)) > budget:
                    continue                  # memory only grows with more transfers or kept tensors
                c_s = mask_sum(c.compute_s, R)
                c_j = mask_sum(c.compute_j, R)
                inable = (flash & ~ram & ~R & ~pinned & useful) if (paging and not last) else 0
                for M_out in _subsets(outable):
                    for M_in in _subsets(inable):
                        transfers = M_in | M_out
                        if max(m for _, m in stage_point_memory(sizes, work, inputs, ram, R, transfers,
                                                                 must_keep | M_in)) > budget:
                            continue
                        p_s = mask_sum(c.page_in_s, M_in) + mask_sum(c.page_out_s, M_out)
                        p_j = mask_sum(c.page_in_j, M_in) + mask_sum(c.page_out_j, M_out)
                        t_stage = max(c_s, p_s) if c.dma else c_s + p_s
                        e_stage = c_j + p_j + c.static_w * t_stage
                        new_flash = flash | M_out
                        keepable = (ram | R) & useful & ~must_keep if not last else 0
                        for K in _subsets(keepable):
                            kept = K | must_keep | M_in
                            mem = max(m for _, m in stage_point_memory(sizes, work, inputs, ram, R, transfers, kept))
                            if mem > budget:
                                continue
                            for e0, t0, link in points:
                                e, tt = e0 + e_stage, t0 + t_stage
                                if deadline is not None and tt > deadline * (1 + 1e-9):
                                    continue
                                stage = _Stage(R, M_in, M_out, kept, new_flash, link)
                                if last:
                                    if best_final is None or e < best_final[0] - _EPS:
                                        best_final = (e, tt, stage)
                                    continue
                                front = nxt.setdefault((kept, new_flash), [])
                                if deadline is None:
                                    if not front or e < front[0][0] - _EPS:
                                        front[:] = [(e, tt, stage)]
                                else:
                                    _pareto_insert(front, e, tt, stage)
        frontier = nxt
    if best_final is None:
        return None
    return best_final[0], _reconstruct(n, best_final[2])


def _reconstruct(n: int, link: object) -> Schedule:
    """Walk the parent links back from the last stage and fill the matrices."""
    stages: list[_Stage] = []
    while link is not None:
        assert isinstance(link, _Stage)
        stages.append(link)
        link = link.parent
    stages.reverse()
    s = Schedule.empty(n)
    for t, st in enumerate(stages):
        for i in bits(st.R):
            s.R[t, i] = True
        for i in bits(st.M_in):
            s.M_in[t, i] = True
        for i in bits(st.M_out):
            s.M_out[t, i] = True
        if t + 1 < n:
            for i in bits(st.kept):
                s.S_RAM[t + 1, i] = True
            for i in bits(st.flash):
                s.S_AUX[t + 1, i] = True
    assert np.all(np.diag(s.R))
    return s
