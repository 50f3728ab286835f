"""Solver backends behind one interface: ``solve(model, options) -> BackendResult``.

- ``auto`` (default): CP-SAT (not a race against HiGHS: docs/optimizer.md, "Tried, not kept").
- ``cpsat``: OR-Tools CP-SAT, in a forked child; costs are scaled to integers (:mod:`.scaling`).
- ``highs``: HiGHS through highspy, in a child process — the OR-Tools wheel bundles its
  own HiGHS and the two native libraries cannot be loaded into one process.
- ``gurobi``: gurobipy when installed with a license.

Models built on CP-SAT's own API (intervals, no-overlap) go to
:func:`.native.solve_native` instead, with the same rule for every caller of when the
search stops (:mod:`.native`).
"""

from __future__ import annotations

from poet_compiler.errors import SolverError
from poet_compiler.solvers.base import BackendOptions, BackendResult
from poet_compiler.solvers.cpsat import solve_cpsat
from poet_compiler.solvers.gurobi import solve_gurobi
from poet_compiler.solvers.highs import solve_highs
from poet_compiler.solvers.model import LinearModel

SOLVERS = ("auto", "cpsat", "highs", "gurobi")


def solve_model(model: LinearModel, solver: str, options: BackendOptions) -> BackendResult:
    """Solve on one backend."""
    if solver in ("auto", "cpsat"):
        return solve_cpsat(model, options)
    if solver == "highs":
        return solve_highs(model, options)
    if solver == "gurobi":
        return solve_gurobi(model, options)
    raise SolverError(f"unknown solver {solver!r}; known: {', '.join(SOLVERS)}")


__all__ = ["SOLVERS", "BackendOptions", "BackendResult", "solve_model"]
