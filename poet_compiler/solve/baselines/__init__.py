"""Baseline heuristics: every published way to fit training into less RAM, same Result.

Each entry of :data:`BASELINES` (no solver) maps a :class:`~poet_compiler.solve.problem.Problem`
to a :class:`~poet_compiler.solve.result.Result` whose figures come from the independent
simulator (through :func:`poet_compiler.solve.finalize.finalize`). A heuristic that cannot
meet the budget or deadline returns status ``"infeasible"`` with a one-line reason (and its
best attempt's figures under ``notes.attempt``) — never an exception.

==================  ==================================================  ===============
name                what it does                                        modes
==================  ==================================================  ===============
checkpoint_all      compute once, free after last use (PyTorch)         all
chen_sqrt_n         sqrt(n) segments, recompute a segment in backward   poet, remat
chen_greedy         Chen's byte-budgeted greedy segments, best of grid  poet, remat
griewank            binomial checkpointing (revolve), chains only       poet, remat
capuchin            page longest idle tensors, then recompute by MSPS   all (by mode)
dtr                 online eviction by cost/(bytes*staleness)           poet, remat
belady              offline eviction by cost/(bytes*time to next use)   poet, remat
pofo                keep/offload/recompute DP for chains                all (by mode)
checkmate           MILP optimum with recomputation only                (mode remat)
paging_only         MILP optimum with paging only                       (mode paging)
==================  ==================================================  ===============

``checkmate`` and ``paging_only`` (:mod:`.optimal`) call the MILP, which warm-starts from
the heuristics here, so they are registered in :data:`poet_compiler.solve.strategies.STRATEGIES`,
not in this package's table.
"""

from __future__ import annotations

from collections.abc import Callable

from poet_compiler.solve.baselines.belady import belady
from poet_compiler.solve.baselines.capuchin import capuchin
from poet_compiler.solve.baselines.chen import chen_greedy, chen_sqrt_n
from poet_compiler.solve.baselines.dtr import dtr
from poet_compiler.solve.baselines.griewank import griewank
from poet_compiler.solve.baselines.keep_all import checkpoint_all
from poet_compiler.solve.baselines.pofo import pofo
from poet_compiler.solve.problem import Problem
from poet_compiler.solve.result import Result

BASELINES: dict[str, Callable[[Problem], Result]] = {
    "checkpoint_all": checkpoint_all,
    "chen_sqrt_n": chen_sqrt_n,
    "chen_greedy": chen_greedy,
    "griewank": griewank,
    "capuchin": capuchin,
    "dtr": dtr,
    "belady": belady,
    "pofo": pofo,
}

#: The heuristics (no solver needed), e.g. for warm starts and quick comparisons.
HEURISTICS: tuple[str, ...] = tuple(BASELINES)

__all__ = ["BASELINES", "HEURISTICS"]
