"""The solver settings a user gives (``--solver``, ``--formulation``, ``--time-limit``,
``--effort``, ``--threads``, progress, ``--gap``, ``--memory-limit``), passed explicitly to
the strategies that reach the MILP: ``optimal`` (:mod:`poet_compiler.solve.strategies`) and the solver-backed baselines
``checkmate`` and ``paging_only`` (:mod:`poet_compiler.solve.baselines.optimal`). A
:class:`~poet_compiler.solve.problem.Problem` holds the scheduling question only."""

from __future__ import annotations

from dataclasses import dataclass

# The default --memory-limit: within the 4 GB target for a 1,500-node graph (4 GB,
# read as 10^9 bytes: 3.6 GiB is 3.87 GB, and the watch stops a solver within 2 % of the
# limit), and what a laptop can give a compile beside everything else. At 4 GiB
# gpt2_large measured 4,068 MiB (4.27 GB). Only the gpt2_large models reach it.
DEFAULT_MEMORY_LIMIT = int(3.6 * 2**30)


@dataclass(frozen=True)
class SolveOptions:
    solver: str = "auto"
    formulation: str = "fast"
    time_limit_s: float = 60.0
    # The user's --time-limit when ``time_limit_s`` is what tracing and costing left of
    # it (messages name the user's limit); None: the same as ``time_limit_s``.
    stated_limit_s: float | None = None
    threads: int = 2
    # --effort: a preset name (quick | default | thorough) or deterministic seconds; None:
    # the default preset, or less where the stated time limit would not hold it.
    effort: float | str | None = None
    progress: bool = False
    # Stop once within this relative gap of the bound (None: 0.1 % on large graphs, 0 on small).
    gap_limit: float | None = None
    # poetc's memory, itself and its solver processes, at which a solver process is
    # stopped (its latest solution kept): solve/backends/memory.py. None: no limit.
    memory_limit_bytes: int | None = DEFAULT_MEMORY_LIMIT
