"""OR-Tools CP-SAT backend: integer-scaled model (:mod:`.scaling`), hints, progress line."""

from __future__ import annotations

import math
import time
from typing import Callable

from poet_compiler.solve.backends.base import (
    BackendOptions,
    BackendResult,
    ProgressLine,
    within_gap,
)
from poet_compiler.solve.backends.scaling import scale_model
from poet_compiler.solve.formulation.model import LinearModel

# Deterministic time units per second of the time limit: ~0.85 per wall second on the
# project's 2-core machines in interleaved mode, so the wall limit is rarely what stops it.
DTIME_PER_S = 0.75


def solve_cpsat(model: LinearModel, options: BackendOptions, *,
                on_solver: Callable[[object], None] | None = None,
                on_progress: Callable[[float | None, float | None], None] | None = None) -> BackendResult:
    """Solve on CP-SAT. ``on_solver`` receives the ``CpSolver`` before the search starts
    (a racing caller may ``stop_search()`` it from another thread); ``on_progress``
    receives (incumbent, valid lower bound) in physical units as they improve."""
    from ortools.sat.python import cp_model

    started = time.perf_counter()
    sc = scale_model(model)
    cp = cp_model.CpModel()
    xs = []
    for v in range(model.n_vars):
        if model.kind[v] == "bin":
            x = cp.new_bool_var(model.names[v])
            if sc.lb[v] == sc.ub[v]:
                cp.add(x == sc.lb[v])
        else:
            x = cp.new_int_var(sc.lb[v], sc.ub[v], model.names[v])
        xs.append(x)
    for terms, lo, hi in sc.rows:
        expr = sum(c * xs[v] for v, c in terms.items())
        if lo is not None and hi is not None and lo == hi:
            cp.add(expr == lo)
        else:
            if lo is not None:
                cp.add(expr >= lo)
            if hi is not None:
                cp.add(expr <= hi)
    if sc.objective:
        cp.minimize(sum(c * xs[v] for v, c in sorted(sc.objective.items())))
    for v, val in sorted(model.hint.items()):
        cp.add_hint(xs[v], int(round(val)))

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, float(options.time_limit_s))
    solver.parameters.num_workers = max(1, int(options.threads))
    solver.parameters.random_seed = options.seed
    if options.deterministic:
        # Interleaved search is deterministic for any number of workers; stopping it on
        # deterministic time (not wall time) makes the answer reproducible. The wall limit
        # stays as a cap: on a machine too loaded to reach the deterministic limit in time
        # the answer can differ. Measured on ResNet-18-CIFAR at 30 %: same schedule twice,
        # and a better one (108.2 J) than the portfolio search in the same time (109.5 J).
        solver.parameters.interleave_search = True
        solver.parameters.max_deterministic_time = max(0.01, DTIME_PER_S * float(options.time_limit_s))
    solver.parameters.relative_gap_limit = max(0.0, float(options.relative_gap))
    if options.large:
        # Measured on ResNet-18 (132 nodes, ~70k binaries): the default presolve loops
        # take ~29 s; one iteration without probing keeps the model nearly as small.
        solver.parameters.max_presolve_iterations = 1
        solver.parameters.cp_model_probing_level = 0
        solver.parameters.linearization_level = 2
    unit = model.objective_unit
    line = ProgressLine("cpsat", unit, options.progress)

    def to_phys(x: float) -> float:
        return x * sc.obj_unit

    def valid_bound(b: float) -> float:
        # Integer objective: round the bound up, then subtract the cost rounding.
        return (math.ceil(b - 1e-9) - sc.obj_err) * sc.obj_unit

    floor = model.objective_floor

    class _Callback(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self) -> None:
            inc = to_phys(self.ObjectiveValue())
            line.update(inc, max(to_phys(self.BestObjectiveBound()), floor or -math.inf), force=True)
            if on_progress is not None:
                on_progress(inc, max(valid_bound(self.BestObjectiveBound()), floor or -math.inf))
            # The outside bound proves the incumbent good enough: stop (an added row
            # "objective >= floor" would slow the search and CP-SAT's bound ignores it).
            if floor is not None and within_gap(inc, floor, max(options.relative_gap, 1e-12)):
                self.stop_search()

    def on_bound(b: float) -> None:
        line.update(bound=to_phys(b))
        if on_progress is not None:
            on_progress(None, valid_bound(b))

    if on_solver is not None:
        on_solver(solver)
    if options.progress or on_progress is not None or floor is not None:
        solver.best_bound_callback = on_bound
        status = solver.solve(cp, _Callback())
    else:
        status = solver.solve(cp)
    line.close()
    elapsed = time.perf_counter() - started
    stats = {"u_t": sc.u_t, "u_e": sc.u_e, "objective_rounding": sc.obj_err * sc.obj_unit, **model.stats()}
    if status == cp_model.INFEASIBLE:
        return BackendResult("infeasible", None, None, None, elapsed, "cpsat", "proven infeasible", stats)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        msg = "model invalid" if status == cp_model.MODEL_INVALID else "no solution within the time limit"
        if status == cp_model.MODEL_INVALID:
            msg += ": " + cp.validate()
        return BackendResult("timeout", None, None, None, elapsed, "cpsat", msg, stats)
    values = [float(solver.value(x)) for x in xs]
    obj = solver.objective_value if sc.objective else 0.0
    bound = solver.best_objective_bound if sc.objective else 0.0
    # Integer objective: the bound can be rounded up before undoing the scaling; then
    # subtract the cost rounding so it bounds the real objective.
    phys_bound = valid_bound(bound)
    if floor is not None:
        phys_bound = max(phys_bound, floor)
    # OPTIMAL also means "within relative_gap_limit": only a closed gap is optimal.
    closed = sc.objective == {} or math.ceil(bound - 1e-9) >= round(obj) or \
        (floor is not None and obj * sc.obj_unit <= floor * (1 + 1e-12))
    st = "optimal" if status == cp_model.OPTIMAL and closed else "feasible"
    return BackendResult(st, values, obj * sc.obj_unit, phys_bound, elapsed, "cpsat", "", stats)
