"""One budget for a whole solve, and where the work and the time went.

The effort is a budget on the whole of ``solve_milp``: quick checks, warm starts, the
cover bound, the guided search, the full model, finalizing (arena planning) and, after a
failed solve, the infeasibility analysis. :class:`Clock` holds the instant at which the
solve must end; every stage asks it how much is left (:meth:`Clock.left`) and takes at
most that, and records its work and wall seconds under a stage name
(:meth:`Clock.stage`). Stages nest (finalize inside the guided stage): a nested stage's
share is charged to it alone, so the stages add up to the whole, never more.

Inside a solve the instants are work (:mod:`poet_compiler.work`): the limit is the
solve's effort in deterministic seconds, every share of it a share of work, and the wall
clock only the outer cap that the meter keeps. The stage report keeps both: wall seconds
(:meth:`Clock.report`) and work (:meth:`Clock.effort_report`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from poet_compiler import work

# Stage names, in the order a solve meets them (the report lists them in this order).
STAGES = ("quick_checks", "warm_starts", "cover", "presence", "guided", "full_model", "finalize", "arena_rescue",
          "infeasibility", "other")


def _in_order(spent: dict[str, float]) -> dict[str, float]:
    """``spent`` rounded to ms, in :data:`STAGES` order (unknown names last)."""
    order = {name: i for i, name in enumerate(STAGES)}
    return {k: round(v, 3) for k, v in sorted(spent.items(), key=lambda kv: order.get(kv[0], len(STAGES)))}


class Clock:
    """A deadline (an instant of :func:`poet_compiler.work.now`) and what each stage spent."""

    def __init__(self, time_limit_s: float) -> None:
        self.started = work.now()     # inside a meter, work units (module docstring)
        self.wall_started = time.perf_counter()
        self.limit_s = float(time_limit_s)
        self.at = self.started + self.limit_s
        self.stage_s: dict[str, float] = {}
        self.stage_effort: dict[str, float] = {}
        self._stack: list[str] = []
        self._since = self.wall_started
        self._since_work = self.started

    def elapsed(self) -> float:
        """Wall seconds since the clock started (a timing for the report, never a decision)."""
        return time.perf_counter() - self.wall_started

    def left(self, reserve_s: float = 0.0) -> float:
        """What is left to the deadline, minus ``reserve_s`` (held back for a later stage), >= 0;
        nothing once the wall cap has passed."""
        if work.wall_expired():
            return 0.0
        return max(0.0, self.at - work.now() - reserve_s)

    def expired(self, margin_s: float = 0.0) -> bool:
        return self.left() <= margin_s

    def solver_limit(self, want_s: float, reserve_s: float = 0.0) -> float:
        """The limit to give a solver stage that wants ``want_s``: at most what is left
        after ``reserve_s``; >= 0. (A CP-SAT call turns it into its deterministic limit
        and takes the time to the wall cap as its wall allowance: :mod:`poet_compiler.work`.)"""
        return max(0.0, min(float(want_s), self.left(reserve_s)))

    @contextmanager
    def capped(self, at: float) -> Iterator[None]:
        """Within the block the deadline is ``min(deadline, at)`` (a stage's share)."""
        outer = self.at
        self.at = min(outer, at)
        try:
            yield
        finally:
            self.at = outer

    def _charge(self) -> None:
        now, spent = time.perf_counter(), work.now()
        if self._stack:
            name = self._stack[-1]
            self.stage_s[name] = self.stage_s.get(name, 0.0) + (now - self._since)
            self.stage_effort[name] = self.stage_effort.get(name, 0.0) + (spent - self._since_work)
        self._since, self._since_work = now, spent

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Charge the wall seconds of the ``with`` block to ``name`` (nested stages: to
        the innermost only)."""
        self._charge()
        self._stack.append(name)
        try:
            yield
        finally:
            self._charge()
            self._stack.pop()

    def report(self) -> dict[str, float]:
        """Seconds per stage (rounded to ms), ``other`` for time outside every stage, in
        :data:`STAGES` order."""
        self._charge()
        total = time.perf_counter() - self.wall_started
        spent = dict(self.stage_s)
        spent["other"] = max(0.0, total - sum(spent.values()))
        return _in_order(spent)

    def effort_report(self) -> dict[str, float]:
        """Work per stage (deterministic seconds, rounded to ms), in :data:`STAGES` order."""
        self._charge()
        return _in_order(self.stage_effort)


#: The instant (``time.perf_counter()``) by which the step under way must end: a step that
#: is not a solver call (a heuristic, building a model) polls it between its own steps.
#: Ambient, not an argument: the pollers are heuristics (Problem -> Result, the registry's
#: one signature) and the formulations' row builders, several calls below the stage that
#: knows the deadline.
_STEP_UNTIL: ContextVar[float | None] = ContextVar("step_until", default=None)


@contextmanager
def step_until(at: float | None) -> Iterator[None]:
    """Within the block, :func:`past_step_deadline` is true from ``at`` on (None: never).
    Heuristics then stop improving their plan and return the best they have (capuchin,
    chen_greedy: one whole-plan simulation per step, 51 s for capuchin on gpt2_large) and a
    model under construction stops with ``BuildDeadline``
    (``formulation/common.check_build_deadline``): both can take minutes on 1,500 nodes,
    and neither is a solver call that its own limit stops."""
    token = _STEP_UNTIL.set(at)
    try:
        yield
    finally:
        _STEP_UNTIL.reset(token)


def past_step_deadline() -> bool:
    """Whether the deadline of the enclosing :func:`step_until` has passed."""
    at = _STEP_UNTIL.get()
    # Outside a step_until block nothing expects the stop (a BuildDeadline there would
    # escape): only a step with a deadline polls the wall cap too.
    return at is not None and work.past(at)
