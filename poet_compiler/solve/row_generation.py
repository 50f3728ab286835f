"""The full fast model by row generation: a stage's memory rows only where a solution needs them.

Most of the fast model is its memory accounting: per stage, the "still needed" and
"arrived" chains and a running sum with a row at every compute point (O(n + |E|) rows per
stage, ~40 % of the rows and binaries on the README demo). A stage's RAM mostly peaks
at its own compute point, where the stage's node, its inputs and every tensor held into
the next stage are allocated. So the first round writes, for every stage, only that one
row (:func:`poet_compiler.solve.formulation.fast._add_point_row`): a *relaxation* — every
schedule of the full model is a solution of it — so the solver's bound is a bound of the
problem, at every round. Its solution is replayed by the independent simulator:

- if it fits the budget it is a schedule of the full problem (the other rules are all
  there), at the model's energy; a relaxation optimum that fits is the optimum;
- else the stages where the replay went over the budget get all their rows, and the model
  is solved again from the best schedule known, while time is left. After at most n
  rounds it is the full model.

From the same hint and for the same time, the rounds ended at least as high a bound as
the full model on the 9 cells of ``bench/row_generation_bench.py``, higher on 6, and as
cheap a schedule on 7 (``bench/results/row_generation.jsonl``, with the profiles of its
date; docs/optimizer.md, "The full model").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from poet_compiler import work
from poet_compiler.schedule.linearize import linearize
from poet_compiler.schedule.program import Op
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.schedule.simulate import simulate
from poet_compiler.solve.formulation.common import Built
from poet_compiler.solve.formulation.fast import build_fast, useful_table
from poet_compiler.solve.problem import Problem
from poet_compiler.solvers import BackendOptions, BackendResult
from poet_compiler.solvers.base import within_gap

if TYPE_CHECKING:
    from poet_compiler.solve.pipeline.context import Context
#: The first round's memory, forecast before it is built (:func:`forecast_bytes`): the
#: solver processes' own (CP-SAT or HiGHS) plus a share
#: per ``useful`` (stage, tensor) pair, the variables' index, for the solvers' model and
#: the Python model the build adds to poetc. Fitted on ``bench/full_model_memory.py``
#: (BENCHMARKS.md, "Optimizer grid"): measured 417-3,577 MiB over poetc's own bytes,
#: from 2,718 pairs (the README demo) to 65,040 (MobileNetV2); the fit is within 8 % from
#: 5,792 pairs up, and above the measure below.
FORECAST_BASE_BYTES = 712 * 2**20
FORECAST_BYTES_PER_PAIR = 45 * 2**10
# poetc's own resident bytes beside a full model's forecast (the memory-limit check of
# the improvement stage, poet_compiler/solve/pipeline/improvement.py).
BASE_RSS_BYTES = 600 * 2**20


@dataclass(frozen=True)
class Rounds:
    """What the rounds ended with. ``out.values`` is the best solution that fits the
    budget (decoded by ``built``), or None; ``out.bound`` the best bound of any round."""

    built: Built
    out: BackendResult
    rounds: int
    full_stages: int
    build_s: float

    def summary(self) -> dict[str, int]:
        return {"rounds": self.rounds, "full_stages": self.full_stages, "stages": self.built.problem.n}


def stages_over(problem: Problem, schedule: Schedule, budget: int) -> set[int]:
    """Stages whose RAM goes over ``budget`` when the simulator replays ``schedule``.

    An instruction belongs to the stage of the next first computation (stage ``t`` ends
    with node ``t``'s first COMPUTE); what follows the last one belongs to the last stage."""
    program = linearize(problem.graph, schedule, mode=problem.mode, dma=not problem.synchronous)
    timeline = simulate(problem.graph, problem.costs, program).timeline
    first_at: dict[int, int] = {}     # node -> the index of its first COMPUTE
    for j, ins in enumerate(program.instructions):
        if ins.op == Op.COMPUTE:
            first_at.setdefault(ins.node, j)
    node_at = {j: i for i, j in first_at.items()}
    stage_of = [0] * len(program.instructions)
    nxt = problem.n - 1
    for j in range(len(program.instructions) - 1, -1, -1):
        nxt = stage_of[j] = node_at.get(j, nxt)
    return {stage_of[j] for j, live in enumerate(timeline) if live > budget}


def forecast_bytes(problem: Problem) -> int:
    """The memory the first round will add to poetc, solver processes included (a
    forecast from the model's index, computed in milliseconds: 0.05 s on BERT-base)."""
    pairs = sum(map(sum, useful_table(problem)))
    return FORECAST_BASE_BYTES + FORECAST_BYTES_PER_PAIR * pairs


def solve_built(ctx: Context, built: Built, build_s: float, *, reserve_s: float, gap: float,
                share: float = 1.0) -> BackendResult | None:
    """Solve ``built`` (built in ``build_s``) from its hint with ``share`` of what ``ctx``'s
    clock leaves after ``reserve_s``, on ``ctx.steps.solve_full``; None when that is under
    ``min_stage_s`` (a solver started then would only overrun the limit by its child's
    start-up and kill grace)."""
    clock, options = ctx.clock, ctx.options
    large = ctx.tuning.large_model(built.model)
    # A large model's solver children start up (the model is sent to them, CP-SAT's is
    # rebuilt there) at about the cost of building it: measured on a 500-node DAG, a 23 s
    # build, and a 13.9 s limit that ended after 30.3 s. Reserve that too.
    reserve = reserve_s + (build_s if large else 0.0)
    limit = clock.solver_limit(clock.left(reserve) * share, reserve_s=reserve)
    if limit < ctx.tuning.min_stage_s:
        return None
    opts = BackendOptions(time_limit_s=limit, threads=options.threads, progress=options.progress, relative_gap=gap,
                          large=large)
    return ctx.steps.solve_full(built.model, options.solver, opts)


def solve_by_rows(ctx: Context, problem: Problem, hint: Schedule | None, *, budget: int, floor: float | None,
                  finalize_s: float, gap: float) -> Rounds:
    """Solve the fast model of ``problem`` at ``budget`` by rounds (module docstring),
    from ``hint``, with ``floor`` (a valid bound) as its objective floor, within ``ctx``'s
    clock minus ``finalize_s``."""
    full: set[int] = set()
    best: BackendResult | None = None
    best_built: Built | None = None
    bound: float | None = None
    last: BackendResult | None = None
    rounds, build_s, solve_s = 0, 0.0, 0.0
    while True:
        t_build = work.now()
        built = build_fast(problem, budget=budget, full_stages=full.__contains__, hint=hint, floor=floor)
        took = work.now() - t_build
        build_s += took
        out = solve_built(ctx, built, took, reserve_s=finalize_s, gap=gap,
                          share=ctx.tuning.first_round_share if rounds == 0 else 1.0)
        if out is None:
            if last is None:
                last = BackendResult("timeout", None, None, None, 0.0, ctx.options.solver,
                                     f"no time left to solve after building the model ({build_s:.3g} s)")
            break
        rounds += 1
        solve_s += out.solve_time_s
        last = out
        if out.bound is not None:
            bound = out.bound if bound is None else max(bound, out.bound)
        if out.status == "infeasible" or out.values is None:
            break   # proven infeasible (then so is the problem), or no solution in time
        schedule = built.schedule(out.values)
        over = stages_over(problem, schedule, budget)
        if not over:
            if best is None or (out.objective is not None and best.objective is not None
                                and out.objective < best.objective):
                best, best_built = out, built
            hint = schedule
            if out.status == "optimal" or (bound is not None and out.objective is not None
                                           and within_gap(out.objective, bound, gap)):
                break
            continue
        full |= (over - full) or set(range(problem.n))   # a stage already full cannot go over
    assert last is not None
    if best is None or best_built is None:
        out = dataclasses.replace(last, status="infeasible" if last.status == "infeasible" else "timeout",
                                  values=None, objective=None, bound=bound, solve_time_s=solve_s)
        return Rounds(built, out, rounds, len(full), build_s)
    proven = best.status == "optimal" or (bound is not None and best.objective is not None
                                          and best.objective <= bound + 1e-12)
    out = dataclasses.replace(best, status="optimal" if proven else "feasible", bound=bound, solve_time_s=solve_s)
    return Rounds(best_built, out, rounds, len(full), build_s)
