"""Solver-backed baselines: the MILP restricted to one mechanism.

* ``checkmate`` — the remat-only optimum (Checkmate, Jain et al. 2020): mode ``remat``.
* ``paging_only`` — the paging-only optimum: mode ``paging``.

Both call :func:`poet_compiler.solve.milp.solve_milp` on a copy of the problem in that
mode, with the solver settings of ``options`` (None: the MILP's defaults); the Result's
``strategy`` names the baseline. The mechanism defines the baseline, so it overrides a
problem mode that forbids it (e.g. ``checkmate`` under mode ``paging``), and the Result
records the mode.
"""

from __future__ import annotations

import dataclasses

from poet_compiler.solve import milp
from poet_compiler.solve.options import SolveOptions
from poet_compiler.solve.problem import Mode, Problem
from poet_compiler.solve.result import Result


def _solve_in_mode(problem: Problem, mode: Mode, strategy: str, options: SolveOptions | None) -> Result:
    o = options or SolveOptions()   # None: the MILP's defaults, which SolveOptions' are
    # The user's solver settings, --gap and progress included, but not --effort: these
    # baselines' effort is EFFORT_PER_LIMIT_S per second of the wall cap (as before the
    # effort rule of solve/options.py reached the other strategies).
    result = milp.solve_milp(dataclasses.replace(problem, mode=mode),
                             dataclasses.replace(o, effort=None, stated_limit_s=None))
    return dataclasses.replace(result, strategy=strategy)


def checkmate(problem: Problem, options: SolveOptions | None = None) -> Result:
    return _solve_in_mode(problem, "remat", "checkmate", options)


def paging_only(problem: Problem, options: SolveOptions | None = None) -> Result:
    return _solve_in_mode(problem, "paging", "paging_only", options)
