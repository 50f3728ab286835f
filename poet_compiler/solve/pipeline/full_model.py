"""The full model: the fast formulation by rounds of memory rows (:mod:`..row_generation`)
or the dense one in one solve, from the best schedule, with the cover bound as its floor
(docs/optimizer.md, "The full model"); its schedule finalized, or the guided stage's kept
when the solver's is no better or does not fit its arena."""

from __future__ import annotations

import dataclasses

from poet_compiler import work
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.finalize import ArenaOvershoot, Fenced
from poet_compiler.solve.formulation import build
from poet_compiler.solve.formulation.common import Built
from poet_compiler.solve.formulation.fast import canonical
from poet_compiler.solve.pipeline.answer import Answer, Message, finalized, gap_claim, says, wrap
from poet_compiler.solve.pipeline.context import Context
from poet_compiler.solve.pipeline.guided_stage import Guided
from poet_compiler.solve.pipeline.proofs import infeasible
from poet_compiler.solve.problem import Problem, feasible_energy
from poet_compiler.solve.result import MODEL_STATS, Notes
from poet_compiler.solve.row_generation import solve_built
from poet_compiler.solvers import BackendResult


def full_model(ctx: Context, tight: Problem, reserve: int, hint: Schedule | None, guided: Guided | None,
               notes: Notes) -> Answer:
    """The full model from ``hint`` at ``tight``'s budget (module docstring)."""
    problem, options = ctx.problem, ctx.options
    fast = options.formulation == "fast"
    cover = None if guided is None else guided.cover
    kept = None if guided is None else guided.kept
    finalize_s = 0.0 if guided is None else guided.finalize_s
    if hint is not None and fast:
        hint = canonical(problem, hint)
    floor = cover.energy_j if cover is not None else None
    if fast:
        rounds = ctx.steps.solve_by_rows(ctx, problem, hint, budget=tight.activation_budget, floor=floor,
                                         finalize_s=finalize_s, gap=ctx.gap)
        built, out = rounds.built, rounds.out
        notes = notes.set(**model_stats(built.model.stats()), model_build_s=round(rounds.build_s, 3),
                          row_generation=rounds.summary())
    else:
        built, out, notes = _solve_dense(ctx, tight, hint, floor, notes, finalize_s)
    notes = notes.set(**model_stats(out.stats))
    # The better of the solver's bound and the cover's: a solver that found nothing may
    # report none, or its own bound without the floor (ResNet-18-CIFAR a72 30 % 1.5x: the
    # portfolio's timeout reported CP-SAT's 43.61 J under the cover's 44.19 J).
    bound = max((b for b in (out.bound, floor) if b is not None), default=None)
    notes = notes.set(backend_solve_s=round(out.solve_time_s, 3), warm_start_found=hint is not None,
                      backend_bound_j=bound, solver_used=out.solver)
    if out.status == "infeasible":
        return infeasible(ctx, reserve, notes, "the solver")
    schedule = built.schedule(out.values) if out.values is not None else None
    outcome = None if guided is None else guided.outcome
    if outcome is not None and outcome.energy_j is not None and \
            (schedule is None or (feasible_energy(tight, schedule) or float("inf")) > outcome.energy_j):
        # The solver's schedule is no better than the guided one it started from: keep that.
        source = f"{outcome.source} (the {out.solver} solve did not improve it)"
        if kept is not None and guided is not None and guided.kept_is_guided:
            # Already finalized (arena planned) in the guided stage: not again.
            return dataclasses.replace(kept.noted(notes, solver_used=source), lower_bound_j=bound,
                                       message=says(ctx.stopped_text()))
        schedule = outcome.schedule
        notes = notes.set(solver_used=source)
        out = dataclasses.replace(out, status="feasible")
    if schedule is None:
        why = f"timeout: {out.solver} found no schedule within {ctx.effort_text()}" + \
            (f" ({out.message})" if out.message else "")
        return Answer("timeout", says(why), notes=notes)
    return _finalized(ctx, schedule, out, bound, reserve, kept, notes)


def _stop_message(ctx: Context, out: BackendResult) -> Message:
    """What ended the solver's search: its proof (nothing to say), the gap limit, or the effort."""
    if out.status == "optimal":
        return ()
    if ctx.gap and out.objective is not None and out.bound is not None and \
            out.objective - out.bound <= ctx.gap * abs(out.objective) + 1e-12:
        return gap_claim(ctx.gap)
    return says(ctx.stopped_text())


def _finalized(ctx: Context, schedule: Schedule, out: BackendResult, bound: float | None, reserve: int,
               kept: Answer | None, notes: Notes) -> Answer:
    """The solver's schedule finalized and judged: against the schedule kept from the
    guided stage when its arena fits only with FENCEs or not at all, its bound held to
    its energy, and a bound of a reduced budget marked as one."""
    problem = ctx.problem
    message = _stop_message(ctx, out)
    with ctx.stage("finalize"):
        done = ctx.finalize(schedule, arena_time_s=ctx.left(), fence_last=True)
    res = finalized(done, status=out.status, lower_bound_j=bound, message=message)
    if res.ok and isinstance(done.verdict, Fenced) and kept is not None and kept.ok and \
            (kept.energy_j or 0.0) <= (res.energy_j or 0.0):
        # Its arena fitted only with waits for the channel (the last resort), which cost
        # more than the schedule kept from the guided stage: keep that one.
        res = dataclasses.replace(res, status="infeasible", gap=res.gap, miss=done.verdict, message=says(
            f"arena: it fitted only with {done.verdict.fences} added FENCE(s), at {res.energy_j:.6g} J"))
    if res.lower_bound_j is not None and res.energy_j is not None and res.lower_bound_j > res.energy_j:
        # The bound of a proven optimum can exceed the simulated energy by float noise only.
        res = dataclasses.replace(res, lower_bound_j=res.energy_j, gap=0.0)
    if reserve and res.lower_bound_j is not None:
        # This bound holds for the reduced budget only; the driver replaces it by the
        # first attempt's (full budget), which bounds every schedule the user could get.
        res = res.noted(lower_bound_reduced_budget_j=res.lower_bound_j)
        if res.status == "optimal":
            res = dataclasses.replace(res, status="feasible")
    res = res.noted(notes, solver_objective=out.objective)
    if not res.ok and kept is not None:
        # The full model's schedule does not fit its arena; the one kept from the guided
        # stage does (its solver_used says which: the guided search or the arena-fit cover).
        kept_source = kept.notes.get("solver_used")
        kept = kept.saying(wrap(f"the {kept_source} schedule (the solver's did not fit: ", res.message, ")"))
        kept = kept.noted(notes, solver_used=kept_source)
        if isinstance(res.miss, (ArenaOvershoot, Fenced)) and res.peak_ram_bytes is not None and \
                res.peak_ram_bytes <= problem.activation_budget:
            kept = kept.noted(arena_rescue={"resolved": 0, "lost": 1})
        return dataclasses.replace(kept, lower_bound_j=bound if bound is not None else kept.lower_bound_j)
    return res


def model_stats(stats: dict) -> dict[str, int]:
    """``model_<k>`` for the integer statistics of a model or a backend run (MODEL_STATS)."""
    return {"model_" + k: v for k in MODEL_STATS if isinstance(v := stats.get(k), int)}


def _solve_dense(ctx: Context, tight: Problem, hint: Schedule | None, floor: float | None, notes: Notes,
                 finalize_s: float) -> tuple[Built, BackendResult, Notes]:
    """The whole model in one solve (the dense formulation; the fast one goes by rounds)."""
    t_build = work.now()
    built = build(ctx.problem, ctx.options.formulation, budget=tight.activation_budget, hint=hint, floor=floor)
    build_s = round(work.now() - t_build, 3)
    notes = notes.set(**model_stats(built.model.stats()), model_build_s=build_s)
    out = solve_built(ctx, built, work.now() - t_build, reserve_s=finalize_s, gap=ctx.gap)
    if out is None:
        out = BackendResult("timeout", None, None, None, 0.0, ctx.options.solver,
                            f"no time left to solve after building the model ({build_s} s)")
    return built, out, notes

