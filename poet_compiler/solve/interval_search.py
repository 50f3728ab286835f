"""Interval search: a schedule for a large graph from the interval formulation.

The stage formulations grow with n² (a 578-node BERT takes gigabytes); the interval
formulation (:mod:`.formulation.interval`) grows with n·C, so on graphs of hundreds or
thousands of nodes it finds schedules where the stage models cannot even be built. It
searches synchronous transfers; on a DMA device where time matters (stage-long
transfers) its schedule is carried over by making each page-in one stage earlier (where
the stage-long rules make it usable at its reader's stage) and kept only if the
simulator accepts it under those rules.

A schedule whose live bytes fit but whose static arena does not (the DAGs' arbitrary sizes
fragment) is solved again at a budget lowered by the overshoot, as :mod:`.milp` does for
the stage models, but within this search (it solves in seconds where those take minutes).

Its schedules are judged like every other (the simulator's figures); its own bound holds
only for at most C stays per tensor, so it is reported (``Result.extra.interval``) but
never used for an optimality claim.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.backends.native import NativeLimits, solve_native
from poet_compiler.solve.finalize import finalize
from poet_compiler.solve.formulation.interval import DEFAULT_COPIES, build_interval, hint, stays_needed
from poet_compiler.solve.problem import Problem, feasible_energy

# A hint with more stays per tensor than this is not held (links grow with the square).
MAX_COPIES = 4
# When the model is proven empty, copies are doubled up to this, with at least
# MIN_RETRY_S left (random layered DAGs need long recompute chains).
MAX_RETRY_COPIES = 16
MIN_RETRY_S = 1.0
# A schedule whose static arena does not fit (fragmentation) is solved again with the
# budget lowered by the overshoot, up to ARENA_RETRIES times; each solve but the last gets
# ARENA_SOLVE_SHARE of the time left, and each arena check at most ARENA_CHECK_S.
ARENA_RETRIES = 3
ARENA_SOLVE_SHARE = 0.5
ARENA_CHECK_S = 2.0


@dataclasses.dataclass
class IntervalOutcome:
    """The interval search's best schedule for the problem (or None), its simulated
    energy, the model's own bound (restricted to ``copies`` stays), and its figures."""

    schedule: Schedule | None
    energy_j: float | None
    bound_j: float | None = None
    copies: int = DEFAULT_COPIES
    status: str = "unknown"
    build_s: float = 0.0
    solve_s: float = 0.0
    message: str = ""
    arena_fits: bool = False      # its static arena (planned as finalize plans it) fits
    arena_retries: int = 0        # re-solves with the budget lowered by the arena's overshoot


def to_stage_long(schedule: Schedule) -> Schedule:
    """A synchronous schedule's stage-long counterpart: every page-in one stage earlier
    (a stage-long page-in is usable from the next stage). The caller checks it."""
    s = schedule.copy()
    for t, i in zip(*np.nonzero(schedule.M_in)):
        s.M_in[t, i] = False
        if t - 1 > i:
            s.M_in[t - 1, i] = True
    return s


def interval_search(problem: Problem, hints: list[Schedule], *, time_limit_s: float, threads: int,
                    target_j: float | None = None) -> IntervalOutcome:
    """Solve the interval model of ``problem`` (its synchronous family) within
    ``time_limit_s``, from the first of ``hints`` it can hold; stop early at a schedule of
    at most ``target_j`` joules (e.g. within the gap limit of the cover bound)."""
    started = time.perf_counter()
    until = started + time_limit_s
    sync = problem if problem.synchronous else dataclasses.replace(problem, transfers="sync")
    usable = [h for h in hints if feasible_energy(sync, h) is not None]
    # Enough copies to hold the best hint, unless that takes more than MAX_COPIES.
    needed = stays_needed(usable[0]) if usable else DEFAULT_COPIES
    copies = max(DEFAULT_COPIES, needed) if needed <= MAX_COPIES else DEFAULT_COPIES
    budget = sync.activation_budget
    first: IntervalOutcome | None = None
    for attempt in range(ARENA_RETRIES + 1):
        left = until - time.perf_counter()
        share = left * (ARENA_SOLVE_SHARE if attempt < ARENA_RETRIES else 1.0)
        out = _with_enough_copies(problem, sync, usable, copies, time.perf_counter() + share, target_j,
                                  threads, budget)
        copies = out.copies
        if out.schedule is None:
            return first or out
        arena, peak = _arena(problem, out.schedule, min(ARENA_CHECK_S, 0.1 * left))
        out.arena_retries = attempt
        if arena <= problem.activation_budget:
            out.arena_fits = True
            return out
        # Live bytes fit, the static arena does not (fragmentation): hold back the
        # overshoot, at least below this schedule's peak, and solve again.
        first = first or out
        budget = min(budget - (arena - problem.activation_budget), peak - 1)
        if budget <= 0 or until - time.perf_counter() < MIN_RETRY_S:
            break
    return first or out


def _arena(problem: Problem, schedule: Schedule, time_limit_s: float) -> tuple[int, int]:
    """(static arena bytes, live peak bytes) of the schedule as finalize lays it out, its
    arena planned within ``time_limit_s``."""
    res = finalize(problem, schedule, strategy="optimal", arena_time_s=time_limit_s)
    peak = res.peak_ram_bytes or 0
    return (res.arena_bytes if res.arena_bytes is not None else peak), peak


def _with_enough_copies(problem: Problem, sync: Problem, usable: list[Schedule], copies: int, until: float,
                        target_j: float | None, threads: int, budget: int) -> IntervalOutcome:
    """Solve with ``copies`` stays per tensor, doubling them while the model is proven
    empty (deep recompute chains need more) and time is left."""
    while True:
        out = _solve(problem, sync, usable, copies, until, target_j, threads, budget)
        if out.status != "infeasible" or copies >= MAX_RETRY_COPIES or until - time.perf_counter() < MIN_RETRY_S:
            return out
        copies = min(MAX_RETRY_COPIES, 2 * copies)


def _solve(problem: Problem, sync: Problem, usable: list[Schedule], copies: int, until: float,
           target_j: float | None, threads: int, budget: int) -> IntervalOutcome:
    """One build and solve with ``copies`` stays per tensor and ``budget`` bytes, ending by
    ``until``."""
    started = time.perf_counter()
    im = build_interval(sync, copies=copies, budget=budget)
    hinted = next((h for h in usable if hint(im, h)), None) is not None
    build_s = time.perf_counter() - started
    left = until - time.perf_counter()
    if left <= 0.05:
        return IntervalOutcome(None, None, copies=copies, build_s=build_s, message="no time left to solve")
    target = None
    if target_j is not None:
        target = math.floor((target_j - im.obj_const) / im.obj_unit)
    res = solve_native(im.model, NativeLimits(time_limit_s=left, workers=max(1, threads),
                                              target=target, isolate=True))
    out = IntervalOutcome(None, None, copies=copies, status=res.status, build_s=round(build_s, 3),
                          solve_s=round(res.solve_time_s, 3),
                          message=res.message or ("hinted" if hinted else "no hint it can hold"))
    if res.status == "optimal" and not res.at_target:
        out.bound_j = im.energy_bound(res.objective or 0.0)
    elif res.bound is not None:
        out.bound_j = im.energy_bound(res.bound)
    if not res.has_solution:
        return out
    schedule = im.schedule(res.value)
    if not problem.synchronous:
        schedule = to_stage_long(schedule)
    energy = feasible_energy(problem, schedule)
    if energy is not None:
        out.schedule, out.energy_j = schedule, energy
    else:
        out.message = "its schedule does not hold under the problem's transfers"
    return out
