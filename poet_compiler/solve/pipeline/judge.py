"""The family's answer after the attempts: the proof of infeasibility, the schedule whose
arena fits judged against the full-budget bound, or a heuristic's schedule when nothing
the search found beats it (:func:`~.incumbents.fallback`), else a timeout."""

from __future__ import annotations

import dataclasses

from poet_compiler.solve.pipeline.answer import (
    Answer,
    count_rescues,
    keep_gap_claim_true,
    says,
    with_bound,
    wrap,
)
from poet_compiler.solve.pipeline.arena import Tries
from poet_compiler.solve.pipeline.context import Context
from poet_compiler.solve.pipeline.incumbents import Incumbents, fallback


def judge(ctx: Context, first: Incumbents, tries: Tries) -> Answer:
    """The family's answer (module docstring). ``optimal`` only for a closed gap."""
    if tries.proven is not None:
        return tries.proven
    best, last = tries.best, tries.last
    if best is None or best.status != "optimal":
        # Only candidates that could beat the schedule in hand are worth finalizing (each
        # finalize plans an arena, which can take seconds on large graphs).
        cheaper = tuple(c for c in first.candidates
                        if best is None or best.energy_j is None or c.energy_j < best.energy_j)
        with ctx.stage("finalize"):
            fb = fallback(ctx, cheaper, needed=best is None, finalize_s=last.finalize_s)
        if fb is not None and (best is None or fb.energy_j < best.energy_j):  # type: ignore[operator]
            why = last.message or says("no better schedule found")
            fb = fb.saying(wrap(f"best heuristic schedule ({fb.notes['fallback_schedule']}); solver: ", why))
            # The fallback's own fields, then the search's it has not.
            best = dataclasses.replace(fb, notes=fb.notes.merge(last.notes, overwrite=False), retries=last.retries)
    if best is None:
        res = last
        if not res.ok and res.status == "infeasible" and not res.proven:
            # Not proven: an arena that never fit, or a reduced budget the solver could
            # not meet in time. That is "no schedule in time", not infeasibility — and the
            # figures of a schedule that does not fit are not reported.
            why = wrap(f"timeout: no schedule whose arena fits was found within {ctx.effort_text()} (", res.message,
                       ")")
            res = Answer("timeout", why, notes=res.notes)
        if tries.arena_failures:
            res = res.noted(arena_rescue={"resolved": 0, "lost": tries.arena_failures})
        return res
    best = keep_gap_claim_true(with_bound(best, tries.full_bound), ctx.gap)
    if best.arena_bytes is not None and best.peak_ram_bytes:
        best = best.noted(fragmentation_overhead_bytes=best.arena_bytes - best.peak_ram_bytes)
    return count_rescues(best, tries.arena_failures)
