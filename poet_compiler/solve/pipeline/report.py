"""The Result of ``strategy="optimal"``, built once from the final answer: its plan's
simulator figures, the bound and gap it was judged by, its message, and the report
fields every stage noted, with the closing ones (what ended the solve, the effort, the
stages' work and seconds)."""

from __future__ import annotations

from dataclasses import dataclass

from poet_compiler import work
from poet_compiler.solve.feasibility import what_fits
from poet_compiler.solve.finalize import build_result
from poet_compiler.solve.pipeline.answer import BOUND_NOISE, Answer, after, says, text
from poet_compiler.solve.pipeline.context import STRATEGY, Context
from poet_compiler.solve.result import Judged, Result, Run


@dataclass(frozen=True)
class Timing:
    """The solve's wall seconds and, per stage, its seconds and work (Clock's reports)."""

    solve_s: float
    stage_s: dict[str, float]
    stage_effort: dict[str, float]

    @classmethod
    def of(cls, ctx: Context) -> Timing:
        return cls(ctx.clock.elapsed(), ctx.clock.report(), ctx.clock.effort_report())


def closing(ctx: Context, answer: Answer, meter: work.Meter) -> Answer:
    """The answer with its closing report fields: for a solve that found no schedule, the
    RAM range the user can act on; the effort, what of it was spent, and what ended the
    solve (:func:`stopped_by`)."""
    if answer.status == "timeout" and answer.schedule is None:
        fits = what_fits(ctx.problem, timed_out=meter.time_hit)
        if fits is not None:
            answer = answer.saying(after(answer.message, says(fits[0]))).noted(min_ram_lower_bytes=fits[1])
    return answer.noted(effort=round(ctx.clock.limit_s, 3), effort_used=round(meter.spent, 3),
                        stopped_by=stopped_by(answer, meter, ctx.gap))


def stopped_by(res: Answer, meter: work.Meter, gap: float) -> str:
    """What ended the solve: ``time`` (the wall cap decided something: the only case in
    which two runs may differ), ``proof`` (optimal, or proven infeasible), ``gap`` (within
    the gap limit), ``memory`` (the full model was not built under ``--memory-limit``: the
    guided stage's schedule, with effort left that nothing could use), else ``effort``."""
    if meter.time_hit:
        return "time"
    if res.status in ("optimal", "infeasible"):   # the pipeline reports "infeasible" only when proven
        return "proof"
    if res.gap is not None and res.gap <= max(gap, BOUND_NOISE):
        return "gap"
    return "memory" if res.over_memory else "effort"


def final_result(ctx: Context, answer: Answer, timing: Timing) -> Result:
    """The Result (module docstring), by :func:`~poet_compiler.solve.finalize.build_result`."""
    return build_result(ctx.problem, answer.plan,
                        Judged(answer.status, text(answer.message), answer.lower_bound_j, answer.gap),
                        Run(STRATEGY, timing.solve_s, ctx.options.solver, ctx.options.formulation),
                        answer.notes.set(stage_s=timing.stage_s, stage_effort=timing.stage_effort))
