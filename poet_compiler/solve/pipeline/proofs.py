"""Proofs of infeasibility: the quick ones before any search, and the explanation of one a
bound or the solver found (the smallest RAM and deadline that work: :mod:`..feasibility`)."""

from __future__ import annotations

from poet_compiler.solve.feasibility import quick_infeasibility
from poet_compiler.solve.pipeline.answer import Answer, no_schedule
from poet_compiler.solve.pipeline.context import Context
from poet_compiler.solve.result import Notes


def quick_proofs(ctx: Context) -> Answer | None:
    """Infeasible at once: a node's working set above the budget, or a deadline below the
    compute-only time (:func:`~..feasibility.quick_infeasibility`); None otherwise."""
    with ctx.stage("quick_checks"):
        quick = quick_infeasibility(ctx.problem, time_limit_s=min(ctx.left(), ctx.tuning.cover_limit_s),
                                    threads=ctx.options.threads, tuning=ctx.tuning)
    if quick is None:
        return None
    return no_schedule("infeasible", quick.message, quick.notes)


def infeasible(ctx: Context, reserve: int, notes: Notes, proof: str) -> Answer:
    """Infeasible at the budget minus ``reserve`` (``proof`` says what showed it): an arena
    problem when the reserve made it so, otherwise proven, with the smallest RAM /
    deadline that would work."""
    problem = ctx.problem
    if reserve:
        # Only the fragmentation reserve made it infeasible: report the arena problem.
        return no_schedule("infeasible", f"arena: no schedule leaves room for the {reserve} bytes of fragmentation "
                           f"the arena planner needs within the activation budget {problem.activation_budget}", notes)
    with ctx.stage("infeasibility"):
        why = ctx.steps.explain_infeasible(problem, time_limit_s=max(ctx.left(), ctx.tuning.last_step_min_s),
                                           threads=ctx.options.threads, tuning=ctx.tuning)
    return no_schedule("infeasible", why.message, notes.merge(why.notes, infeasible_proof=proof),
                       proven=True)
