"""What every stage of ``strategy="optimal"`` is given: the :class:`Context`.

A frozen value: the problem (of the program family being searched, at the user's
budget), the user's :class:`~poet_compiler.solve.options.SolveOptions` (whole), the
:class:`~poet_compiler.solve.tuning.Tuning`, the :class:`~poet_compiler.solve.clock.Clock`
(the deadline of the effort in work units, :mod:`poet_compiler.work`, and where the work
went: the one mutable part, a recorder) and the :class:`Steps` it calls. A stage takes
it and returns a frozen outcome; a test passes its own Tuning or Steps instead of
patching a module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from poet_compiler import work
from poet_compiler.schedule.program import Program
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.clock import Clock
from poet_compiler.solve.finalize import Finalized
from poet_compiler.solve.options import DEFAULT_GAP_LIMIT, SolveOptions, effort_units
from poet_compiler.solve.problem import Problem
from poet_compiler.solve.tuning import TUNING, Tuning

STRATEGY = "optimal"


@dataclass(frozen=True)
class Steps:
    """The calls of the stages that a test or ``bench/ablation.py`` may replace, each by a
    function of the same signature: the heuristics' warm starts, a cover solve, the
    cover's realization as a schedule, the guided search, the guided sub-problems' and
    the full model's solver calls, the full model by rounds, finalize, and the
    infeasibility analysis. The real ones are :data:`~.steps.STEPS` (defined above the
    stages they call, which take a Context); a test replaces some of them with
    ``dataclasses.replace(STEPS, solve_full=...)``."""

    warm_starts: Callable[..., Any]
    cover_bound: Callable[..., Any]
    realize_cover: Callable[..., Any]
    guided_search: Callable[..., Any]
    solve_guided: Callable[..., Any]
    solve_by_rows: Callable[..., Any]
    solve_full: Callable[..., Any]
    finalize: Callable[..., Finalized]
    explain_infeasible: Callable[..., Any]


@dataclass(frozen=True)
class Context:
    """What a stage is given (module docstring)."""

    problem: Problem
    options: SolveOptions
    clock: Clock
    steps: Steps
    tuning: Tuning = TUNING

    @classmethod
    def start(cls, problem: Problem, options: SolveOptions | None = None, *, steps: Steps,
              tuning: Tuning = TUNING) -> Context:
        """A context with a fresh clock of the options' effort (inside the caller's meter)."""
        options = options or SolveOptions()
        stated = options.time_limit_s if options.stated_limit_s is None else options.stated_limit_s
        return cls(problem, options, Clock(effort_units(options.effort, stated)), steps, tuning)

    def of(self, problem: Problem) -> Context:
        """This context for ``problem`` (the other program family)."""
        return dataclasses.replace(self, problem=problem)

    @property
    def small(self) -> bool:
        return self.tuning.small(self.problem.n)

    @property
    def gap(self) -> float:
        """The relative gap limit in force: the user's, else 0 on a small graph and
        DEFAULT_GAP_LIMIT on a larger one."""
        if self.options.gap_limit is not None:
            return float(self.options.gap_limit)
        return 0.0 if self.small else DEFAULT_GAP_LIMIT

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Charge the block's work and wall seconds to stage ``name`` (Clock.stage)."""
        with self.clock.stage(name):
            yield

    def left(self, reserve_s: float = 0.0) -> float:
        return self.clock.left(reserve_s)

    def finalize(self, plan: Schedule | Program, *, arena_time_s: float | None, fence_last: bool = False) -> Finalized:
        """Finalize ``plan`` for the family's problem (the user's budget)."""
        return self.steps.finalize(self.problem, plan, strategy=STRATEGY, arena_time_s=arena_time_s,
                                   fence_last=fence_last, tuning=self.tuning)

    def effort_text(self) -> str:
        """What ended the search as a message names it: "30 deterministic s of effort", or
        "the time limit" once the wall cap decided."""
        return "the time limit" if timed_out() else f"{self.clock.limit_s:g} deterministic s of effort"

    def stopped_text(self) -> str:
        """"stopped at the effort limit (30 deterministic s of effort)" or "stopped at the time limit"."""
        return "stopped at the time limit" if timed_out() else f"stopped at the effort limit ({self.effort_text()})"


def timed_out() -> bool:
    """Whether the wall cap decided something in this solve (stopped_by "time")."""
    meter = work.current()
    return meter is not None and meter.time_hit
