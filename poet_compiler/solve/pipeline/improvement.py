"""Improvement: schedules below the incumbents, each stopping once within the gap limit of
the best bound (docs/optimizer.md, "Improvement").

:func:`improve`: the guided stage (:mod:`.guided_stage`), then the full model
(:mod:`.full_model`) unless the guided schedule is within the gap, the graph is above
``full_model_max_nodes``, its forecast memory is over its share of ``--memory-limit`` or
too little effort is left.
"""

from __future__ import annotations

import dataclasses

from poet_compiler.solve.pipeline.answer import Answer, says
from poet_compiler.solve.pipeline.bounds import Bounds
from poet_compiler.solve.pipeline.context import Context
from poet_compiler.solve.pipeline.full_model import full_model
from poet_compiler.solve.pipeline.guided_stage import Guided, guided_stage
from poet_compiler.solve.problem import Problem
from poet_compiler.solve.row_generation import BASE_RSS_BYTES, forecast_bytes
from poet_compiler.solvers.memory import current_limit
from poet_compiler.units import format_bytes


def improve(ctx: Context, tight: Problem, reserve: int, found: Bounds) -> Answer:
    """The guided stage, then the full model unless it is skipped (module docstring)."""
    guided = None if found.cover is None else guided_stage(ctx, tight, found)
    if guided is not None and guided.done:
        assert guided.kept is not None
        return guided.kept
    answer = _full_or_kept(ctx, tight, reserve, found, guided)
    return dataclasses.replace(answer, finalize_s=0.0 if guided is None else guided.finalize_s)


def _full_or_kept(ctx: Context, tight: Problem, reserve: int, found: Bounds, guided: Guided | None) -> Answer:
    """The full model after the guided stage, or the schedule it kept when the full model
    is not built."""
    problem, tuning = ctx.problem, ctx.tuning
    hint, notes, cover, kept = found.hint, found.notes, None, None
    if guided is not None:
        notes, cover, kept = guided.notes, guided.cover, guided.kept
        hint = guided.outcome.schedule if guided.outcome.schedule is not None else hint
    # Finalizing the full model's schedule (arena planning) comes after its limit: leave
    # it the work the guided schedule's finalize took.
    finalize_s = 0.0 if guided is None else guided.finalize_s
    full_limit = ctx.clock.solver_limit(ctx.left(), reserve_s=finalize_s)
    too_late = (not ctx.small and ctx.left(finalize_s) < tuning.min_full_solve_s) or full_limit < tuning.min_stage_s
    too_big = cover is not None and problem.n > tuning.full_model_max_nodes
    # With a schedule in hand, a full model the memory limit would stop is not built.
    over_memory = None if too_big or too_late or kept is None else _over_memory(ctx)
    if cover is not None and kept is not None and (too_big or too_late or over_memory):
        # No full model: above full_model_max_nodes, or forecast over its share of the
        # memory limit, or too little effort left for it to find anything (building and
        # loading it alone takes seconds on 100+ node graphs): keep the guided stage's
        # schedule, with the cover's bound.
        notes = notes.set(backend_bound_j=cover.energy_j, full_model_skipped=True)
        kept = kept.noted(notes)
        if too_big:
            why = f"the full model is not built above {tuning.full_model_max_nodes} nodes (its size grows with " \
                  "n^2); bound: the eviction cover"
        elif over_memory:
            why = f"{over_memory}; bound: the eviction cover"
        else:
            why = f"{ctx.stopped_text()} before the full model"
        kept = dataclasses.replace(kept, over_memory=bool(over_memory))
        return kept.saying(says(f"the {kept.notes.get('solver_used')} schedule; {why}"))
    if too_big or full_limit < tuning.min_stage_s:
        # No full model: above full_model_max_nodes (10.8 GB for a 500-node DAG, which
        # found nothing in 120 s), or no effort for it (the guided stage found nothing to keep).
        why = f"the full model is not built above {tuning.full_model_max_nodes} nodes" if too_big else \
            "no time left for the full model"
        return Answer("timeout", says(f"timeout: no schedule within {ctx.effort_text()} ({why})"),
                      notes=notes.set(backend_bound_j=cover.energy_j if cover is not None else None))
    with ctx.stage("full_model"):
        return full_model(ctx, tight, reserve, hint, guided, notes)


def _over_memory(ctx: Context) -> str | None:
    """Why the full model is not built under the memory limit in force, or None: its
    forecast (:func:`~..row_generation.forecast_bytes`) and poetc's own resident bytes
    exceed ``full_model_memory_share`` of the limit."""
    # The forecast alone (not poetc's measured resident bytes): the decision must not
    # depend on a measurement.
    limit = current_limit()
    if limit is None:
        return None
    need = forecast_bytes(ctx.problem) + BASE_RSS_BYTES
    share = ctx.tuning.full_model_memory_share
    if need <= share * limit:
        return None
    return (f"the full model is not built: its forecast memory ({format_bytes(need)} with poetc's) is over "
            f"{share:.0%} of the memory limit ({format_bytes(limit)}; --memory-limit)")
