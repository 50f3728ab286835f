"""Bounds: the eviction cover (:mod:`..cover`: a lower bound, a proof of infeasibility and
the guide of the first schedules), then the presence model (:mod:`..presence`), which
raises the bound where the cover leaves a recompute's inputs uncounted
(docs/optimizer.md, "Bounds")."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.baselines._common import to_program
from poet_compiler.solve.cover import CoverBound
from poet_compiler.solve.pipeline.context import Context
from poet_compiler.solve.presence import pairs as presence_pairs
from poet_compiler.solve.presence import presence_bound
from poet_compiler.solve.problem import Problem, feasible_energy
from poet_compiler.solve.result import Notes
from poet_compiler.solvers.base import within_gap


@dataclass(frozen=True)
class Bounds:
    """The cover (None: the dense formulation, which has none), with the better of its
    bound and the presence bound and the presence model's restores; the hint the
    improvement starts from and its source ("warm start" or "presence"); the report
    fields so far."""

    cover: CoverBound | None
    hint: Schedule | None
    hint_source: str
    notes: Notes

    @property
    def infeasible(self) -> bool:
        """The cover proved that no schedule fits this budget."""
        return self.cover is not None and self.cover.infeasible

    @property
    def bound_j(self) -> float | None:
        return None if self.cover is None else self.cover.energy_j


def bounds(ctx: Context, tight: Problem, hint: Schedule | None) -> Bounds:
    """The cover bound at ``tight``'s budget (fast formulation), then the presence bound
    unless ``hint`` (the incumbents' best) is within the gap of it already."""
    notes = Notes({"gap_limit": ctx.gap})
    if ctx.options.formulation != "fast":
        return Bounds(None, hint, "warm start", notes)
    with ctx.stage("cover"):
        cover = ctx.steps.cover_bound(tight, time_limit_s=ctx.tuning.cover_limit(ctx.left()),
                                      workers=ctx.options.threads, tuning=ctx.tuning)
    notes = notes.set(cover_bound_j=cover.energy_j, cover_restores=len(cover.restores))
    if cover.infeasible:
        return Bounds(cover, hint, "warm start", notes)
    return _presence(ctx, tight, Bounds(cover, hint, "warm start", notes))


def _presence(ctx: Context, tight: Problem, cover_only: Bounds) -> Bounds:
    """The presence bound when the hint is not within the gap of the cover bound and the
    model is small enough: the cover with the better bound and the presence model's
    restores (``CoverBound.staged``), and the presence solution's schedule as the hint
    when it is feasible and cheaper. Before the guided stage, so that it stops at the
    better bound: on the README demo the cover leaves 61 % of the restores' energy open
    (0.006061 J, the optimum 0.008284 J, the computes alone 0.004669 J); this proves the
    optimum, in 1.3 deterministic s."""
    cover, hint, notes = cover_only.cover, cover_only.hint, cover_only.notes
    assert cover is not None
    upper = feasible_energy(tight, hint)
    if cover.energy_j is None or (upper is not None and within_gap(upper, cover.energy_j, ctx.gap)):
        return cover_only
    max_pairs = ctx.tuning.presence_max_pairs
    if not tight.synchronous or (size := presence_pairs(tight)) > max_pairs:
        # Stage-long transfers: the model's schedules are synchronous, and its time cost the
        # guided stage its schedules (ResNet-18 a72 30 % 2.0x: 45.66 -> 51.72 J).
        why = f"{size} (tensor, point) pairs > {max_pairs}" if tight.synchronous else "stage-long transfers"
        return dataclasses.replace(cover_only, notes=notes.set(presence={"skipped": why}))
    limit = ctx.clock.solver_limit(ctx.tuning.presence_share * ctx.left())
    if limit < ctx.tuning.min_stage_s:
        return cover_only
    with ctx.stage("presence"):   # to its optimum (no gap): where tight, that is the proof
        found = presence_bound(tight, time_limit_s=limit, hint=None if hint is None else to_program(tight, hint))
    notes = notes.set(presence=found.summary(), presence_solve_s=round(found.solve_s, 3))
    source = "warm start"
    energy = feasible_energy(tight, found.schedule)
    if energy is not None and (upper is None or energy < upper):
        hint, source = found.schedule, "presence"
    if found.energy_j is not None and found.energy_j > cover.energy_j:
        cover = dataclasses.replace(cover, energy_j=found.energy_j)
    return Bounds(dataclasses.replace(cover, staged=found.choice), hint, source, notes)
