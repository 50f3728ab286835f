"""``solve_milp``: Problem -> optimal (or best found) schedule -> simulated Result.

Builds a formulation (:mod:`.formulation`), warm-starts it from a heuristic, solves it on
a backend (:mod:`.backends`), reads the schedule back and hands it to
:func:`~poet_compiler.solve.finalize.finalize`, which re-simulates every figure. Status:
``optimal`` only when the solver proved it, ``feasible`` with a gap from the solver's
bound, ``timeout`` when no schedule was found in time, ``infeasible`` when proven so —
then with the smallest RAM / deadline that would work (:mod:`.feasibility`).
"""

from __future__ import annotations

import dataclasses
import time

from poet_compiler.errors import PoetError, ScheduleError, SolverError
from poet_compiler.schedule.linearize import linearize
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.schedule.simulate import simulate
from poet_compiler.solve.backends import SOLVERS, BackendOptions, solve_model
from poet_compiler.solve.finalize import finalize
from poet_compiler.solve.formulation import FORMULATIONS, build
from poet_compiler.solve.formulation.fast import canonical
from poet_compiler.solve.problem import Problem
from poet_compiler.solve.result import Result

STRATEGY = "optimal"


def _fits(problem: Problem, schedule: Schedule) -> float | None:
    """Energy of ``schedule`` if it is valid in the problem's mode and meets both budgets."""
    try:
        sim = simulate(problem.graph, problem.costs, linearize(problem.graph, schedule, mode=problem.mode),
                       ram_budget_bytes=problem.activation_budget, deadline_s=problem.deadline_s)
    except ScheduleError:
        return None
    return sim.energy_j


def warm_start_schedule(problem: Problem, given: Schedule | None = None) -> Schedule | None:
    """The cheapest feasible schedule among ``given``, checkpoint-all and the quick
    heuristics of :mod:`.baselines` (when present), or None."""
    candidates: list[Schedule] = []
    if given is not None:
        candidates.append(given)
    candidates.append(Schedule.checkpoint_all(problem.n))
    best: tuple[float, Schedule] | None = None
    for s in candidates:
        e = _fits(problem, s)
        if e is not None and (best is None or e < best[0]):
            best = (e, s)
    if best is None or given is None:
        try:
            from poet_compiler.solve.baselines import BASELINES
        except ImportError:
            BASELINES = {}
        for name in ("chen_greedy", "capuchin", "pofo"):
            fn = BASELINES.get(name)
            if fn is None:
                continue
            try:
                res = fn(problem)
            except PoetError:
                continue
            if res.ok and res.schedule is not None and res.energy_j is not None:
                if best is None or res.energy_j < best[0]:
                    best = (res.energy_j, res.schedule)
    return None if best is None else best[1]


def _empty(problem: Problem, status: str, solver: str, formulation: str, started: float, message: str) -> Result:
    return Result(status=status, strategy=STRATEGY, mode=problem.mode, ram_budget_bytes=problem.ram_budget_bytes,  # type: ignore[arg-type]
                  deadline_s=problem.deadline_s, n_nodes=problem.n, solver=solver, formulation=formulation,
                  solve_time_s=time.perf_counter() - started, message=message)


# Models with more binaries than this stop at DEFAULT_GAP_LIMIT (0.1 %) and use the
# cheaper presolve; smaller ones are solved to a closed gap, which is cheap for them.
LARGE_MODEL_BINARIES = 5000
DEFAULT_GAP_LIMIT = 1e-3
# Fragmentation feedback: re-solves with a budget lowered by the arena's overshoot.
MAX_ARENA_RETRIES = 4


def solve_milp(
    problem: Problem,
    *,
    solver: str = "cpsat",
    formulation: str = "fast",
    time_limit_s: float = 60.0,
    threads: int = 2,
    progress: bool = False,
    warm_start: Schedule | None = None,
    gap_limit: float | None = None,
) -> Result:
    """Solve ``problem`` to (proven) optimality or the time limit; see the module docstring.

    ``gap_limit``: stop once the relative gap is at most this (None: 0.1 % on large
    models, 0 on small ones). The status is "optimal" only for a closed gap; a stop
    within the limit is "feasible" with its gap.

    When the schedule's live bytes fit but its static arena does not (fragmentation),
    the model is re-solved with the activation budget lowered by the overshoot, up to
    ``MAX_ARENA_RETRIES`` times, warm-started from the previous schedule; the overhead is
    recorded in ``Result.extra`` (``fragmentation_retries``, ``fragmentation_reserve_bytes``).
    """
    if solver not in SOLVERS:
        raise SolverError(f"unknown solver {solver!r}; known: {', '.join(SOLVERS)}")
    if formulation not in FORMULATIONS:
        raise PoetError(f"unknown formulation {formulation!r}; known: {', '.join(FORMULATIONS)}")
    started = time.perf_counter()
    from poet_compiler.solve.feasibility import quick_infeasibility

    quick = quick_infeasibility(problem)
    if quick is not None:
        res = _empty(problem, "infeasible", solver, formulation, started, quick.message)
        res.extra.update(quick.extra)
        return res
    reserve = 0                      # bytes held back from the budget for fragmentation
    previous: Schedule | None = warm_start
    res: Result | None = None
    full_bound: float | None = None  # the first attempt's bound: valid for the user's budget
    arena_miss: Result | None = None  # the last schedule whose live bytes fit but arena did not
    for attempt in range(MAX_ARENA_RETRIES + 1):
        remaining = time_limit_s - (time.perf_counter() - started)
        if attempt and remaining < 1.0:
            break
        res = _solve_once(problem, reserve, solver=solver, formulation=formulation,
                          time_limit_s=time_limit_s if attempt == 0 else remaining, threads=threads,
                          progress=progress, warm_start=previous, gap_limit=gap_limit, started=started)
        res.extra["fragmentation_retries"] = attempt
        res.extra["fragmentation_reserve_bytes"] = reserve
        if attempt == 0:
            full_bound = res.lower_bound_j
        elif res.ok and res.energy_j is not None:
            res.lower_bound_j = None if full_bound is None else min(full_bound, res.energy_j)
            res.gap = None if res.lower_bound_j is None else \
                max(0.0, (res.energy_j - res.lower_bound_j) / res.energy_j) if res.energy_j > 0 else 0.0
            if res.gap == 0.0:
                res.status = "optimal"
        if attempt and not res.ok and arena_miss is not None:
            # The lowered budget admits no schedule (or none in time): the closest
            # schedule is the previous one, whose arena overshoots; say so.
            res, arena_miss.extra["fragmentation_retries"] = arena_miss, attempt
            break
        if not (res.status == "infeasible" and res.message.startswith("arena") and res.arena_bytes
                and res.schedule is not None):
            break
        arena_miss = res
        # Live bytes fit, the arena does not: hold back the overshoot and solve again.
        reserve += max(1, res.arena_bytes - problem.activation_budget)
        previous = res.schedule
        if problem.activation_budget - reserve < 1:
            break
    assert res is not None
    res.solve_time_s = time.perf_counter() - started
    if res.ok and res.arena_bytes is not None and res.peak_ram_bytes:
        res.extra["fragmentation_overhead_bytes"] = res.arena_bytes - res.peak_ram_bytes
    return res


def _solve_once(problem: Problem, reserve: int, *, solver: str, formulation: str, time_limit_s: float,
                threads: int, progress: bool, warm_start: Schedule | None, gap_limit: float | None,
                started: float) -> Result:
    """One build + solve + finalize at the activation budget minus ``reserve``."""
    from poet_compiler.solve.feasibility import explain_infeasible

    tight = dataclasses.replace(problem, ram_budget_bytes=problem.ram_budget_bytes - reserve)
    t0 = time.perf_counter()
    built = build(problem, formulation, budget=tight.activation_budget)
    build_s = time.perf_counter() - t0
    hint = warm_start_schedule(tight, warm_start)
    if hint is not None and formulation == "fast":
        hint = canonical(problem, hint)
    if hint is not None:
        built.hint_from(hint)
    large = sum(1 for k in built.model.kind if k == "bin") > LARGE_MODEL_BINARIES
    gap = (DEFAULT_GAP_LIMIT if large else 0.0) if gap_limit is None else float(gap_limit)
    remaining = max(0.5, time_limit_s - (time.perf_counter() - t0))
    opts = BackendOptions(time_limit_s=remaining, threads=threads, progress=progress, relative_gap=gap, large=large)
    out = solve_model(built.model, solver, opts)
    extra: dict[str, object] = {"model_" + k: v for k, v in out.stats.items() if isinstance(v, int)}
    extra.update(model_build_s=round(build_s, 3), backend_solve_s=round(out.solve_time_s, 3),
                 gap_limit=gap, warm_start_found=hint is not None)
    if out.status == "infeasible":
        if reserve:
            # Only the fragmentation reserve made it infeasible: report the arena problem.
            res = _empty(problem, "infeasible", solver, formulation, started,
                         f"arena: no schedule leaves room for the {reserve} bytes of fragmentation "
                         f"the arena planner needs within the activation budget {problem.activation_budget}")
            res.extra.update(extra)
            return res
        left = max(5.0, time_limit_s - (time.perf_counter() - t0))
        why = explain_infeasible(problem, time_limit_s=left, threads=threads)
        res = _empty(problem, "infeasible", solver, formulation, started, why.message)
        res.extra.update(extra, **why.extra)
        return res
    if out.values is None:
        if hint is not None:
            res = finalize(problem, hint, strategy=STRATEGY, status="feasible", solver=solver,
                           formulation=formulation, solve_time_s=time.perf_counter() - started,
                           message=f"{solver} found no schedule within {time_limit_s:g} s; this is the warm start")
            res.extra.update(extra)
            return res
        res = _empty(problem, "timeout", solver, formulation, started,
                     f"timeout: {solver} found no schedule within {time_limit_s:g} s ({out.message})")
        res.extra.update(extra)
        return res
    schedule = built.schedule(out.values)
    if out.status == "optimal":
        message = ""
    elif gap and out.objective is not None and out.bound is not None and \
            out.objective - out.bound <= gap * abs(out.objective) + 1e-12:
        message = f"stopped within the relative gap limit {gap:g}"
    else:
        message = f"stopped at the time limit ({time_limit_s:g} s)"
    res = finalize(problem, schedule, strategy=STRATEGY, status=out.status, solver=solver,
                   formulation=formulation, lower_bound_j=out.bound, solve_time_s=time.perf_counter() - started,
                   message=message)
    if res.lower_bound_j is not None and res.energy_j is not None and res.lower_bound_j > res.energy_j:
        # The bound of a proven optimum can exceed the simulated energy by float noise only.
        res.lower_bound_j = res.energy_j
        res.gap = 0.0
    if reserve and res.lower_bound_j is not None:
        # This bound holds for the reduced budget only; solve_milp replaces it by the
        # first attempt's (full budget), which bounds every schedule the user could get.
        res.extra["lower_bound_reduced_budget_j"] = res.lower_bound_j
        if res.status == "optimal":
            res.status = "feasible"
    res.extra.update(extra, solver_objective=out.objective)
    return res
