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


def test_a_good_enough_answer_sent_before_the_child_dies_is_the_answer(monkeypatch) -> None:
    """The outside bound proves a solution good enough: the child sends it as its result
    before stopping the search, so a stop that aborts the process (OR-Tools does, at
    times that depend on the machine) changes nothing of the answer."""
    problem = training_problem(2, 3, "poet", slack=0.3)
    built = build_fast(problem)

    real_solve = cpsat.solve_cpsat_here

    def solve_then_abort(model, options, *, on_solution=None, **kwargs):  # noqa: ANN001, ANN003
        real = real_solve(model, options, **kwargs)
        on_solution(real.objective, real.values)      # as the solution callback does
        kwargs["on_good_enough"](real)                 # the answer, then the stop...
        time.sleep(0.5)
        os.abort()                                     # ...which aborts the child

    monkeypatch.setattr(cpsat, "solve_cpsat_here", solve_then_abort)
    out = solve_model(built.model, "cpsat", BackendOptions(time_limit_s=10))
    assert out.status in ("optimal", "feasible") and out.values is not None
    assert out.message == ""


def test_a_floor_met_by_a_solution_ends_the_search_with_that_solution() -> None:
    """The real callback path, not a stand-in: a floor equal to the optimum makes the first
    optimal solution good enough. Its values come back as the answer (the callback once
    sliced the proto's repeated field, which ortools 9.15 refuses: the child died and the
    stage fell back to no schedule)."""
    problem = training_problem(2, 3, "poet", slack=0.3)
    built = build_fast(problem)
    optimum = solve_model(built.model, "cpsat", BackendOptions(time_limit_s=10))
    assert optimum.status == "optimal" and optimum.objective is not None
    built.model.objective_floor = optimum.objective
    out = solve_model(built.model, "cpsat", BackendOptions(time_limit_s=10))
    assert "failure" not in out.message, out.message
    assert out.values is not None and out.objective == pytest.approx(optimum.objective)
