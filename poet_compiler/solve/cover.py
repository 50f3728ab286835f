"""The eviction-cover bound: a small combinatorial lower bound on the optimal energy
(docs/optimizer.md, "The eviction cover").

At the first compute point of node ``t`` (docs/model.md, Memory), a tensor ``i < t`` whose
next consumer is ``c > t`` and that is out of RAM must be *restored* in a stage of
``(t, c]``: recomputed, or paged in (after a page-out of ``i`` somewhere). Restores before
different consumers are distinct events, so their costs add up. With a 0/1 choice per
(tensor, next consumer) *gap* and mechanism::

    minimize   sum cost(mechanism, i) * x[i, c, mechanism] + sum page_out_cost(i) * y[i]
    subject to for every node t:  need(t) - sum_{gaps (i, c) around t} size_i * x[i, c, .] <= budget
               x[i, c, page] <= y[i]
               recompute time (+ paging time without DMA) <= deadline - compute-only time

where ``need(t)`` is the checkpoint-all live set at ``t``. Every schedule maps to a choice
of no larger cost, so the optimum plus the compute-once energy is a lower bound and an
infeasible cover proves infeasibility; costs and times are rounded down to stay valid. It
ignores what a restore needs (a recompute's inputs), where the optimum can cost more.
The model is :mod:`.cover_model`'s; this module solves it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any  # Any: CP-SAT objects (the model is built on solvers/native.py)

from poet_compiler import work
from poet_compiler.solve.cover_model import (
    PAGE,
    RECOMPUTE,
    CoverModel,
    Gap,
    absence_literals,
    add_deadline_row,
    build_cover,
)
from poet_compiler.solve.exposure import applies
from poet_compiler.solve.problem import Problem
from poet_compiler.solve.tuning import TUNING, Tuning
from poet_compiler.solvers.native import NativeLimits, NativeResult, solve_native

__all__ = ["PAGE", "RECOMPUTE", "CoverBound", "Restore", "StagedChoice", "absence_literals", "cover_bound",
           "cover_min_budget", "cover_min_time", "deeper_cover"]


@dataclass(frozen=True)
class Restore:
    """The cover's choice for one gap: ``node`` is out of RAM from its previous use until
    ``next_use`` and comes back by ``how``."""

    node: int
    next_use: int
    how: str


@dataclass(frozen=True)
class StagedChoice:
    """Restores in the stages they happen in (the presence model's solution): ``(stage,
    node)`` recomputes and paged nodes; a guide for the guided sub-problem, not a schedule."""

    recompute: frozenset[tuple[int, int]] = frozenset()
    paging: frozenset[int] = frozenset()


@dataclass(frozen=True)
class CoverBound:
    """``energy_j``: a lower bound on every schedule's energy (None if infeasible);
    ``closed``: solved to optimality (else the solver's bound, still valid). ``restores``:
    the best choice (a guide, not a schedule); ``build_s``: the seconds its model took to
    build, what another cover of the graph can expect. ``other_restores``: the other
    model's choice when both were solved, where the guided search widens; ``staged``: the
    presence model's choice (set by the bounds stage, :mod:`.pipeline.bounds`)."""

    energy_j: float | None
    infeasible: bool
    closed: bool
    restores: tuple[Restore, ...] = ()
    build_s: float = 0.0
    other_restores: tuple[Restore, ...] = ()
    staged: StagedChoice = StagedChoice()


def cover_bound(problem: Problem, *, budget: int | None = None, time_limit_s: float | None = None,
                closure: bool = False, workers: int = 1, tuning: Tuning = TUNING) -> CoverBound:
    """The eviction-cover bound of ``problem`` at ``budget`` (default: its activation budget),
    within ``time_limit_s`` (default: ``tuning.cover_limit_s``).

    Two relaxations: the *light* model charges a recompute its own energy; the *refined*
    one also makes it keep (or bring back) the inputs nobody reads after the gap starts,
    with an absence literal per gap point (:func:`_dead_paths`). The refined one is the
    tighter when it closes (README demo: 0.006061 against 0.005741 J, both closed), but on big graphs
    CP-SAT stops it below the light optimum (gpt2_large: 2044.6 J after 11 s against
    2048.1 J in 3 s). So the light model gets at most half of the time, the refined one the
    rest when its forecast build (:func:`absence_literals`, at ``tuning.absence_literal_s``
    each) fits in half of that; the bound
    is the better, the restores the refined model's when it has some. The refined model
    runs on ``workers`` threads of CP-SAT's interleaved search (deterministic): its LNS
    workers closed it where one worker stayed at its first LP bound for 10 s
    (ResNet-18-CIFAR a72 50 % 2.0x: 43.924 J in 6.3 s against 43.716 J).

    ``closure=True`` charges a recompute with its whole :func:`recompute_closure`: closer
    to what a schedule pays, but ``energy_j`` is then **not** a bound (a schedule may keep
    those inputs); only its restores are used, to build a schedule (:mod:`.guided`)."""
    time_limit_s = tuning.cover_limit_s if time_limit_s is None else time_limit_s
    started = work.now()
    light = _solve_cover(problem, budget, time_limit_s / 2 if not closure else time_limit_s,
                         closure=closure, absences=False)
    left = time_limit_s - (work.now() - started)
    literals = 0 if closure or light.infeasible else absence_literals(problem)
    if not literals or tuning.absence_literal_s * literals > left / 2:
        return light
    refined = _solve_cover(problem, budget, left, closure=False, absences=True, workers=workers)
    build_s = light.build_s + refined.build_s
    if refined.infeasible:
        return dataclasses.replace(refined, build_s=build_s)
    best = refined if (refined.energy_j or 0.0) >= (light.energy_j or 0.0) else light
    restores = refined.restores if refined.restores or not light.restores else light.restores
    other = light.restores if restores is refined.restores else refined.restores
    return dataclasses.replace(best, restores=restores, build_s=build_s, other_restores=other)


def deeper_cover(problem: Problem, cover: CoverBound, *, time_limit_s: float, workers: int = 1,
                 exposure: bool = True, tuning: Tuning = TUNING) -> CoverBound:
    """``cover`` with the bound of the *deep* refined model when that is higher: chains of
    dead inputs ``tuning.dead_depth`` deep and, with ``exposure`` where transfers are
    stage-long, the paging time that outlasts its stage (:mod:`.exposure`). Its restores
    stay ``cover``'s (they guide the schedules better: ``Tuning.dead_depth``). ``cover``
    itself when the graph has neither, or the forecast build does not fit in half of
    ``time_limit_s``. A valid bound: every schedule (of the family searched) maps to a
    choice of it too."""
    depth = tuning.dead_depth
    literals = absence_literals(problem, depth)   # more than one level's: a chain
    exposure = exposure and applies(problem)
    if cover.energy_j is None or (not exposure and literals <= absence_literals(problem)) or \
            tuning.absence_literal_s * literals > time_limit_s / 2:
        return cover
    deep = _solve_cover(problem, None, time_limit_s, closure=False, absences=True, workers=workers,
                        depth=depth, exposure=exposure)
    if deep.energy_j is None or deep.energy_j <= cover.energy_j:
        return cover
    return dataclasses.replace(cover, energy_j=deep.energy_j, closed=deep.closed,
                               build_s=cover.build_s + deep.build_s)


def _budget_rows(cv: CoverModel, limit: int) -> bool:
    """RAM within ``limit`` at every point; False when some point cannot get there."""
    for t, need in enumerate(cv.need):
        excess = need - limit
        if excess <= 0:
            continue
        if sum(s for _, s in cv.around[t] if s > 0) < excess:
            return False
        cv.m.add(sum(s * x for x, s in cv.around[t]) >= excess)
    return True


def _restores(gaps: list[Gap], res: NativeResult) -> tuple[Restore, ...]:
    return tuple(Restore(gap.node, gap.next_use, how) for gap in gaps for how, x in gap.options.items() if res.value(x))


def _solve_cover(problem: Problem, budget: int | None, time_limit_s: float, *, closure: bool,
                 absences: bool, workers: int = 1, depth: int = 1, exposure: bool = False) -> CoverBound:
    """One cover model (:func:`cover_bound`) built and solved within ``time_limit_s``."""
    started = work.now()
    cv = build_cover(problem, closure=closure, absences=absences, depth=depth, exposure=exposure)
    # The build counts against the limit (1.8 s on a 1,567-node graph, which took a
    # compile at --time-limit 20 past its limit).
    build_s = work.now() - started
    infeasible = CoverBound(None, True, True, build_s=build_s)
    if not _budget_rows(cv, problem.activation_budget if budget is None else budget):
        return infeasible
    add_deadline_row(cv.m, cv.time_terms, cv.slack, cv.t_scale)
    cv.m.minimize(sum(k * x for x, k in cv.cost))
    res = _solve(cv.m, max(0.0, time_limit_s - build_s), workers)
    base = problem.costs.compute_only_j
    if res.status == "infeasible":
        return infeasible
    if res.status == "unknown":
        return CoverBound(base, False, False, build_s=build_s)
    bound = base + math.floor(_bound(res) + 1e-6) / cv.e_scale
    return CoverBound(bound, False, res.status == "optimal", _restores(cv.gaps, res), build_s)


def _solve(m: Any, time_limit_s: float, workers: int = 1) -> NativeResult:
    """A cover model solved deterministically: one worker, or several interleaved."""
    return solve_native(m, NativeLimits(time_limit_s=time_limit_s, workers=max(1, workers),
                                        interleave=workers > 1))


def _bound(res: NativeResult) -> float:
    """CP-SAT's bound of a result that has a solution."""
    assert res.bound is not None
    return res.bound


def cover_min_budget(problem: Problem, *, time_limit_s: float) -> int | None:
    """A lower bound on the smallest activation budget at which a schedule meets the
    deadline: the cover's rows with the budget as the variable (a schedule that fits B
    gives a choice that fits B). None when no budget fits the deadline; 0 (no
    information) when the solver stops without a proof."""
    cv = build_cover(problem, closure=False)
    m = cv.m
    b = m.new_int_var(0, max(cv.need, default=0), "budget")
    for t in range(problem.n):
        m.add(sum(s * x for x, s in cv.around[t]) + b >= cv.need[t])
    add_deadline_row(m, cv.time_terms, cv.slack, cv.t_scale)
    m.minimize(b)
    res = _solve(m, time_limit_s)
    if res.status == "infeasible":
        return None
    if res.status == "unknown":
        return 0
    return max(0, math.ceil(_bound(res) - 1e-6))


def cover_min_time(problem: Problem, *, budget: int | None = None,
                   time_limit_s: float) -> tuple[float, CoverBound] | None:
    """A lower bound on the step time of any schedule within ``budget`` (default: the
    activation budget) at any deadline: the cover's rows with the restores' time (as in
    the deadline row) as the objective. ``(seconds, choice)``, the choice's ``energy_j``
    its cover cost (not a bound); None when no schedule fits the budget."""
    cv = build_cover(problem, closure=False, deadline=False)
    if not _budget_rows(cv, problem.activation_budget if budget is None else budget):
        return None
    # Time first; among the fastest choices, the cheapest (energy breaks ties).
    worst_cost = sum(k for _, k in cv.cost) + 1
    cv.m.minimize(sum(k * worst_cost * x for x, k in cv.time_terms) + sum(k * x for x, k in cv.cost))
    res = _solve(cv.m, time_limit_s)
    if res.status == "infeasible":
        return None
    base = problem.costs.compute_only_s
    if res.status == "unknown":
        return base, CoverBound(None, False, False)
    t_units = max(0, math.floor(_bound(res) / worst_cost + 1e-9))
    energy = problem.costs.compute_only_j + sum(k for x, k in cv.cost if res.value(x)) / cv.e_scale
    return base + t_units / cv.t_scale, CoverBound(energy, False, res.status == "optimal", _restores(cv.gaps, res))
