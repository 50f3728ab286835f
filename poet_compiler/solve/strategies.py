"""The strategy registry: every way poetc can produce a schedule, by name.

``optimal`` is the MILP (POET's formulation) in the problem's mode; the others are the
heuristics of :mod:`poet_compiler.solve.baselines` and the MILP restricted to one mechanism
(:mod:`poet_compiler.solve.baselines.optimal`): :data:`STRATEGIES` is the one table. All return a :class:`Result` whose
figures come from the simulator, so they can be compared side by side.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from poet_compiler.errors import PoetError
from poet_compiler.solve import baselines, milp
from poet_compiler.solve.baselines.optimal import checkmate, paging_only
from poet_compiler.solve.problem import Problem
from poet_compiler.solve.result import Result


@dataclass(frozen=True)
class SolveOptions:
    solver: str = "auto"
    formulation: str = "fast"
    time_limit_s: float = 60.0
    threads: int = 2
    progress: bool = False
    # Stop once within this relative gap of the bound (None: 0.1 % on large graphs, 0 on small).
    gap_limit: float | None = None


def _optimal(problem: Problem, opts: SolveOptions) -> Result:
    return milp.solve_milp(
        problem,
        solver=opts.solver,
        formulation=opts.formulation,
        time_limit_s=opts.time_limit_s,
        threads=opts.threads,
        progress=opts.progress,
        gap_limit=opts.gap_limit,
    )


#: Every baseline, Problem -> Result: the heuristics, then the MILP in one mechanism's mode.
BASELINES: dict[str, Callable[[Problem], Result]] = {
    **baselines.BASELINES,
    "checkmate": checkmate,
    "paging_only": paging_only,
}


def strategy_names() -> list[str]:
    return ["optimal", *sorted(BASELINES)]


def get_strategy(name: str) -> Callable[[Problem, SolveOptions], Result]:
    if name == "optimal":
        return _optimal
    if name not in BASELINES:
        raise PoetError(f"unknown strategy {name!r}; known: {', '.join(strategy_names())}")
    fn = BASELINES[name]

    def run(problem: Problem, opts: SolveOptions) -> Result:
        # Baselines take only a Problem; the MILP-backed ones (checkmate, paging_only)
        # read the solver options from problem.options.
        options = {**problem.options, **dataclasses.asdict(opts)}
        return fn(dataclasses.replace(problem, options=options))

    return run


def run_strategy(name: str, problem: Problem, opts: SolveOptions | None = None) -> Result:
    return get_strategy(name)(problem, opts or SolveOptions())


#: Every strategy by name: ``optimal`` and every baseline (the one registry).
STRATEGIES: dict[str, Callable[[Problem, SolveOptions], Result]] = {
    name: get_strategy(name) for name in strategy_names()
}
