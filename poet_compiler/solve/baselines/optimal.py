"""Solver-backed baselines: the MILP restricted to one mechanism.

* ``checkmate`` — the remat-only optimum (Checkmate, Jain et al. 2020): mode ``remat``.
* ``paging_only`` — the paging-only optimum: mode ``paging``.

Both call :func:`poet_compiler.solve.milp.solve_milp` with the solver settings given as
``options`` (:class:`~poet_compiler.solve.options.SolveOptions`; None: the MILP's
defaults), on a copy of the problem whose mode is
replaced; the Result's ``strategy`` names the baseline. If the problem's own mode forbids
the mechanism (e.g. ``checkmate`` asked under mode ``paging``), the mechanism is still
what defines the baseline, so the mode is overridden and the Result records it.
"""

from __future__ import annotations

import dataclasses

from poet_compiler.solve import milp
from poet_compiler.solve.options import SolveOptions
from poet_compiler.solve.problem import Mode, Problem
from poet_compiler.solve.result import Result


def _solve_in_mode(problem: Problem, mode: Mode, strategy: str, options: SolveOptions | None) -> Result:
    restricted = dataclasses.replace(problem, mode=mode)
    if options is None:
        result = milp.solve_milp(restricted)
    else:
        # Every SolveOptions field solve_milp takes, --gap and progress included.
        result = milp.solve_milp(restricted, solver=options.solver, formulation=options.formulation,
                                 time_limit_s=options.time_limit_s, threads=options.threads,
                                 progress=options.progress, gap_limit=options.gap_limit)
    result.strategy = strategy
    return result


def checkmate(problem: Problem, options: SolveOptions | None = None) -> Result:
    return _solve_in_mode(problem, "remat", "checkmate", options)


def paging_only(problem: Problem, options: SolveOptions | None = None) -> Result:
    return _solve_in_mode(problem, "paging", "paging_only", options)
