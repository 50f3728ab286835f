"""``solve_milp``: Problem -> the least-energy schedule found within the effort -> simulated Result.

The driver of ``strategy="optimal"``. It reads as its stages, each a function of its own
module under :mod:`poet_compiler.solve.pipeline` that takes the frozen
:class:`~.pipeline.context.Context` (problem, options, tuning, the effort's clock) and
returns a frozen outcome:

1. **quick proofs** (:mod:`.pipeline.proofs`): a node's working set above the budget, or
   a deadline below the compute-only time;
2. **incumbents** (:mod:`.pipeline.incumbents`): every heuristic's plan that fits;
3. **bounds** (:mod:`.pipeline.bounds`): the eviction cover (which may prove
   infeasibility), then the presence model;
4. **improvement** (:mod:`.pipeline.improvement`): the cover's schedules and the guided
   sub-problem, the deep cover, then the full model (:mod:`.pipeline.full_model`), each
   stopping once within the gap limit of the best bound;
5. **arena and finalize**: every schedule is finalized (:mod:`.finalize`: arena,
   compaction, replay; a typed verdict); one whose arena does not fit even so makes
   :mod:`.pipeline.arena` run 3-4 again below the overshoot; :mod:`.pipeline.judge`
   weighs the result against the full-budget bound and the incumbents.

On small DMA graphs it runs for two program families and keeps the better
(:func:`~.pipeline.answer.union`). The Result is built once, from the last answer
(:mod:`.pipeline.report`). Status: ``optimal`` only for a closed gap, ``feasible`` with the
gap to the best bound, ``timeout`` when no schedule was found within the effort,
``infeasible`` when proven so, with the smallest RAM / deadline that would work.
"""

from __future__ import annotations

import dataclasses
import time

from poet_compiler import work
from poet_compiler.errors import PoetError, SolverError
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.formulation import FORMULATIONS
from poet_compiler.solve.options import SolveOptions
from poet_compiler.solve.pipeline.answer import Answer, keep_gap_claim_true, no_schedule, union
from poet_compiler.solve.pipeline.arena import Tries, arena_retries
from poet_compiler.solve.pipeline.bounds import bounds
from poet_compiler.solve.pipeline.context import Context, Steps
from poet_compiler.solve.pipeline.improvement import improve
from poet_compiler.solve.pipeline.incumbents import Incumbents, incumbents
from poet_compiler.solve.pipeline.judge import judge
from poet_compiler.solve.pipeline.proofs import infeasible, quick_proofs
from poet_compiler.solve.pipeline.report import Timing, closing, final_result
from poet_compiler.solve.pipeline.steps import STEPS
from poet_compiler.solve.problem import Problem
from poet_compiler.solve.result import Result
from poet_compiler.solve.tuning import TUNING, Tuning
from poet_compiler.solvers import SOLVERS


def solve_milp(problem: Problem, options: SolveOptions | None = None, *, warm_start: Schedule | None = None,
               tuning: Tuning = TUNING, steps: Steps = STEPS) -> Result:
    """Solve ``problem`` to (proven) optimality, the gap limit or its effort (module docstring).

    ``options.effort``: the work every stage shares (:func:`~.options.effort_units`);
    ``options.time_limit_s`` is only the wall cap; ``Result.notes.stopped_by`` says which
    of proof, gap, effort or time ended it. ``tuning`` and ``steps``: a test's or a
    bench's own (:mod:`.tuning`, :class:`~.pipeline.context.Steps`)."""
    options = options or SolveOptions()
    if options.solver not in SOLVERS:
        raise SolverError(f"unknown solver {options.solver!r}; known: {', '.join(SOLVERS)}")
    if options.formulation not in FORMULATIONS:
        raise PoetError(f"unknown formulation {options.formulation!r}; known: {', '.join(FORMULATIONS)}")
    with work.metered(_meter(problem, options, tuning)) as meter:
        ctx = Context.start(problem, options, steps=steps, tuning=tuning)
        answer = families(ctx, warm_start)
        timing = Timing.of(ctx)
        answer = closing(ctx, answer, meter)
    return final_result(ctx, answer, timing)


def _meter(problem: Problem, options: SolveOptions, tuning: Tuning) -> work.Meter:
    """The work meter of the solve, its wall cap the time limit less a reserve: finalizing
    the schedule takes its time by the same per-node measure (MobileNetV2 at --time-limit
    10 finalized 0.21 s past the cap), and a search's stop half of the 5 % the limit
    allows (``wall_margin``)."""
    stated = options.time_limit_s if options.stated_limit_s is None else options.stated_limit_s
    reserve_s = min(tuning.finalize_s_per_node * problem.n + tuning.wall_margin * stated, options.time_limit_s / 2)
    return work.Meter(wall_at=time.perf_counter() + options.time_limit_s - reserve_s)


def families(ctx: Context, warm_start: Schedule | None) -> Answer:
    """The search in the problem's program family; on a small graph where time matters and
    transfers may overlap (``transfers == "stage"``), in both families: the stage-long one
    (``stage_family_share`` of the effort), then the synchronous one from its schedule
    (docs/model.md, "What the optimizer searches"). The cheaper schedule wins, with the
    smaller of the two bounds."""
    problem, clock = ctx.problem, ctx.clock
    if problem.synchronous or not ctx.small:
        return family(ctx, warm_start).noted(transfers=problem.transfers)
    with clock.capped(clock.started + clock.limit_s * ctx.tuning.stage_family_share):
        stage = family(ctx, warm_start)
    sync = family(ctx.of(dataclasses.replace(problem, transfers="sync")), stage.schedule if stage.ok else None)
    return keep_gap_claim_true(union(stage, sync), ctx.gap)


def family(ctx: Context, warm_start: Schedule | None) -> Answer:
    """Quick proofs → incumbents → (bounds → improvement, again below an arena that did
    not fit) → the answer, within one program family (``ctx.problem.transfers``)."""
    proof = quick_proofs(ctx)
    if proof is not None:
        return proof
    first = incumbents(ctx, warm_start)
    return judge(ctx, first, search(ctx, first))


def search(ctx: Context, first: Incumbents) -> Tries:
    """Bounds and improvement at the user's budget, and below it while an arena does not fit."""
    return arena_retries(ctx, first, attempt)


def attempt(ctx: Context, reserve: int, known: Incumbents) -> Answer:
    """Bounds → improvement at the activation budget minus ``reserve``, from ``known``'s best."""
    if work.wall_expired():
        # Nothing after the heuristics once the wall cap has passed (the cover's build alone
        # took 0.9 s on gpt2_large): the best heuristic's schedule is the answer.
        return no_schedule("timeout", "the time limit passed before the bounds")
    tight = dataclasses.replace(ctx.problem, ram_budget_bytes=ctx.problem.ram_budget_bytes - reserve)
    found = bounds(ctx, tight, known.hint)
    if found.infeasible:
        return infeasible(ctx, reserve, found.notes, "the eviction-cover bound")
    return improve(ctx, tight, reserve, found)
