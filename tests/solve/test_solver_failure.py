"""A solver that dies is a status with a message, never the end of poetc.

CP-SAT runs in a forked child (solvers/cpsat.py). These tests make the child
abort, as OR-Tools 9.15 did on POET's `linear` graph, and check what the parent makes
of it.
"""

from __future__ import annotations

import os
import time

import pytest

from poet_compiler.solve.formulation.fast import build_fast
from poet_compiler.solve.milp import solve_milp
from poet_compiler.solve.options import SolveOptions
from poet_compiler.solvers import BackendOptions, cpsat, solve_model
from tests.support.graphs import training_problem


def _abort(*args, **kwargs):  # noqa: ANN002, ANN003
    os.abort()      # what a failed CHECK inside OR-Tools does to the process


def test_an_aborting_cpsat_is_a_timeout_status(monkeypatch) -> None:
    problem = training_problem(1, 3, "poet")
    monkeypatch.setattr(cpsat, "solve_cpsat_here", _abort)
    out = solve_model(build_fast(problem).model, "cpsat", BackendOptions(time_limit_s=10))
    assert out.status == "timeout" and out.values is None
    assert "solver failure" in out.message and "died" in out.message


def test_an_aborting_cpsat_leaves_the_heuristics_answer(monkeypatch) -> None:
    problem = training_problem(1, 3, "remat", slack=0.3)
    monkeypatch.setattr(cpsat, "solve_cpsat_here", _abort)
    res = solve_milp(problem, SolveOptions(solver="cpsat", time_limit_s=20))
    # The process lives on and answers with the best heuristic schedule (which the
    # eviction-cover bound may still prove optimal: it does not need the MILP).
    assert res.ok and res.energy_j is not None
    assert res.notes.solver_used == "warm start"
    assert res.status != "optimal" or res.lower_bound_j <= res.energy_j * (1 + 1e-9)


def test_a_solution_sent_before_the_child_dies_is_kept(monkeypatch) -> None:
    """The wall cap asks the child to stop: it sends its latest solution first, so a stop
    that aborts the process (OR-Tools does, at times that depend on the machine) keeps
    that solution."""
    problem = training_problem(2, 3, "poet", slack=0.3)
    built = build_fast(problem)

    real_solve = cpsat.solve_cpsat_here

    def solve_then_abort_when_stopped(model, options, *, on_solution=None, on_solver=None):  # noqa: ANN001
        real = real_solve(model, options)
        on_solution(real.objective, real.values)      # as the solution callback does

        class Solver:
            def stop_search(self) -> None:
                os.abort()                             # stopping aborts the child

        on_solver(Solver())
        time.sleep(30.0)                               # a search that outlives its wall allowance

    monkeypatch.setattr(cpsat, "solve_cpsat_here", solve_then_abort_when_stopped)
    out = solve_model(built.model, "cpsat", BackendOptions(time_limit_s=0.5))
    assert out.status == "feasible" and out.values is not None
    assert "its last solution is kept" in out.message


def test_a_floor_met_by_a_solution_is_its_bound() -> None:
    """The real solution callback, not a stand-in: a floor equal to the optimum. The search
    ends on CP-SAT's own terms with the optimum's values, the floor as its bound (the
    callback once sliced the proto's repeated field, which ortools 9.15 refuses: the child
    died and the stage fell back to no schedule)."""
    problem = training_problem(2, 3, "poet", slack=0.3)
    built = build_fast(problem)
    optimum = solve_model(built.model, "cpsat", BackendOptions(time_limit_s=10))
    assert optimum.status == "optimal" and optimum.objective is not None
    built.model.objective_floor = optimum.objective
    out = solve_model(built.model, "cpsat", BackendOptions(time_limit_s=10))
    assert "failure" not in out.message, out.message
    assert out.values is not None and out.objective == pytest.approx(optimum.objective)
    assert out.status == "optimal" and out.bound == pytest.approx(optimum.objective)
