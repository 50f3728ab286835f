"""Gurobi backend (gurobipy, optional). The pip wheel's size-limited license refuses
models above 2000 variables or constraints: that becomes a one-line SolverError."""

from __future__ import annotations

import math
import time

from poet_compiler.errors import SolverError
from poet_compiler.solvers.base import (
    BackendOptions,
    BackendResult,
    BackendStatus,
    ProgressLine,
)
from poet_compiler.solvers.model import LinearModel

SIZE_LIMIT = 2000


def size_limit_message(model: LinearModel) -> str:
    size = max(model.n_vars, len(model.rows))
    return (f"gurobi: the pip license is limited to {SIZE_LIMIT} variables/constraints; this model has "
            f"{size}; install a full license or use --solver cpsat")


def solve_gurobi(model: LinearModel, options: BackendOptions) -> BackendResult:
    try:
        import gurobipy as gp  # optional (the gurobi extra): imported when asked for
        from gurobipy import GRB  # (same)
    except ImportError as exc:
        raise SolverError("gurobi: gurobipy is not installed (pip install gurobipy, plus a license); "
                          "use --solver cpsat") from exc
    started = time.perf_counter()
    line = ProgressLine("gurobi", model.objective_unit, options.progress, every_s=1.0)
    try:
        env = gp.Env(empty=True)
        env.setParam("OutputFlag", 0)
        env.start()
        m = gp.Model(env=env)
        m.Params.TimeLimit = float(options.time_limit_s)
        m.Params.Threads = int(options.threads)
        m.Params.MIPGap = 1e-9 if options.floor_only else max(1e-9, float(options.relative_gap))
        m.Params.Seed = int(options.seed)
        vtype = {"bin": GRB.BINARY}
        xs = [m.addVar(lb=model.lb[v], ub=model.ub[v], vtype=vtype.get(model.kind[v], GRB.CONTINUOUS))
              for v in range(model.n_vars)]
        for r in model.rows:
            expr = gp.LinExpr([c for c in r.terms.values()], [xs[v] for v in r.terms])
            if math.isfinite(r.lo) and math.isfinite(r.hi) and r.lo == r.hi:
                m.addLConstr(expr, GRB.EQUAL, r.lo)
            else:
                if math.isfinite(r.lo):
                    m.addLConstr(expr, GRB.GREATER_EQUAL, r.lo)
                if math.isfinite(r.hi):
                    m.addLConstr(expr, GRB.LESS_EQUAL, r.hi)
        objective = gp.LinExpr(list(model.objective.values()), [xs[v] for v in model.objective])
        if model.objective_floor is not None and model.objective:
            m.addLConstr(objective, GRB.GREATER_EQUAL, model.objective_floor - 1e-9 * abs(model.objective_floor))
        m.setObjective(objective, GRB.MINIMIZE)
        for v, val in model.hint.items():
            xs[v].Start = val

        def cb(mod, where):  # noqa: ANN001
            if where == GRB.Callback.MIP:
                line.update(mod.cbGet(GRB.Callback.MIP_OBJBST), mod.cbGet(GRB.Callback.MIP_OBJBND))

        m.optimize(cb if options.progress else None)
    except gp.GurobiError as exc:
        if getattr(exc, "errno", None) == 10010 or "size-limited" in str(exc):
            raise SolverError(size_limit_message(model)) from exc
        raise SolverError(f"gurobi: {exc}") from exc
    finally:
        line.close()
    elapsed = time.perf_counter() - started
    stats = dict(model.stats())
    if m.Status in (GRB.INFEASIBLE, GRB.INF_OR_UNBD):
        return BackendResult("infeasible", None, None, None, elapsed, "gurobi", "proven infeasible", stats)
    if m.SolCount == 0:
        return BackendResult("timeout", None, None, None, elapsed, "gurobi", "no solution within its limit", stats)
    values = [x.X for x in xs]
    st: BackendStatus = "optimal" if m.Status == GRB.OPTIMAL else "feasible"
    return BackendResult(st, values, m.ObjVal, m.ObjBound, elapsed, "gurobi", "", stats)
