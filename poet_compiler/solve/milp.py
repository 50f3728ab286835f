"""``solve_milp``: Problem -> the least-energy schedule found within the effort -> simulated Result.

The pipeline, in the order it runs; every step takes its share of one effort budget
(:class:`~.clock.Clock`, in the work units of :mod:`poet_compiler.work`) and returns
bounds, schedules or both:

1. **quick proofs** (:func:`_solve_family`): :func:`~.feasibility.quick_infeasibility`, a
   node's working set above the budget or a deadline below the compute-only time;
2. **incumbents** (:func:`~.warm_start.warm_start_candidates`): every heuristic's plan
   that fits, the answer whenever nothing below beats it (:func:`fallback_result`);
3. **bounds** (:func:`_solve_once`): the eviction cover (:func:`~.cover.cover_bound`,
   which may prove infeasibility), then the presence model
   (:func:`~.presence_stage.presence_stage`);
4. **improvement**: :func:`_guided_stage` (the cover's schedules, the guided
   sub-problem, the deep cover), then :func:`_full_model` (the fast formulation by rounds
   of rows, up to ``FULL_MODEL_MAX_NODES``), each stopping once within the gap limit of
   the best bound;
5. **arena and finalize**: every schedule goes through :func:`~.finalize.finalize`
   (arena, compaction, replay in the simulator); one whose arena does not fit even so
   makes :func:`_solve_family` run steps 3-4 again below the overshoot
   (``MAX_ARENA_RETRIES``).

On small DMA graphs :func:`_solve_families` runs it for two program families and keeps
the better. Status: ``optimal`` only for a closed gap, ``feasible`` with the gap to the
best bound, ``timeout`` when no schedule was found within the effort, ``infeasible`` when
proven so, with the smallest RAM / deadline that would work (:mod:`.feasibility`).
"""

from __future__ import annotations

import dataclasses
import time

from poet_compiler import work
from poet_compiler.errors import PoetError, SolverError
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.backends import SOLVERS, BackendResult
from poet_compiler.solve.backends.base import within_gap
from poet_compiler.solve.backends.memory import current_limit
from poet_compiler.solve.baselines import HEURISTICS
from poet_compiler.solve.clock import MIN_STAGE_S, Clock
from poet_compiler.solve.cover import COVER_LIMIT_S, CoverBound, cover_bound, cover_limit, deeper_cover
from poet_compiler.solve.feasibility import explain_infeasible, quick_infeasibility, what_fits
from poet_compiler.solve.finalize import LAST_STEP_MIN_S, finalize
from poet_compiler.solve.formulation import FORMULATIONS, build
from poet_compiler.solve.formulation.common import Built
from poet_compiler.solve.formulation.fast import canonical
from poet_compiler.solve.guided import GuidedOutcome, cover_schedule, guided_search
from poet_compiler.solve.options import effort_units
from poet_compiler.solve.presence_stage import presence_stage
from poet_compiler.solve.problem import Problem, feasible_energy
from poet_compiler.solve.result import Result, ResultExtra
from poet_compiler.solve.row_generation import forecast_bytes, solve_built, solve_by_rows
from poet_compiler.solve.verdict import (
    BOUND_NOISE,
    apply_bound,
    better,
    count_rescues,
    keep_gap_claim_true,
    union,
)
from poet_compiler.solve.warm_start import refit, warm_start_candidates
from poet_compiler.units import format_bytes

STRATEGY = "optimal"

# poetc's own resident bytes beside a full model's forecast (the memory-limit check).
BASE_RSS_BYTES = 600 * 2**20


def _timed_out() -> bool:
    """Whether the wall cap decided something in this solve (stopped_by "time")."""
    meter = work.current()
    return meter is not None and meter.time_hit


def _effort_text(clock: Clock) -> str:
    """What ended the search as a message names it: "30 deterministic s of effort", or
    "the time limit" once the wall cap decided."""
    return "the time limit" if _timed_out() else f"{clock.limit_s:g} deterministic s of effort"


def _stopped_text(clock: Clock) -> str:
    """"stopped at the effort limit (30 deterministic s of effort)" or "stopped at the time limit"."""
    return "stopped at the time limit" if _timed_out() else f"stopped at the effort limit ({_effort_text(clock)})"


def stopped_by(res: Result, meter: work.Meter, clock: Clock, gap: float) -> str:
    """What ended the solve: ``time`` (the wall cap decided something: the only case in
    which two runs may differ), ``proof`` (optimal, or proven infeasible), ``gap`` (within
    the gap limit), else ``effort``."""
    if meter.time_hit:
        return "time"
    if res.status in ("optimal", "infeasible"):   # solve_milp reports "infeasible" only when proven
        return "proof"
    if res.gap is not None and res.gap <= max(gap, BOUND_NOISE):
        return "gap"
    return "effort"


def fallback_result(problem: Problem, candidates: list[tuple[float, str, Schedule]], *, solver: str,
                    formulation: str, started: float, tries: int = 4, clock: Clock | None = None,
                    needed: bool = True, finalize_s: float = 0.0) -> Result | None:
    """The cheapest candidate that finalize accepts (arena included), as a Result.

    With a ``clock``, candidates are finalized only while time is left (arena planning
    within it), except the first when ``needed`` (nothing else to answer with: its
    arena is then planned greedily if the time is up). ``finalize_s``: what one finalize
    takes here (measured); no optional candidate starts with less than that left."""
    for _energy, name, schedule in candidates[:tries]:
        if clock is not None and not needed and clock.left() <= finalize_s:
            break
        t_fin = work.now()
        arena_s = None if clock is None else max(clock.left(), LAST_STEP_MIN_S if needed else 0.0)
        # Candidates are valid schedules: finalize raises InternalError on a broken one.
        res = finalize(problem, schedule, strategy=STRATEGY, status="feasible", solver=solver,
                       formulation=formulation, solve_time_s=time.perf_counter() - started,
                       arena_time_s=arena_s)
        if res.ok:
            res.extra.fallback_schedule = name
            return res
        finalize_s = max(finalize_s, work.now() - t_fin)
    return None


def effective_gap(problem: Problem, gap_limit: float | None) -> float:
    """The relative gap limit in force: ``gap_limit``, else 0 on a small graph
    (:attr:`~.problem.Problem.small`) and DEFAULT_GAP_LIMIT on a larger one."""
    if gap_limit is not None:
        return float(gap_limit)
    return 0.0 if problem.small else DEFAULT_GAP_LIMIT


def _empty(problem: Problem, status: str, solver: str, formulation: str, started: float, message: str) -> Result:
    return Result(status=status, strategy=STRATEGY, mode=problem.mode, ram_budget_bytes=problem.ram_budget_bytes,  # type: ignore[arg-type]
                  deadline_s=problem.deadline_s, n_nodes=problem.n, solver=solver, formulation=formulation,
                  solve_time_s=time.perf_counter() - started, message=message)


# Graphs that are not small (problem.SMALL_GRAPH_NODES) stop at this relative gap by default.
DEFAULT_GAP_LIMIT = 1e-3
# Fragmentation feedback: re-solves with a budget lowered by the arena's overshoot (at
# least below the peak of the schedule that did not fit), while effort is left. No cell of
# the grid, the scale runs or the DAGs re-solved (compaction kept every schedule); where
# compaction cannot (tests/solve/test_arena_rescue.py), a reserve that left no schedule is
# halved, so 8 re-solves narrow it to 1/256 of the first overshoot.
MAX_ARENA_RETRIES = 8
# The warm starts' heuristics stop at this share of the effort (quick ones first; see
# warm_start.QUICK_FIRST), and a re-solve's at this share of what is left: capuchin alone
# took 51 s on gpt2_large at seq 512, so a compile at --time-limit 20 ended after 83 s.
# The cover and the guided search need the rest. At 0.2 no cell of the constants sweep
# changed (docs/optimizer.md, "Constants").
WARM_START_SHARE = 0.4
# The guided search's share of the effort left; the full model gets the rest when the
# guided schedule is not yet within the gap limit of the cover bound. Swept (docs/
# optimizer.md, "Constants"): 0.6 and 0.9 are each cheaper on some cells and dearer on
# others (0.6: DAG 100 at 80 % 6.6 % dearer; 0.9: VGG16-CIFAR a72 50 % 2.0x 0.14 % dearer).
GUIDED_SHARE = 0.75
# The deep cover charges the paging time that outlasts its stage (solve/exposure.py) only
# where the guided schedule is this far above the cover bound. It raised the bound where
# that gap was wide (VGG16-CIFAR a72 30 %: 4.8 %, 24.80 -> 25.74 J; ResNet-18-CIFAR a72
# 30 %: 1.3 %, 44.188 -> 44.214 J), and only slowed the deep model where it was narrow
# (ResNet-18-CIFAR a72 50 % 1.5x: 0.6 %, the same 44.025 J, closed at 15.8 s instead of
# 5.7 s, and the cell ended dearer; BENCHMARKS.md, "Optimizer grid").
EXPOSURE_MIN_GAP = 0.01
# The full model after the guided stage of a large graph only with at least this much
# time left (after reserving what finalizing its schedule will take): on ResNet-18-CIFAR, CP-SAT
# spent 5 s loading the model whatever its limit, and overran the time limit by that.
MIN_FULL_SOLVE_S = 5.0
# Above this many nodes the stage model (n^2 variables: 8.4 GB on BERT-base's 578) is not
# built when the guided stage has a schedule: the guided sub-problem gives the schedule,
# the eviction cover the bound (the memory limit: --memory-limit).
FULL_MODEL_MAX_NODES = 400
# The full model is built only when its forecast memory with poetc's own is at most this
# share of --memory-limit: the forecast is fitted on 30 s solves and a solver's memory
# grows as it searches, and the limit stops the solver, losing the time it had. Where the
# forecast is largest the full model pays least: on MobileNetV2 (362 nodes, a72 50 %,
# forecast 3.9 GiB) it ran 43 s, measured 3.7 GiB and did not improve the guided schedule;
# without it, the same schedule in 40 s instead of 83 s and 0.96 GiB (BENCHMARKS.md,
# "Scale"). The ResNet-18 (1.7 GiB) and DAG 250 (2.3 GiB) models still run.
FULL_MODEL_MEMORY_SHARE = 0.75
# Above it the guided stage gets this share of the
# time left: nothing comes after it but finalizing (arena planning) its schedule.
LARGE_GUIDED_SHARE = 0.9
# ... of the time left after this reserve per node for finalizing its schedule (arena
# planning, simulation), which nothing else leaves it: measured 1.07 s on gpt2_large (1,567
# nodes), 1.04 s on DAG 1,000 and 0.73 s on DAG 500; without it a compile at
# --time-limit 20 finalized 1.1 s past the limit. The wall cap keeps the same reserve.
FINALIZE_S_PER_NODE = 1e-3
# The share of --time-limit by which the search ends before it: a CP-SAT call stopped by
# its wall limit returned 0.17-0.29 s past it beside two busy loops (ResNet-18-CIFAR at
# --time-limit 8, MobileNetV2 at 10), so that compiles ended 4-6 % past the limit.
WALL_MARGIN = 0.025
# The stage-long family's share of the time limit when both are searched.
# Measured (bench/semantics_bench.py, kws_dscnn a72 30 %): at 0.5 the stage-long family
# lost 15 % energy to the shorter search; the synchronous family mostly needs little time
# (it is warm-started from the first family's schedule).
STAGE_FAMILY_SHARE = 0.75


def solve_milp(
    problem: Problem,
    *,
    solver: str = "auto",
    formulation: str = "fast",
    time_limit_s: float = 60.0,
    threads: int = 2,
    progress: bool = False,
    warm_start: Schedule | None = None,
    gap_limit: float | None = None,
    stated_limit_s: float | None = None,
    effort: float | str | None = None,
) -> Result:
    """Solve ``problem`` to (proven) optimality, the gap limit or its effort (module docstring).

    ``effort``: the work every stage shares (:func:`effort_units`); None: EFFORT_PER_LIMIT_S
    per second of ``stated_limit_s`` (the user's --time-limit, else ``time_limit_s``).
    ``time_limit_s`` is only the wall cap;
    ``Result.extra.stopped_by`` says which of proof, gap, effort or time ended it.

    On a small DMA graph where time matters (``problem.transfers == "stage"``) two program
    families are searched: stage-long overlapped transfers (``STAGE_FAMILY_SHARE`` of the
    effort), then synchronous ones (docs/model.md, "What the optimizer searches"). The
    cheaper schedule wins, with the smaller of the two bounds.
    """
    stated = time_limit_s if stated_limit_s is None else stated_limit_s
    units = effort_units(effort, stated)
    # The search's wall cap leaves finalizing the schedule its time, by the same per-node
    # measure (MobileNetV2 at --time-limit 10 finalized 0.21 s past the cap), and a search's
    # stop half of the 5 % the limit allows (WALL_MARGIN).
    reserve_s = min(FINALIZE_S_PER_NODE * problem.n + WALL_MARGIN * stated, time_limit_s / 2)
    meter = work.Meter(wall_at=time.perf_counter() + time_limit_s - reserve_s)
    with work.metered(meter):
        clock = Clock(units)
        res = _solve_families(problem, clock, solver=solver, formulation=formulation, threads=threads,
                              progress=progress, warm_start=warm_start, gap_limit=gap_limit)
        fits = what_fits(problem, timed_out=meter.time_hit) if res.status == "timeout" and res.schedule is None \
            else None
        if fits is not None:
            res.message = f"{res.message}; {fits[0]}"
            res.extra.min_ram_lower_bytes = fits[1]
        res.extra.set(effort=round(units, 3), effort_used=round(meter.spent, 3),
                      stopped_by=stopped_by(res, meter, clock, effective_gap(problem, gap_limit)))
    return res


def _solve_families(problem: Problem, clock: Clock, *, solver: str, formulation: str, threads: int,
                    progress: bool, warm_start: Schedule | None, gap_limit: float | None) -> Result:
    """The program families of :func:`solve_milp`, within ``clock``."""
    kw = dict(solver=solver, formulation=formulation, threads=threads, progress=progress,
              gap_limit=gap_limit)
    if problem.synchronous or not problem.small:
        res = _solve_family(problem, clock=clock, warm_start=warm_start, **kw)  # type: ignore[arg-type]
        res.extra.transfers = problem.transfers
    else:
        with clock.capped(clock.started + clock.limit_s * STAGE_FAMILY_SHARE):
            stage = _solve_family(problem, clock=clock, warm_start=warm_start, **kw)  # type: ignore[arg-type]
        sync = _solve_family(dataclasses.replace(problem, transfers="sync"), clock=clock,
                             warm_start=stage.schedule if stage.ok else None, **kw)  # type: ignore[arg-type]
        res = union(stage, sync, clock.wall_started)
        keep_gap_claim_true(res, effective_gap(problem, gap_limit))
    res.solve_time_s = clock.elapsed()
    res.extra.stage_s = clock.report()
    res.extra.stage_effort = clock.effort_report()
    return res


def _solve_family(problem: Problem, *, clock: Clock, solver: str, formulation: str, threads: int, progress: bool,
                  warm_start: Schedule | None, gap_limit: float | None) -> Result:
    """:func:`solve_milp` within one program family (``problem.transfers``), by ``clock``'s
    deadline. The status is "optimal" only for a closed gap (:func:`effective_gap`).

    Fragmentation feedback: a schedule whose live bytes fit but whose arena does not, even
    re-planned and compacted (:func:`~.finalize.finalize`), is solved again with the budget
    lowered by the overshoot (and below that schedule's peak), up to ``MAX_ARENA_RETRIES``
    times while effort is left, from the previous schedule; a reserve that leaves no
    schedule is halved towards the last one that was too little. ``Result.extra`` records
    ``fragmentation_retries``, ``fragmentation_reserve_bytes`` and ``arena_rescue``.
    """
    if solver not in SOLVERS:
        raise SolverError(f"unknown solver {solver!r}; known: {', '.join(SOLVERS)}")
    if formulation not in FORMULATIONS:
        raise PoetError(f"unknown formulation {formulation!r}; known: {', '.join(FORMULATIONS)}")
    started = time.perf_counter()
    with clock.stage("quick_checks"):
        quick = quick_infeasibility(problem, time_limit_s=min(clock.left(), COVER_LIMIT_S), threads=threads)
    if quick is not None:
        res = _empty(problem, "infeasible", solver, formulation, started, quick.message)
        res.extra.merge(quick.extra)
        return res
    # Every schedule the heuristics know: the answer whenever the solver does not beat it.
    with clock.stage("warm_starts"):
        candidates = warm_start_candidates(problem, warm_start,
                                           until=clock.started + WARM_START_SHARE * clock.limit_s)
    arena_failures = 0               # schedules whose live bytes fit but whose arena did not
    first_arena = 0                  # the arena of the first of them
    reserve = 0                      # bytes held back from the budget for fragmentation
    too_little = 0                   # a reserve whose schedule's arena did not fit
    too_much: int | None = None      # a reserve that left no schedule at all
    previous: Schedule | None = warm_start if warm_start is not None else (candidates[0][2] if candidates else None)
    best: Result | None = None       # best schedule that finalize accepted
    last: Result | None = None       # the last attempt's result (for its message/status)
    full_bound: float | None = None  # the first attempt's bound: valid for the user's budget
    proven_infeasible: Result | None = None
    for attempt in range(MAX_ARENA_RETRIES + 1):
        if attempt and clock.left() < MIN_STAGE_S:
            break
        # A re-solve starts from the first attempt's warm starts that fit its budget and
        # the heuristics' plans at that budget, run again as in the first attempt.
        known = candidates
        if attempt:
            with clock.stage("warm_starts"):
                known = refit(candidates, dataclasses.replace(problem, ram_budget_bytes=problem.ram_budget_bytes
                                                              - reserve), previous, rerun=HEURISTICS,
                              until=work.now() + WARM_START_SHARE * clock.left())
        last = _solve_once(problem, reserve, solver=solver, formulation=formulation, clock=clock,
                           threads=threads, progress=progress, warm_start=previous if attempt == 0 else None,
                           gap_limit=gap_limit, started=started, candidates=known)
        last.extra.set(fragmentation_retries=attempt, fragmentation_reserve_bytes=reserve)
        if attempt == 0:
            full_bound = last.extra.backend_bound_j
            if last.status == "infeasible" and last.extra.proven_infeasible:
                proven_infeasible = last
                break
        if last.ok:
            if attempt:
                note = (f"arena: re-solved {attempt} time(s) with {reserve} B held back for fragmentation "
                        f"(the schedule at the full budget needed a {first_arena} B arena)")
                last.message = f"{last.message}; {note}" if last.message else note
            best = better(best, last)
            break
        if attempt and last.status == "infeasible" and last.schedule is None and reserve - too_little > 1:
            # The reserve left no schedule: one whose peak lies between may still have an
            # arena that fits (its layout need not fragment as much). Halve the interval.
            too_much = reserve
            reserve = (too_little + reserve) // 2
            continue
        if not (last.status == "infeasible" and last.message.startswith("arena") and last.arena_bytes
                and last.schedule is not None):
            break
        # Live bytes fit, the arena does not (even re-planned harder): hold back the
        # overshoot, and at least enough to exclude this schedule's peak, and solve again
        # (below a reserve known to leave no schedule).
        arena_failures += 1
        first_arena = first_arena or last.arena_bytes
        too_little = reserve
        reserve = max(reserve + max(1, last.arena_bytes - problem.activation_budget),
                      problem.activation_budget - (last.peak_ram_bytes or problem.activation_budget) + 1)
        if too_much is not None and reserve >= too_much:
            if too_much - too_little <= 1:
                break
            reserve = (too_little + too_much) // 2
        previous = last.schedule
        if problem.activation_budget - reserve < 1:
            break
    if proven_infeasible is not None:
        proven_infeasible.solve_time_s = time.perf_counter() - started
        return proven_infeasible
    if best is None or best.status != "optimal":
        # Only candidates that could beat the schedule in hand are worth finalizing (each
        # finalize plans an arena, which can take seconds on large graphs).
        cheaper = [c for c in candidates if best is None or best.energy_j is None or c[0] < best.energy_j]
        with clock.stage("finalize"):
            fb = fallback_result(problem, cheaper, solver=solver, formulation=formulation, started=started,
                                 clock=clock, needed=best is None,
                                 finalize_s=(last.extra.guided_finalize_s or 0.0) if last is not None else 0.0)
        if fb is not None and (best is None or fb.energy_j < best.energy_j):  # type: ignore[operator]
            why = last.message if last is not None and last.message else "no better schedule found"
            fb.message = f"best heuristic schedule ({fb.extra.fallback_schedule}); solver: {why}"
            if last is not None:
                fb.extra.merge(last.extra, overwrite=False)
            best = fb
    if best is None:
        assert last is not None
        res = last
        if not res.ok and res.status == "infeasible" and not res.extra.proven_infeasible:
            # Not proven: an arena that never fit, or a reduced budget the solver could
            # not meet in time. That is "no schedule in time", not infeasibility — and the
            # figures of a schedule that does not fit are not reported.
            why = f"timeout: no schedule whose arena fits was found within {_effort_text(clock)} ({res.message})"
            extra = res.extra
            res = _empty(problem, "timeout", solver, formulation, started, why)
            res.extra.merge(extra)
        if arena_failures:
            res.extra.arena_rescue = {"resolved": 0, "lost": arena_failures}
        res.solve_time_s = time.perf_counter() - started
        return res
    apply_bound(best, full_bound)
    keep_gap_claim_true(best, effective_gap(problem, gap_limit))
    best.solve_time_s = time.perf_counter() - started
    if best.arena_bytes is not None and best.peak_ram_bytes:
        best.extra.fragmentation_overhead_bytes = best.arena_bytes - best.peak_ram_bytes
    count_rescues(best, arena_failures)
    return best


def _infeasible(problem: Problem, reserve: int, *, solver: str, formulation: str, started: float,
                clock: Clock, threads: int, extra: ResultExtra, proof: str) -> Result:
    """Infeasible at the budget minus ``reserve``: an arena problem when the reserve made it
    so, otherwise proven infeasible, with the smallest RAM / deadline that would work."""
    if reserve:
        # Only the fragmentation reserve made it infeasible: report the arena problem.
        res = _empty(problem, "infeasible", solver, formulation, started,
                     f"arena: no schedule leaves room for the {reserve} bytes of fragmentation "
                     f"the arena planner needs within the activation budget {problem.activation_budget}")
        res.extra.merge(extra)
        return res
    with clock.stage("infeasibility"):
        why = explain_infeasible(problem, time_limit_s=max(clock.left(), LAST_STEP_MIN_S),
                                 threads=threads)
    res = _empty(problem, "infeasible", solver, formulation, started, why.message)
    res.extra.merge(extra)
    res.extra.merge(why.extra, proven_infeasible=True, infeasible_proof=proof)
    return res


def _guided_stage(problem: Problem, tight: Problem, cover: CoverBound, hint: Schedule | None, hint_source: str,
                  *, solver: str,
                  formulation: str, gap: float, threads: int, progress: bool, started: float,
                  clock: Clock, extra: ResultExtra) -> tuple[GuidedOutcome, Result | None, bool, CoverBound]:
    """The cover-guided search at ``tight``'s budget: ``(outcome, result, done, cover)``.
    ``done``: ``result`` is final (within ``gap`` of the bound); otherwise ``result``, when
    not None, is the guided schedule finalized with an arena that fits, kept in case the
    full model's does not fit its own. ``cover``: with its bound raised by
    :func:`deeper_cover` where the guided schedule is not within ``gap`` of it."""
    large = problem.n > FULL_MODEL_MAX_NODES
    share = LARGE_GUIDED_SHARE if large else GUIDED_SHARE
    reserve_s = FINALIZE_S_PER_NODE * problem.n if large else 0.0
    with clock.stage("guided"):
        guided = guided_search(tight, cover, hint, solver=solver, threads=threads, relative_gap=gap,
                               time_limit_s=share * clock.left(reserve_s), progress=progress, clock=clock,
                               warm_source=hint_source,
                               # Wider sub-problems where no full model follows (BERT-base a72
                               # 70 %: 109.856 J, 109.898 J without), and with paging. In
                               # recompute-only mode the full model uses the time better (on
                               # DAG 250 at 80 % the widenings took it: 690.52 J against 659.89 J).
                               widen=large or problem.allows_paging)
    extra.set(guided_source=guided.source, guided_solve_s=round(guided.solve_s, 3))
    if guided.energy_j is None or cover.energy_j is None:
        return guided, None, False, cover
    assert guided.schedule is not None  # it has an energy
    if not within_gap(guided.energy_j, cover.energy_j, gap):
        # Chains of dead inputs raise the bound (ResNet-18-CIFAR a72 70 % 1.5x: 43.828 ->
        # 43.867 J, under the guided 43.887 J, in 3 s, where the full model moved neither
        # in 279 s). Only now: their restores guide the schedules worse (DEAD_DEPTH).
        with clock.stage("cover"):
            deeper = deeper_cover(tight, cover, time_limit_s=cover_limit(clock.left()), workers=threads,
                                  exposure=not within_gap(guided.energy_j, cover.energy_j, EXPOSURE_MIN_GAP))
        if deeper is not cover:
            extra.set(cover_bound_j=deeper.energy_j, cover_one_level_j=cover.energy_j)
            cover = deeper
    assert cover.energy_j is not None  # deeper_cover only raises a bound
    if not within_gap(guided.energy_j, cover.energy_j, gap):
        # Not proven yet: the full model comes next. Keep this schedule (finalized, so its
        # arena is known) in case the full model's does not fit its arena.
        t_fin = work.now()
        with clock.stage("finalize"):
            res = finalize(problem, guided.schedule, strategy=STRATEGY, status="feasible", solver=solver,
                           formulation=formulation, lower_bound_j=cover.energy_j,
                           solve_time_s=time.perf_counter() - started, arena_time_s=clock.left(),
                           fence_last=True)
        extra.guided_finalize_s = round(work.now() - t_fin, 3)
        if res.ok and not _fenced(res):
            res.extra.merge(extra, solver_used=guided.source)
            return guided, res, False, cover
        kept = _arena_fit_fallback(problem, tight, cover, solver, formulation, started, extra, clock)
        return guided, _cheaper_of_fenced(res, kept, extra, guided.source), False, cover
    message = "" if within_gap(guided.energy_j, cover.energy_j, BOUND_NOISE) else \
        f"stopped within the relative gap limit {gap:g} of the {_bound_name(cover, extra)} bound"
    with clock.stage("finalize"):
        res = finalize(problem, guided.schedule, strategy=STRATEGY, status="feasible", solver=solver,
                       formulation=formulation, lower_bound_j=cover.energy_j,
                       solve_time_s=time.perf_counter() - started, message=message, arena_time_s=clock.left())
    extra.set(backend_bound_j=cover.energy_j, warm_start_found=True, solver_used=guided.source)
    if res.ok and res.energy_j is not None and not within_gap(res.energy_j, cover.energy_j, gap):
        # Finalizing added energy (the arena's copies): no longer within the gap, so the
        # full model may still improve it; this one is kept meanwhile.
        res.message = ""
        res.extra.merge(extra)
        return guided, res, False, cover
    res.extra.merge(extra)
    if tight.ram_budget_bytes != problem.ram_budget_bytes and res.status == "optimal":
        res.status = "feasible"     # the bound holds for the reduced budget only
    if not res.ok:
        # Within the gap, but its arena does not fit: keep a cover schedule whose arena
        # does as the fallback, and let the full model try (no fragmentation re-solve yet).
        fallback = _arena_fit_fallback(problem, tight, cover, solver, formulation, started, extra, clock)
        if fallback is not None:
            return guided, fallback, False, cover
    return guided, res, True, cover


def _fenced(res: Result) -> bool:
    """Whether finalize's last resort (FENCEs, then MOVEs) fitted ``res``'s arena."""
    return res.program is not None and bool(res.program.meta.get("added_fences"))


def _fences_cost_more(fenced: Result, other: Result | None) -> bool:
    """Whether ``other``, whose arena fits without the last resort, costs no more than ``fenced``."""
    return other is not None and other.ok and (other.energy_j or 0.0) <= (fenced.energy_j or 0.0)


def _cheaper_of_fenced(fenced: Result, kept: Result | None, extra: ResultExtra, source: str) -> Result | None:
    """The cheaper of the guided schedule with FENCEs and ``kept`` (the arena-fit fallback):
    the waits and copies can cost more than a fallback that needs none (ResNet-18-CIFAR a72
    50 % 2.0x: 1.2 %), or keep a schedule far below it (a72 30 % 2.0x: 46.64 J with 3
    copies against the best heuristic's 54.00 J)."""
    if not fenced.ok or _fences_cost_more(fenced, kept):
        return kept
    fenced.extra.merge(extra, solver_used=source)
    return fenced


def _bound_name(cover: CoverBound, extra: ResultExtra) -> str:
    """Which bound ``cover.energy_j`` is: the eviction cover's, or the presence model's
    that replaced it (:func:`.presence_stage.presence_stage`)."""
    presence = (extra.presence or {}).get("bound_j")
    return "presence" if presence is not None and presence == cover.energy_j else "eviction-cover"


def _arena_fit_fallback(problem: Problem, tight: Problem, cover: CoverBound, solver: str, formulation: str,
                        started: float, extra: ResultExtra, clock: Clock) -> Result | None:
    """The cover's arena-fit schedule (paging-heavy schedules and arbitrary sizes
    fragment), finalized, when its static arena fits; else None."""
    if clock.expired():
        return None
    with clock.stage("arena_rescue"):
        schedule = cover_schedule(tight, cover, arena_fit=True, until=clock.at)
        if schedule is None:
            return None
        res = finalize(problem, schedule, strategy=STRATEGY, status="feasible", solver=solver,
                       formulation=formulation, lower_bound_j=cover.energy_j,
                       solve_time_s=time.perf_counter() - started, arena_time_s=clock.left())
    if not res.ok:
        return None
    res.extra.merge(extra, solver_used="cover (arena fit)")
    return res


def _solve_once(problem: Problem, reserve: int, *, solver: str, formulation: str, clock: Clock,
                threads: int, progress: bool, warm_start: Schedule | None, gap_limit: float | None,
                started: float, candidates: list[tuple[float, str, Schedule]]) -> Result:
    """Steps 3-4 of the module docstring at the activation budget minus ``reserve``: the
    cover bound (fast formulation; it may prove infeasibility), the presence model, the
    guided search, and the full model unless the guided schedule is within the gap.
    ``extra.backend_bound_j`` is a valid bound at this budget, even without a schedule."""
    if work.wall_expired():
        # Nothing after the heuristics once the wall cap has passed (the cover's build alone
        # took 0.9 s on gpt2_large): the best heuristic's schedule is the answer.
        return _empty(problem, "timeout", solver, formulation, started, "the time limit passed before the bounds")
    tight = dataclasses.replace(problem, ram_budget_bytes=problem.ram_budget_bytes - reserve)
    # The eviction-cover bound (fast formulation): a valid bound at this budget in a
    # fraction of a second, a proof of infeasibility, and the guide for the first schedules.
    cover = None
    if formulation == "fast":
        with clock.stage("cover"):
            cover = cover_bound(tight, time_limit_s=cover_limit(clock.left()), workers=threads)
    # The heuristics' best (the user's warm start among them; a re-solve's: those that fit).
    hint = candidates[0][2] if candidates else warm_start
    large = not problem.small
    gap = effective_gap(problem, gap_limit)
    extra = ResultExtra(gap_limit=gap)
    guided: GuidedOutcome | None = None
    guided_res: Result | None = None
    if cover is not None:
        extra.set(cover_bound_j=cover.energy_j, cover_restores=len(cover.restores))
        if cover.infeasible:
            return _infeasible(problem, reserve, solver=solver, formulation=formulation, started=started,
                               clock=clock, threads=threads, extra=extra, proof="the eviction-cover bound")
        # From here on the cover's bound is the better of it and the presence bound, and
        # the presence model's schedule, when it is feasible and cheaper, is the hint.
        cover, hint, hint_source = presence_stage(tight, cover, hint, extra, clock=clock, gap=gap)
        guided, guided_res, done, cover = _guided_stage(problem, tight, cover, hint, hint_source,
                                                        solver=solver, formulation=formulation,
                                                        gap=max(gap, BOUND_NOISE), threads=threads,
                                                        progress=progress, started=started, clock=clock, extra=extra)
        if done:
            return guided_res  # type: ignore[return-value]
        hint = guided.schedule if guided.schedule is not None else hint
    # Finalizing the full model's schedule (arena planning) comes after its limit: leave
    # it the work the guided schedule's finalize took.
    finalize_s = extra.guided_finalize_s or 0.0
    full_limit = clock.solver_limit(clock.left(), reserve_s=finalize_s)
    too_late = (large and clock.left(extra.guided_finalize_s or 0.0) < MIN_FULL_SOLVE_S) or full_limit < MIN_STAGE_S
    too_big = cover is not None and problem.n > FULL_MODEL_MAX_NODES
    # With a schedule in hand, a full model the memory limit would stop is not built.
    over_memory = None if too_big or too_late or guided_res is None else _over_memory(problem)
    if cover is not None and guided_res is not None and (too_big or too_late or over_memory):
        # No full model: above FULL_MODEL_MAX_NODES, or forecast over its share of the
        # memory limit, or too little time left for it to find anything (building and
        # loading it alone takes seconds on 100+ node graphs): keep the guided stage's
        # schedule, with the cover's bound.
        extra.set(backend_bound_j=cover.energy_j, full_model_skipped=True)
        guided_res.extra.merge(extra)
        if too_big:
            why = f"the full model is not built above {FULL_MODEL_MAX_NODES} nodes (its size grows with n^2); " \
                  "bound: the eviction cover"
        elif over_memory:
            why = f"{over_memory}; bound: the eviction cover"
        else:
            why = f"{_stopped_text(clock)} before the full model"
        guided_res.message = f"the {guided_res.extra.solver_used} schedule; {why}"
        return guided_res
    if too_big or full_limit < MIN_STAGE_S:
        # No full model: above FULL_MODEL_MAX_NODES (10.8 GB for a 500-node DAG, which
        # found nothing in 120 s), or no time for it (the guided stage found nothing to keep).
        why = f"the full model is not built above {FULL_MODEL_MAX_NODES} nodes" if too_big else \
            "no time left for the full model"
        res = _empty(problem, "timeout", solver, formulation, started,
                     f"timeout: no schedule within {_effort_text(clock)} ({why})")
        res.extra.merge(extra, backend_bound_j=cover.energy_j if cover is not None else None)
        return res
    with clock.stage("full_model"):
        return _full_model(problem, tight, reserve, cover, guided, guided_res, hint, extra, solver=solver,
                           formulation=formulation, clock=clock, finalize_s=finalize_s,
                           threads=threads,
                           progress=progress, gap=gap, started=started)


def _over_memory(problem: Problem) -> str | None:
    """Why the full model is not built under the memory limit in force, or None: its
    forecast (:func:`~poet_compiler.solve.row_generation.forecast_bytes`) and poetc's own
    resident bytes exceed FULL_MODEL_MEMORY_SHARE of the limit."""
    # The forecast alone (not poetc's measured resident bytes): the decision must not
    # depend on a measurement.
    limit = current_limit()
    if limit is None:
        return None
    need = forecast_bytes(problem) + BASE_RSS_BYTES
    if need <= FULL_MODEL_MEMORY_SHARE * limit:
        return None
    return (f"the full model is not built: its forecast memory ({format_bytes(need)} with poetc's) is over "
            f"{FULL_MODEL_MEMORY_SHARE:.0%} of the memory limit ({format_bytes(limit)}; --memory-limit)")


def _full_model(problem: Problem, tight: Problem, reserve: int, cover: CoverBound | None,
                guided: GuidedOutcome | None, guided_res: Result | None, hint: Schedule | None,
                extra: ResultExtra, *, solver: str, formulation: str, clock: Clock, finalize_s: float,
                threads: int, progress: bool, gap: float, started: float) -> Result:
    """The full model from ``hint`` with the cover bound as its floor, then its schedule
    finalized (or the guided stage's kept; see :func:`_solve_once`)."""
    if hint is not None and formulation == "fast":
        hint = canonical(problem, hint)
    floor = cover.energy_j if cover is not None else None
    if formulation == "fast":
        rounds = solve_by_rows(problem, hint, budget=tight.activation_budget, floor=floor, solver=solver,
                               clock=clock, finalize_s=finalize_s, threads=threads, progress=progress, gap=gap)
        built, out = rounds.built, rounds.out
        extra.set_model_stats(built.model.stats())
        extra.set(model_build_s=round(rounds.build_s, 3), row_generation=rounds.summary())
    else:
        built, out = _solve_full(problem, tight, hint, floor, extra, solver=solver, formulation=formulation,
                                 clock=clock, finalize_s=finalize_s, threads=threads, progress=progress, gap=gap)
    extra.set_model_stats(out.stats)
    # The better of the solver's bound and the cover's: a solver that found nothing may
    # report none, or its own bound without the floor (ResNet-18-CIFAR a72 30 % 1.5x: the
    # portfolio's timeout reported CP-SAT's 43.61 J under the cover's 44.19 J).
    bound = max((b for b in (out.bound, floor) if b is not None), default=None)
    extra.set(backend_solve_s=round(out.solve_time_s, 3), warm_start_found=hint is not None,
              backend_bound_j=bound, solver_used=out.solver)
    if out.status == "infeasible":
        return _infeasible(problem, reserve, solver=solver, formulation=formulation, started=started,
                           clock=clock, threads=threads, extra=extra, proof="the solver")
    schedule = built.schedule(out.values) if out.values is not None else None
    if guided is not None and guided.energy_j is not None and \
            (schedule is None or (feasible_energy(tight, schedule) or float("inf")) > guided.energy_j):
        # The solver's schedule is no better than the guided one it started from: keep that.
        source = f"{guided.source} (the {out.solver} solve did not improve it)"
        if guided_res is not None and guided_res.extra.solver_used == guided.source:
            # Already finalized (arena planned) in the guided stage: not again.
            guided_res.extra.merge(extra, solver_used=source)
            guided_res.lower_bound_j = bound
            guided_res.message = _stopped_text(clock)
            return guided_res
        schedule = guided.schedule
        extra.solver_used = source
        out = dataclasses.replace(out, status="feasible")
    if schedule is None:
        res = _empty(problem, "timeout", solver, formulation, started,
                     f"timeout: {out.solver} found no schedule within {_effort_text(clock)}"
                     + (f" ({out.message})" if out.message else ""))
        res.extra.merge(extra)
        return res
    if out.status == "optimal":
        message = ""
    elif gap and out.objective is not None and out.bound is not None and \
            out.objective - out.bound <= gap * abs(out.objective) + 1e-12:
        message = f"stopped within the relative gap limit {gap:g}"
    else:
        message = _stopped_text(clock)
    with clock.stage("finalize"):
        res = finalize(problem, schedule, strategy=STRATEGY, status=out.status, solver=solver,
                       formulation=formulation, lower_bound_j=bound, solve_time_s=time.perf_counter() - started,
                       message=message, arena_time_s=clock.left(), fence_last=True)
    if res.ok and _fenced(res) and _fences_cost_more(res, guided_res):
        # Its arena fitted only with waits for the channel (the last resort), which cost
        # more than the schedule kept from the guided stage: keep that one.
        assert res.program is not None  # it has fences
        res = dataclasses.replace(res, status="infeasible", message=f"arena: it fitted only with "
                                  f"{res.program.meta['added_fences']} added FENCE(s), at {res.energy_j:.6g} J")
    if res.lower_bound_j is not None and res.energy_j is not None and res.lower_bound_j > res.energy_j:
        # The bound of a proven optimum can exceed the simulated energy by float noise only.
        res.lower_bound_j = res.energy_j
        res.gap = 0.0
    if reserve and res.lower_bound_j is not None:
        # This bound holds for the reduced budget only; solve_milp replaces it by the
        # first attempt's (full budget), which bounds every schedule the user could get.
        res.extra.lower_bound_reduced_budget_j = res.lower_bound_j
        if res.status == "optimal":
            res.status = "feasible"
    res.extra.merge(extra, solver_objective=out.objective)
    if not res.ok and guided_res is not None:
        # The full model's schedule does not fit its arena; the one kept from the guided
        # stage does (its solver_used says which: the guided search or the arena-fit cover).
        kept = guided_res.extra.solver_used
        guided_res.message = f"the {kept} schedule (the solver's did not fit: {res.message})"
        guided_res.extra.merge(extra, solver_used=kept)
        if "arena" in res.message and res.peak_ram_bytes is not None and \
                res.peak_ram_bytes <= problem.activation_budget:
            guided_res.extra.arena_rescue = {"resolved": 0, "lost": 1}
        guided_res.lower_bound_j = bound if bound is not None else guided_res.lower_bound_j
        return guided_res
    return res


def _solve_full(problem: Problem, tight: Problem, hint: Schedule | None, floor: float | None, extra: ResultExtra,
                *, solver: str, formulation: str, clock: Clock, finalize_s: float, threads: int, progress: bool,
                gap: float) -> tuple[Built, BackendResult]:
    """The whole model in one solve (the dense formulation; the fast one goes by rounds,
    :mod:`.row_generation`)."""
    t_build = work.now()
    built = build(problem, formulation, budget=tight.activation_budget)
    extra.set_model_stats(built.model.stats())
    extra.model_build_s = round(work.now() - t_build, 3)
    if hint is not None:
        built.hint_from(hint)
    built.model.objective_floor = floor
    out = solve_built(built, work.now() - t_build, solver=solver, clock=clock, reserve_s=finalize_s,
                      threads=threads, progress=progress, gap=gap)
    if out is None:
        out = BackendResult("timeout", None, None, None, 0.0, solver,
                            f"no time left to solve after building the model ({extra.model_build_s} s)")
    return built, out
