"""The guided stage of the improvement (docs/optimizer.md, "Improvement"): the cover's
realizations and the guided sub-problem (:mod:`...guided`), then the deep cover where the
schedule is not yet within the gap; its schedule finalized, kept in case the full model's
arena does not fit (:class:`Guided`, what the full model, :mod:`.full_model`, starts from).
"""

from __future__ import annotations

from dataclasses import dataclass

from poet_compiler import work
from poet_compiler.solve.cover import CoverBound, deeper_cover
from poet_compiler.solve.finalize import Fenced
from poet_compiler.solve.guided import GuidedOutcome
from poet_compiler.solve.pipeline.answer import BOUND_NOISE, Answer, finalized, gap_claim
from poet_compiler.solve.pipeline.bounds import Bounds
from poet_compiler.solve.pipeline.context import Context
from poet_compiler.solve.problem import Problem
from poet_compiler.solve.result import Notes
from poet_compiler.solvers.base import within_gap

ARENA_FIT = "cover (arena fit)"


@dataclass(frozen=True)
class Guided:
    """What the guided stage ends with: its search's outcome; ``kept``, the schedule
    finalized with an arena that fits (the guided one, or the cover's arena-fit one:
    ``kept_is_guided``), final when ``done`` (within the gap of the bound); the cover,
    its bound raised by the deep cover; and the report fields so far."""

    outcome: GuidedOutcome
    kept: Answer | None
    done: bool
    kept_is_guided: bool
    cover: CoverBound
    notes: Notes
    finalize_s: float = 0.0    # what finalizing the guided schedule took (work, rounded as reported)


def guided_stage(ctx: Context, tight: Problem, found: Bounds) -> Guided:
    """The cover-guided search at ``tight``'s budget (module docstring)."""
    problem, tuning = ctx.problem, ctx.tuning
    cover, notes = found.cover, found.notes
    assert cover is not None
    gap = max(ctx.gap, BOUND_NOISE)
    large = problem.n > tuning.full_model_max_nodes
    share = tuning.large_guided_share if large else tuning.guided_share
    reserve_s = tuning.finalize_s_per_node * problem.n if large else 0.0
    with ctx.stage("guided"):
        # Wider sub-problems where no full model follows (BERT-base a72 70 %: 109.856 J,
        # 109.898 J without), and with paging. In recompute-only mode the full model uses
        # the time better (on DAG 250 at 80 % the widenings took it: 690.52 J against 659.89 J).
        guided = ctx.steps.guided_search(ctx, tight, cover, found.hint, time_limit_s=share * ctx.left(reserve_s),
                                         relative_gap=gap, warm_source=found.hint_source,
                                         widen=(large or problem.allows_paging) and tuning.widen)
    notes = notes.set(guided_source=guided.source, guided_solve_s=round(guided.solve_s, 3))
    if guided.energy_j is None or cover.energy_j is None:
        return Guided(guided, None, False, False, cover, notes)
    assert guided.schedule is not None  # it has an energy
    if not within_gap(guided.energy_j, cover.energy_j, gap) and tuning.deep_cover:
        # Chains of dead inputs raise the bound (ResNet-18-CIFAR a72 70 % 1.5x: 43.828 ->
        # 43.867 J, under the guided 43.887 J, in 3 s, where the full model moved neither
        # in 279 s). Only now: their restores guide the schedules worse (dead_depth).
        with ctx.stage("cover"):
            deeper = deeper_cover(tight, cover, time_limit_s=tuning.cover_limit(ctx.left()),
                                  workers=ctx.options.threads, tuning=tuning,
                                  exposure=not within_gap(guided.energy_j, cover.energy_j, tuning.exposure_min_gap))
        if deeper is not cover:
            notes = notes.set(cover_bound_j=deeper.energy_j, cover_one_level_j=cover.energy_j)
            cover = deeper
    assert cover.energy_j is not None  # deeper_cover only raises a bound
    if not within_gap(guided.energy_j, cover.energy_j, gap):
        # Not proven yet: the full model comes next. Keep this schedule (finalized, so its
        # arena is known) in case the full model's does not fit its arena.
        t_fin = work.now()
        with ctx.stage("finalize"):
            done = ctx.finalize(guided.schedule, arena_time_s=ctx.left(), fence_last=True)
        res = finalized(done, lower_bound_j=cover.energy_j)
        took = round(work.now() - t_fin, 3)
        notes = notes.set(guided_finalize_s=took)
        if res.ok and not isinstance(done.verdict, Fenced):
            return Guided(guided, res.noted(notes, solver_used=guided.source), False, True, cover, notes, took)
        kept = cheaper_of_fenced(res, _arena_fit_fallback(ctx, tight, cover, notes))
        if kept is res:
            return Guided(guided, res.noted(notes, solver_used=guided.source), False, True, cover, notes, took)
        return Guided(guided, kept, False, False, cover, notes, took)
    message = () if within_gap(guided.energy_j, cover.energy_j, BOUND_NOISE) else \
        gap_claim(gap, f"the {_bound_name(cover, notes)} bound")
    with ctx.stage("finalize"):
        done = ctx.finalize(guided.schedule, arena_time_s=ctx.left())
    res = finalized(done, lower_bound_j=cover.energy_j, message=message)
    notes = notes.set(backend_bound_j=cover.energy_j, warm_start_found=True, solver_used=guided.source)
    if res.ok and res.energy_j is not None and not within_gap(res.energy_j, cover.energy_j, gap):
        # Finalizing added energy (the arena's copies): no longer within the gap, so the
        # full model may still improve it; this one is kept meanwhile.
        return Guided(guided, res.saying(()).noted(notes), False, True, cover, notes)
    res = res.noted(notes)
    if not res.ok:
        # Within the gap, but its arena does not fit: keep a cover schedule whose arena
        # does as the fallback, and let the full model try (no fragmentation re-solve yet).
        fallback = _arena_fit_fallback(ctx, tight, cover, notes)
        if fallback is not None:
            return Guided(guided, fallback, False, False, cover, notes)
    return Guided(guided, res, True, True, cover, notes)


def cheaper_of_fenced(fenced: Answer, kept: Answer | None) -> Answer | None:
    """The cheaper of the guided schedule with FENCEs (``fenced``, when it fits at all) and
    ``kept`` (the arena-fit fallback): the waits and copies can cost more than a fallback
    that needs none (ResNet-18-CIFAR a72 50 % 2.0x: 1.2 %), or keep a schedule far below it
    (a72 30 % 2.0x: 46.64 J with 3 copies against the best heuristic's 54.00 J)."""
    return kept if not fenced.ok or _fences_cost_more(fenced, kept) else fenced


def _fences_cost_more(fenced: Answer, other: Answer | None) -> bool:
    """Whether ``other``, whose arena fits without the last resort, costs no more than ``fenced``."""
    return other is not None and other.ok and (other.energy_j or 0.0) <= (fenced.energy_j or 0.0)


def _bound_name(cover: CoverBound, notes: Notes) -> str:
    """Which bound ``cover.energy_j`` is: the eviction cover's, or the presence model's
    that replaced it (:mod:`.bounds`)."""
    presence = (notes.get("presence") or {}).get("bound_j")
    return "presence" if presence is not None and presence == cover.energy_j else "eviction-cover"


def _arena_fit_fallback(ctx: Context, tight: Problem, cover: CoverBound, notes: Notes) -> Answer | None:
    """The cover's arena-fit schedule (paging-heavy schedules and arbitrary sizes
    fragment), finalized, when its static arena fits; else None."""
    clock = ctx.clock
    if clock.expired():
        return None
    with ctx.stage("arena_rescue"):
        schedule = ctx.steps.realize_cover(tight, cover, time_limit_s=ctx.tuning.cover_limit_s, arena_fit=True,
                                           until=clock.at, solve_cover=ctx.steps.cover_bound,
                                           finalize=ctx.steps.finalize)
        if schedule is None:
            return None
        done = ctx.finalize(schedule, arena_time_s=ctx.left())
    if not done.ok:
        return None
    return finalized(done, lower_bound_j=cover.energy_j).noted(notes, solver_used=ARENA_FIT)

