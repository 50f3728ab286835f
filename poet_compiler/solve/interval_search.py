"""Interval search: a schedule for a large graph from the interval formulation.

The stage formulations grow with n² (a 578-node BERT takes gigabytes); the interval
formulation (:mod:`.formulation.interval`) grows with n·C, so on graphs of hundreds or
thousands of nodes it finds schedules where the stage models cannot even be built. It
searches synchronous transfers; on a DMA device where time matters (stage-long
transfers) its schedule is carried over by making each page-in one stage earlier (where
the stage-long rules make it usable at its reader's stage) and kept only if the
simulator accepts it under those rules.

A schedule whose live bytes fit but whose static arena does not (the DAGs' arbitrary sizes
fragment) is compacted by finalize's arena check (MOVEs, :mod:`poet_compiler.schedule.compact`)
and kept. Only where compaction finds no room (buffers in flight) is it solved again with
the bytes its layout overflowed by kept free where it overflowed (:mod:`.arena_reserve`):
not a budget lowered everywhere, as :mod:`.milp` does for the stage models.

With no schedule in hand (no hint fits the budget), the energy model is first solved cold
for COLD_SHARE of the time; if that finds nothing, the model's least-RAM variant
(``least_ram``) starts from an offline-eviction plan above the budget (the least budget
where one succeeds; else checkpoint-all) and works the peak down to the budget,
stopping at the first schedule within it, which then hints the energy model. The
energy model alone gives CP-SAT no solution to start from, and found none in 280 s on a
250-node layered DAG at 80 %.

Its schedules are judged like every other (the simulator's figures); its own bound holds
only for at most C stays per tensor, so it is reported (``Result.extra.interval``) but
never used for an optimality claim.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from poet_compiler import work
from poet_compiler.schedule.from_program import schedule_from_program
from poet_compiler.schedule.program import Program
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.arena_reserve import as_reserves, overflow_by_event
from poet_compiler.solve.backends.native import NativeLimits, solve_native
from poet_compiler.solve.baselines.belady import least_budget_program
from poet_compiler.solve.baselines.keep_all import checkpoint_all_schedule
from poet_compiler.solve.budgets import reference
from poet_compiler.solve.finalize import finalize
from poet_compiler.solve.formulation.interval import DEFAULT_COPIES, Reserve, build_interval, hint, stays_needed
from poet_compiler.solve.problem import Problem, feasible_energy

# A hint with more stays per tensor than this is not held (links grow with the square).
MAX_COPIES = 4
# When the model is proven empty, copies are doubled up to this, with at least
# MIN_RETRY_S left (random layered DAGs need long recompute chains).
MAX_RETRY_COPIES = 16
MIN_RETRY_S = 1.0
# A schedule whose static arena does not fit (fragmentation) is solved again with arena
# reserves (:mod:`.arena_reserve`), halved when they leave no schedule found in time, up
# to ARENA_RETRIES times; each solve but the last gets ARENA_SOLVE_SHARE of the time left.
ARENA_RETRIES = 6
ARENA_SOLVE_SHARE = 0.5
# Each arena check, harder re-plans included, gets at most ARENA_CHECK_SHARE of the time
# left and ARENA_CHECK_S: on a 100-node layered DAG at 90 % (108 buffers), the first plan
# (2 s) needed 1,071 B for a 993 B budget and a re-plan at effort 64 fitted it in 7.6 s
# (BENCHMARKS.md, "Fragmentation on the layered DAGs").
ARENA_CHECK_SHARE = 0.25
ARENA_CHECK_S = 30.0
# With no schedule in hand the least-RAM search may use all the time (it stops at the
# first schedule within the budget, which the energy model then improves); when a solve
# of it ends above the budget and proves nothing, the search goes on while
# MIN_SEARCH_ON_S are left (on a 500-node layered DAG at 80 %, 300 s, a first solve
# returned after 101 s with nothing, and poetc then stopped at 110 s).
MIN_SEARCH_ON_S = 5.0
# With nothing in hand the energy model is first solved without a hint for this share of
# the time; only when that finds nothing does the least-RAM search run. Hinted from the
# least-RAM schedule, the energy model did worse where it can start cold: DAG 100 at 80 %
# found its first solution cold at 12 s and 271.61 J at 30 s, but ended at 285.56 J in
# the pipeline (300 s) from the least-RAM schedule (328 J, found at 5.5 s).
COLD_SHARE = 0.2
# The least-RAM search starts from an offline-eviction plan above the budget when one is
# found within this share of the time left (bisection over budgets, a few runs of
# 0.1-0.4 s each on 250-1,000 nodes).
EVICTION_START_SHARE = 0.1
# The least-RAM model runs CP-SAT's interleaved search (NativeLimits.interleave): on DAG 250
# at 80 % from the same start, two workers by default reached the budget after 49, 114 and
# 39 s, interleaved after 61.4 and 61.3 s (65-67 s in the pipeline), where a pipeline
# run's share is about 120 s. Not bit for bit the same search: under load two runs on a
# 40-node DAG returned different schedules. The energy model keeps the default: from the least-RAM
# schedule, in 45 s, 678.6 J against 727.6 J interleaved. BENCHMARKS.md, "Optimizer grid".


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
    arena_retries: int = 0        # re-solves with arena reserves
    layout: Program | None = None  # the schedule's Program with an arena that fits (finalize(layout=))
    # The least-RAM search (nothing in hand): the least activation RAM of a schedule it
    # found, in bytes (within the budget once it found one), and its seconds.
    least_ram_bytes: int | None = None
    least_ram_s: float | None = None
    above_budget: Schedule | None = None  # its least-RAM schedule while that is above the budget

    def summary(self) -> dict:
        """The figures a Result reports (``extra.interval``)."""
        out = {"copies": self.copies, "status": self.status, "energy_j": self.energy_j, "bound_j": self.bound_j,
               "arena_fits": self.arena_fits, "arena_retries": self.arena_retries, "message": self.message}
        if self.least_ram_s is not None:
            out.update(least_ram_bytes=self.least_ram_bytes, least_ram_s=self.least_ram_s)
        return out


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
    started = work.now()
    until = started + time_limit_s
    sync = problem if problem.synchronous else dataclasses.replace(problem, transfers="sync")
    usable = [h for h in hints if feasible_energy(sync, h) is not None]
    # Enough copies to hold the best hint, unless that takes more than MAX_COPIES.
    needed = stays_needed(usable[0]) if usable else DEFAULT_COPIES
    copies = max(DEFAULT_COPIES, needed) if needed <= MAX_COPIES else DEFAULT_COPIES
    least: IntervalOutcome | None = None      # the least-RAM search, when nothing was in hand
    solved: IntervalOutcome | None = None     # the cold solve, when it found a schedule
    if not usable:
        now = work.now()
        cold = _with_enough_copies(problem, sync, [], copies, now + COLD_SHARE * (until - now), target_j, threads)
        copies = cold.copies
        if cold.schedule is not None:
            solved = cold
        elif cold.status == "infeasible":
            return cold
        else:
            start = _eviction_start(sync, until)
            if start is not None and copies < stays_needed(start) <= MAX_COPIES:
                copies = stays_needed(start)      # enough stays to hold the start
            least = _least_ram_search(problem, sync, copies, until, threads, start)
            if least.schedule is None:
                return least
            copies, usable = least.copies, [least.schedule]
    out = _search(problem, sync, usable, copies, until, target_j, threads, least, solved)
    if least is not None:
        out.least_ram_bytes, out.least_ram_s = least.least_ram_bytes, least.least_ram_s
    return out


def _search(problem: Problem, sync: Problem, usable: list[Schedule], copies: int, until: float,
            target_j: float | None, threads: int, least: IntervalOutcome | None,
            solved: IntervalOutcome | None = None) -> IntervalOutcome:
    """The energy model from ``usable``, solved again with arena reserves while its
    schedule's static arena does not fit; ``least`` (the least-RAM search's schedule) is
    the answer when the energy model finds nothing in time; ``solved``, a first solve
    already made (the cold one), takes the first solve's place."""
    held = np.zeros(0, dtype=np.int64)        # bytes kept free per event (arena reserves)
    first: IntervalOutcome | None = None
    for attempt in range(ARENA_RETRIES + 1):
        left = until - work.now()
        share = left * (ARENA_SOLVE_SHARE if attempt < ARENA_RETRIES else 1.0)
        reserves = as_reserves(held)
        if attempt == 0 and solved is not None:
            out = solved
        elif reserves:
            out = _solve(problem, sync, usable, copies, work.now() + share, target_j, threads, reserves)
        else:
            out = _with_enough_copies(problem, sync, usable, copies, work.now() + share, target_j, threads)
        copies = out.copies
        if out.schedule is None and least is not None and not reserves and first is None:
            out, least = least, None          # the energy model found nothing in time
        if out.schedule is None:
            if reserves:
                held //= 2      # the reserves left no schedule (or none found in time): weaker ones
            elif first is not None or out.status == "infeasible" or until - work.now() < MIN_SEARCH_ON_S:
                return first or out
            # else nothing found yet and nothing proven: search on with the time left
            if until - work.now() < MIN_RETRY_S:
                break
            continue
        check_s = min(ARENA_CHECK_S, ARENA_CHECK_SHARE * (until - work.now()))
        laid = finalize(problem, out.schedule, strategy="optimal", arena_time_s=check_s)
        out.arena_retries = attempt
        if laid.program is None or laid.arena_bytes is None or laid.arena_bytes <= problem.activation_budget:
            out.arena_fits, out.layout = True, laid.program
            return out
        # Live bytes fit, the static arena does not (fragmentation): keep free, where
        # the layout overflowed, what it overflowed by (added to earlier rounds', so a
        # place that overflows again holds back more), and solve again from this schedule.
        first = first or out
        over = overflow_by_event(problem.graph, laid.program, problem.activation_budget)
        held = over if not held.size else held + over
        usable = [out.schedule, *usable]
        if until - work.now() < MIN_RETRY_S:
            break
    return first or out


def _eviction_start(sync: Problem, until: float) -> Schedule | None:
    """Where the least-RAM search starts when it can: the offline-eviction plan at about
    the least budget where one succeeds (:func:`~.baselines.belady.least_budget_program`),
    between the budget and checkpoint-all's peak, as a schedule; None when recomputation
    is not allowed or no such plan is found within EVICTION_START_SHARE of the time."""
    if not sync.allows_remat:
        return None
    started = work.now()
    high = reference(sync.graph, sync.costs).peak_bytes      # checkpoint-all's peak
    found = least_budget_program(sync.graph, sync.costs.compute_s, sync.activation_budget, high,
                                 until=started + EVICTION_START_SHARE * (until - started))
    if found is None:
        return None
    return schedule_from_program(sync.graph, found[1], sync.mode, dma=False)


def _least_ram_search(problem: Problem, sync: Problem, copies: int, until: float, threads: int,
                      start_from: Schedule | None = None) -> IntervalOutcome:
    """The least-RAM model from ``start_from`` (else checkpoint-all) until a schedule fits
    the budget, it is proven that none with at most MAX_RETRY_COPIES stays per tensor
    does, or the time is up. A solve that ends above the budget without a proof (a
    child's failure) is followed by another from its least-RAM schedule while
    MIN_SEARCH_ON_S are left."""
    started = work.now()
    start: list[Schedule] = [] if start_from is None else [start_from]
    while True:
        out = _with_enough_copies(problem, sync, start, copies, until, None, threads, least_ram=True)
        out.least_ram_s = round(work.now() - started, 3)
        if out.schedule is not None or out.status == "infeasible" or until - work.now() < MIN_SEARCH_ON_S:
            return out
        copies, start = out.copies, [out.above_budget] if out.above_budget is not None else []


def _with_enough_copies(problem: Problem, sync: Problem, usable: list[Schedule], copies: int, until: float,
                        target_j: float | None, threads: int, least_ram: bool = False) -> IntervalOutcome:
    """Solve with ``copies`` stays per tensor, doubling them while the model is proven
    empty (deep recompute chains need more) and time is left."""
    while True:
        out = _solve(problem, sync, usable, copies, until, target_j, threads, [], least_ram)
        if out.status != "infeasible" or copies >= MAX_RETRY_COPIES or until - work.now() < MIN_RETRY_S:
            return out
        copies = min(MAX_RETRY_COPIES, 2 * copies)


def _solve(problem: Problem, sync: Problem, usable: list[Schedule], copies: int, until: float,
           target_j: float | None, threads: int, reserves: list[Reserve], least_ram: bool = False) -> IntervalOutcome:
    """One build and solve with ``copies`` stays per tensor and the ``reserves``, ending
    by ``until``. With ``least_ram``, the least-RAM model from checkpoint-all, stopped at
    the first schedule within the budget: status "infeasible" when it proves none has at
    most ``copies`` stays per tensor."""
    started = work.now()
    im = build_interval(sync, copies=copies, reserves=reserves, least_ram=least_ram)
    # The first hint it holds; the least-RAM model checkpoint-all at worst.
    hinted = any(hint(im, h) for h in usable) or (least_ram and hint(im, checkpoint_all_schedule(sync)))
    build_s = work.now() - started
    left = until - work.now()
    if left <= 0.05:
        return IntervalOutcome(None, None, copies=copies, build_s=build_s, message="no time left to solve")
    budget_units = problem.activation_budget // im.unit
    target = budget_units if least_ram else None
    if target_j is not None:
        target = math.floor((target_j - im.obj_const) / im.obj_unit)
    res = solve_native(im.model, NativeLimits(time_limit_s=left, workers=max(1, threads),
                                              target=target, isolate=True, interleave=least_ram))
    out = IntervalOutcome(None, None, copies=copies, status=res.status, build_s=round(build_s, 3),
                          solve_s=round(res.solve_time_s, 3),
                          message=res.message or ("hinted" if hinted else "no hint it can hold"))
    if least_ram and res.objective is not None:
        out.least_ram_bytes = int(res.objective) * im.unit
        if res.objective > budget_units:
            if res.status == "optimal":
                out.status = "infeasible"   # no schedule with at most ``copies`` stays fits
            out.above_budget = im.schedule(res.value)
            out.message = (f"least activation RAM found with at most {copies} stays per tensor: "
                           f"{out.least_ram_bytes} B, above the budget of {problem.activation_budget} B")
            return out
    elif res.status == "optimal" and not res.at_target:
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
