"""Warm starts: the known schedules that meet a problem's budgets, cheapest first.

The MILP (:mod:`.milp`) starts from the best and falls back on them; the infeasibility
analysis (:mod:`.feasibility`) uses them as quick upper bounds. Sources: a given schedule
and the heuristics of :mod:`.baselines`.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import NamedTuple

from poet_compiler import work
from poet_compiler.errors import InternalError, PoetError, ScheduleError, UpdateOrderError
from poet_compiler.schedule.from_program import schedule_from_program
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.baselines import BASELINES, HEURISTICS
from poet_compiler.solve.baselines._common import plans_only
from poet_compiler.solve.clock import step_until
from poet_compiler.solve.problem import Problem, feasible_energy


class Candidate(NamedTuple):
    """A known schedule that meets the budgets: its simulated energy and where it came
    from (a heuristic's name, or "given")."""

    energy_j: float
    name: str
    schedule: Schedule


#: The order the heuristics run in: quick ones first, so that the slow ones are the ones a
#: deadline cuts short. On gpt2_large (seq 512, 1,567 nodes, a72 50 %): checkpoint_all
#: 0.09 s, chen_sqrt_n 0.10, griewank and pofo 0.00, dtr 0.20, belady 0.55, chen_greedy
#: 2.6, capuchin 51.4. The order does not change which schedule wins (ties go by name).
QUICK_FIRST: tuple[str, ...] = ("checkpoint_all", "griewank", "pofo", "chen_sqrt_n", "dtr", "belady",
                                "chen_greedy", "capuchin")


def warm_start_candidates(problem: Problem, given: Schedule | None = None, *,
                          only: Collection[str] | None = None,
                          until: float | None = None) -> list[Candidate]:
    """The :class:`Candidate` of ``given`` and of every heuristic (or those named in
    ``only``) whose schedule is valid in the problem's mode and meets both budgets (live
    bytes; finalize judges the arena), cheapest first. No heuristic but checkpoint-all
    (well under a second on 1,500 nodes, and every solve's fallback) starts after the
    ``work.now()`` instant ``until`` or the meter's wall cap, and the iterative ones stop
    improving there."""
    found = _that_fit(problem, [("given", given)])
    # Every heuristic, so that no answer is above a baseline's. Their plans only: planning
    # each one's arena was most of their time (dtr: 7.0 s of 7.0 s on VGG16-CIFAR op level).
    names = [h for h in QUICK_FIRST if h in HEURISTICS] + [h for h in HEURISTICS if h not in QUICK_FIRST]
    with plans_only(), step_until(until):
        for name in names if only is None else [h for h in names if h in only]:
            if name != "checkpoint_all" and work.past(until):   # the instant, or the meter's wall cap
                break
            try:
                res = BASELINES[name](problem)
            except UpdateOrderError:  # a heuristic that recomputes a parameter's reader after its update
                continue
            except ScheduleError as exc:  # a heuristic's own plan broke a rule: a bug, not "no warm start"
                raise InternalError(f"{name}: {exc}") from exc
            except PoetError:  # not applicable here (e.g. a chain-only method on a DAG)
                continue
            schedule = res.schedule
            if schedule is None and res.program is not None:  # dtr emits a Program
                schedule = schedule_from_program(problem.graph, res.program, problem.mode,
                                                 dma=not problem.synchronous)
            # A baseline's own status may be "infeasible" for its arena only: judge live bytes here.
            found += _that_fit(problem, [(name, schedule)])
    found.sort(key=lambda c: (c.energy_j, c.name))
    return found


def refit(candidates: Collection[Candidate], problem: Problem, given: Schedule | None = None, *,
          rerun: Collection[str] = (), until: float | None = None) -> list[Candidate]:
    """A re-solve's warm starts, cheapest first: of ``candidates`` (made for another
    budget) and ``given``, those that meet ``problem``'s budgets, and the heuristics in
    ``rerun`` run again at its budget (as :func:`warm_start_candidates`). The reruns
    matter: on gpt2_large_mini dtr's plan at the lower budget fits without copies."""
    found = _that_fit(problem, [("given", given), *((c.name, c.schedule) for c in candidates)])
    if rerun:
        found += warm_start_candidates(problem, only=rerun, until=until)
    found.sort(key=lambda c: (c.energy_j, c.name))
    return found


def _that_fit(problem: Problem, named: list[tuple[str, Schedule | None]]) -> list[Candidate]:
    """The :class:`Candidate` of each given schedule that meets ``problem``'s budgets."""
    return [Candidate(e, name, s) for name, s in named
            if s is not None and (e := feasible_energy(problem, s)) is not None]
