"""Gurobi: the size-limited pip license gives a one-line SolverError (skipped without gurobipy)."""

from __future__ import annotations

import pytest

from poet_compiler.errors import SolverError
from poet_compiler.solve.backends.gurobi import size_limit_message
from poet_compiler.solve.formulation import build
from tests.support.graphs import random_problem


def test_size_limit_message_format() -> None:
    built = build(random_problem(0, 6, "poet"), "dense")
    msg = size_limit_message(built.model)
    size = max(built.model.n_vars, len(built.model.rows))
    assert msg == (f"gurobi: the pip license is limited to 2000 variables/constraints; this model has {size}; "
                   "install a full license or use --solver cpsat")


def test_gurobi_refuses_large_model_or_solves() -> None:
    gp = pytest.importorskip("gurobipy")
    from poet_compiler.solve.milp import solve_milp

    problem = random_problem(0, 24, "poet")
    try:
        res = solve_milp(problem, solver="gurobi", formulation="dense", time_limit_s=20)
    except SolverError as exc:
        assert "pip license is limited to 2000" in str(exc)
    else:  # a full license is installed
        assert res.status in ("optimal", "feasible")
    del gp
