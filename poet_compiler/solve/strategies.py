"""The strategy registry: every way poetc can produce a schedule, by name.

``optimal`` is the MILP (POET's formulation) in the problem's mode; the others are the
heuristics of :mod:`poet_compiler.solve.baselines` and the MILP restricted to one mechanism
(:mod:`poet_compiler.solve.baselines.optimal`): :data:`STRATEGIES` is the one table. All return a :class:`Result` whose
figures come from the simulator, so they can be compared side by side.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

from poet_compiler import work
from poet_compiler.errors import PoetError, UpdateOrderError
from poet_compiler.solve import baselines, milp
from poet_compiler.solve.baselines._common import infeasible
from poet_compiler.solve.baselines.optimal import checkmate, paging_only
from poet_compiler.solve.clock import step_until
from poet_compiler.solve.options import SolveOptions
from poet_compiler.solve.problem import Problem
from poet_compiler.solve.result import Result
from poet_compiler.solvers.memory import memory_limit


def _optimal(problem: Problem, opts: SolveOptions) -> Result:
    return milp.solve_milp(problem, opts)


#: The baselines that reach the MILP, (Problem, SolveOptions) -> Result: its optimum in
#: one mechanism's mode, under the user's solver settings.
SOLVER_BASELINES: dict[str, Callable[[Problem, SolveOptions | None], Result]] = {
    "checkmate": checkmate,
    "paging_only": paging_only,
}

#: Every baseline, Problem -> Result: the heuristics, then the MILP in one mechanism's mode
#: (with the MILP's default settings).
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
    if name in SOLVER_BASELINES:
        return SOLVER_BASELINES[name]   # the solver settings go to the MILP
    fn = BASELINES[name]

    def run(problem: Problem, opts: SolveOptions) -> Result:
        started = time.perf_counter()
        try:
            # Metered, so that CP-SAT inside (the arena's exact packing) stops on its
            # deterministic limit, its wall allowance the time limit: on its own wall net a
            # loaded machine gave belady's DAG 100 at 70 % other .poet bytes.
            # Within step_until, the steps that poll it (capuchin's and chen_greedy's, each
            # a whole-plan replay: capuchin took 51 s on gpt2_large) stop at the wall cap too.
            with work.metered(work.Meter(wall_at=started + opts.time_limit_s)) as meter, step_until(math.inf):
                result = fn(problem)   # a heuristic: no solver settings
            return dataclasses.replace(result, notes=result.notes.set(stopped_by="time")) if meter.time_hit else result
        except UpdateOrderError as exc:
            return infeasible(problem, name, f"{name} recomputes a node that reads a parameter after its optimizer "
                              f"update, which it does not model ({exc})", started=started)

    return run


def run_strategy(name: str, problem: Problem, opts: SolveOptions | None = None) -> Result:
    """Run strategy ``name`` on ``problem``, its solver processes held to the options'
    memory limit (:mod:`poet_compiler.solvers.memory`)."""
    opts = opts or SolveOptions()
    with memory_limit(opts.memory_limit_bytes) as seen:
        result = get_strategy(name)(problem, opts)
    notes, message = result.notes, result.message
    if opts.memory_limit_bytes is not None:
        notes = notes.set(memory_limit_mb=opts.memory_limit_bytes // 2**20)
    if seen.peak_bytes:
        notes = notes.set(memory_peak_mb=round(seen.peak_bytes / 2**20))
    stops = seen.stops
    if stops:
        notes = notes.set(memory_stops=len(stops))
        note = f"{stops[-1]} ({len(stops)} solver process(es) stopped)"
        message = f"{message}; {note}" if message else note
    return dataclasses.replace(result, notes=notes, message=message)


#: Every strategy by name: ``optimal`` and every baseline (the one registry).
STRATEGIES: dict[str, Callable[[Problem, SolveOptions], Result]] = {
    name: get_strategy(name) for name in strategy_names()
}
