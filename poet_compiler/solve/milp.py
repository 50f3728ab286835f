"""``solve_milp``: Problem -> optimal (or best found) schedule -> simulated Result.

Builds a formulation (:mod:`.formulation`), warm-starts it from a heuristic, solves it on
a backend (:mod:`.backends`), reads the schedule back and hands it to
:func:`~poet_compiler.solve.finalize.finalize`, which re-simulates every figure. Status:
``optimal`` only when the solver proved it, ``feasible`` with a gap from the solver's
bound, ``timeout`` when no schedule was found in time, ``infeasible`` when proven so —
then with the smallest RAM / deadline that would work (:mod:`.feasibility`).
"""

from __future__ import annotations

import time

from poet_compiler.errors import PoetError, ScheduleError, SolverError
from poet_compiler.schedule.linearize import linearize
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.schedule.simulate import simulate
from poet_compiler.solve.backends import SOLVERS, BackendOptions, solve_model
from poet_compiler.solve.finalize import finalize
from poet_compiler.solve.formulation import FORMULATIONS, build
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


def solve_milp(
    problem: Problem,
    *,
    solver: str = "cpsat",
    formulation: str = "fast",
    time_limit_s: float = 60.0,
    threads: int = 2,
    progress: bool = False,
    warm_start: Schedule | None = None,
) -> Result:
    """Solve ``problem`` to (proven) optimality or the time limit; see the module docstring."""
    if solver not in SOLVERS:
        raise SolverError(f"unknown solver {solver!r}; known: {', '.join(SOLVERS)}")
    if formulation not in FORMULATIONS:
        raise PoetError(f"unknown formulation {formulation!r}; known: {', '.join(FORMULATIONS)}")
    started = time.perf_counter()
    from poet_compiler.solve.feasibility import explain_infeasible, quick_infeasibility

    quick = quick_infeasibility(problem)
    if quick is not None:
        res = _empty(problem, "infeasible", solver, formulation, started, quick.message)
        res.extra.update(quick.extra)
        return res
    built = build(problem, formulation)
    hint = warm_start_schedule(problem, warm_start)
    if hint is not None:
        built.hint_from(hint)
    opts = BackendOptions(time_limit_s=time_limit_s, threads=threads, progress=progress)
    out = solve_model(built.model, solver, opts)
    extra = {"model_" + k: v for k, v in out.stats.items() if isinstance(v, int)}
    if out.status == "infeasible":
        remaining = max(5.0, time_limit_s - (time.perf_counter() - started))
        why = explain_infeasible(problem, time_limit_s=remaining, threads=threads)
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
    bound = out.bound
    message = "" if out.status == "optimal" else f"stopped at the time limit ({time_limit_s:g} s)"
    res = finalize(problem, schedule, strategy=STRATEGY, status=out.status, solver=solver,
                   formulation=formulation, lower_bound_j=bound, solve_time_s=time.perf_counter() - started,
                   message=message)
    if res.lower_bound_j is not None and res.energy_j is not None and res.lower_bound_j > res.energy_j:
        # The bound of a proven optimum can exceed the simulated energy by float noise only.
        res.lower_bound_j = res.energy_j
        res.gap = 0.0
    res.extra.update(extra, solver_objective=out.objective)
    return res
