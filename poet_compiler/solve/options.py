"""The solver settings a user gives (``--solver``, ``--formulation``, ``--time-limit``,
``--threads``, progress, ``--gap``), passed explicitly to the strategies that reach the
MILP: ``optimal`` (:mod:`poet_compiler.solve.strategies`) and the solver-backed baselines
``checkmate`` and ``paging_only`` (:mod:`poet_compiler.solve.baselines.optimal`). A
:class:`~poet_compiler.solve.problem.Problem` holds the scheduling question only."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SolveOptions:
    solver: str = "auto"
    formulation: str = "fast"
    time_limit_s: float = 60.0
    threads: int = 2
    progress: bool = False
    # Stop once within this relative gap of the bound (None: 0.1 % on large graphs, 0 on small).
    gap_limit: float | None = None
