"""Solver-backed baselines: the MILP restricted to one mechanism.

* ``checkmate`` — the remat-only optimum (Checkmate, Jain et al. 2020): mode ``remat``.
* ``paging_only`` — the paging-only optimum: mode ``paging``.

Both call :func:`poet_compiler.solve.milp.solve_milp` with the solver options of
``problem.options``, on a copy of the problem whose mode is
replaced; the Result's ``strategy`` names the baseline. If the problem's own mode forbids
the mechanism (e.g. ``checkmate`` asked under mode ``paging``), the mechanism is still
what defines the baseline, so the mode is overridden and the Result records it.
"""

from __future__ import annotations

import dataclasses

from poet_compiler.solve import milp
from poet_compiler.solve.problem import Problem
from poet_compiler.solve.result import Result


def _solve_in_mode(problem: Problem, mode: str, strategy: str) -> Result:
    opts = problem.options
    # Every SolveOptions field solve_milp takes, --gap and progress included.
    kwargs = {k: opts[k] for k in ("solver", "formulation", "time_limit_s", "threads", "progress", "gap_limit")
              if k in opts}
    result = milp.solve_milp(dataclasses.replace(problem, mode=mode), **kwargs)  # type: ignore[arg-type]
    result.strategy = strategy
    return result


def checkmate(problem: Problem) -> Result:
    return _solve_in_mode(problem, "remat", "checkmate")


def paging_only(problem: Problem) -> Result:
    return _solve_in_mode(problem, "paging", "paging_only")
