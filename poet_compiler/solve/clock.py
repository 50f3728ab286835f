"""One deadline for a whole solve, and where the time went.

``--time-limit S`` is a limit on the whole of ``solve_milp``: quick checks, warm starts,
the cover bound, the guided search, the full model, finalizing (arena planning) and,
after a failed solve, the infeasibility analysis. :class:`Clock` holds the absolute
instant (``time.perf_counter()``) at which the solve must end; every stage asks it how
much is left (:meth:`Clock.left`) and takes at most that, and records its wall seconds
under a stage name (:meth:`Clock.stage`). Stages nest (finalize inside the guided
stage): a nested stage's seconds are charged to it alone, so the seconds of all stages
add up to the time spent in any of them, never more.

CP-SAT runs in a forked child whose parent stops it at ``limit * CPSAT_WALL_FACTOR +
CPSAT_WALL_PAD_S`` (:mod:`.backends.cpsat`); :meth:`Clock.solver_limit` gives the
largest limit whose cap still ends within the time left plus the limit's tolerance
(``TOLERANCE`` of it: ``solve_time_s`` may reach ``limit * (1 + TOLERANCE)``). CP-SAT
itself stops at its limit; the cap is the worst case.

The eviction cover and the arena's exact packing run CP-SAT through
:func:`.backends.native.solve_native` with the wall seconds their caller has left as the
limit: in this process, or (a packing with a target budget) in a child that the parent
kills once it has a layout within the target, or at worst ``CHILD_GRACE_S`` past the limit.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from poet_compiler import work

# The CP-SAT child's wall cap per call (solve/backends/cpsat.py): limit * 1.05 + 2 s.
CPSAT_WALL_FACTOR = 1.05
CPSAT_WALL_PAD_S = 2.0
# ... and kills it this long after asking it to stop (a search that does not stop, e.g. in
# the presolve of a large model; the portfolio's HiGHS child gets the same grace). Measured
# on a 500-node random DAG: the full model's stage ended 14 s past the limit without it.
CPSAT_KILL_GRACE_S = 5.0

# solve_time_s may exceed the limit by this share of it (the "limit + 5 %").
TOLERANCE = 0.05

# Share of the time left a CP-SAT call gets when the wall cap's pad would leave it less.
SHORT_SHARE = 0.5

# Below this many seconds left (after the finalize reserve) no new solver stage starts.
MIN_STAGE_S = 0.2

# Stage names, in the order a solve meets them (the report lists them in this order).
STAGES = ("quick_checks", "warm_starts", "cover", "presence", "guided", "full_model", "finalize", "arena_rescue",
          "infeasibility", "other")


class Clock:
    """A deadline (absolute ``perf_counter`` instant) and the seconds spent per stage."""

    def __init__(self, time_limit_s: float, *, started: float | None = None,
                 stated_s: float | None = None) -> None:
        # Inside a meter (poet_compiler.work) the instants are work units: the limit is
        # the solve's effort, and every share of it is a share of work.
        self.started = work.now() if started is None else started
        self.wall_started = time.perf_counter()
        self.limit_s = float(time_limit_s)
        # The user's --time-limit, when the solve got only part of it (tracing and costing
        # took the rest): messages name it, not the solve's share.
        self.stated_s = self.limit_s if stated_s is None else float(stated_s)
        self.at = self.started + self.limit_s
        self.stage_s: dict[str, float] = {}
        self.stage_effort: dict[str, float] = {}
        self._stack: list[str] = []
        self._since = self.wall_started
        self._since_work = self.started

    def limit_text(self) -> str:
        """The time limit as a message names it: the user's, and what was spent of it
        before the solve when that was not nothing (e.g. "300 s; 0.825 s of it before
        the solve")."""
        before = self.stated_s - self.limit_s
        if before < 5e-4:   # nothing before the solve (the solve never gets more than the user's limit)
            return f"{self.limit_s:g} s"
        return f"{self.stated_s:g} s; {before:.3g} s of it before the solve"

    def now(self) -> float:
        return work.now()

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

    def solver_limit(self, want_s: float, reserve_s: float = 0.0, *, large: bool = False) -> float:
        """The CP-SAT limit to pass for a stage that wants ``want_s``: at most what the
        child's wall cap allows within the time left (after ``reserve_s``) plus the
        tolerance, and never more than the time left itself; >= 0. ``large``: a model
        whose presolve may not stop when asked, so the kill's grace counts too."""
        left = self.left(reserve_s)
        if work.current() is not None:
            # Work decides (the wall cap is the meter's): no pad for a child's wall cap.
            return max(0.0, min(float(want_s), left))
        pad = CPSAT_WALL_PAD_S + (CPSAT_KILL_GRACE_S if large else 0.0)
        strict = (left + TOLERANCE * self.limit_s - pad) / CPSAT_WALL_FACTOR
        # With little time left the cap's pad would leave CP-SAT nothing: there its own
        # limit (half the time left) is what stops it, and the cap stays a safety net.
        room = min(left, max(strict, SHORT_SHARE * left))
        return max(0.0, min(float(want_s), room))

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
        order = {name: i for i, name in enumerate(STAGES)}
        return {k: round(v, 3) for k, v in sorted(spent.items(), key=lambda kv: order.get(kv[0], len(STAGES)))}


    def effort_report(self) -> dict[str, float]:
        """Work per stage (deterministic seconds, rounded to ms), in :data:`STAGES` order."""
        self._charge()
        order = {name: i for i, name in enumerate(STAGES)}
        return {k: round(v, 3) for k, v in sorted(self.stage_effort.items(),
                                                  key=lambda kv: order.get(kv[0], len(STAGES)))}


#: The instant (``time.perf_counter()``) by which the step under way must end: a step that
#: is not a solver call (a heuristic, building a model) polls it between its own steps.
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
    return work.past(at)


def process_started() -> float | None:
    """The ``time.perf_counter()`` instant at which this process started, or None where
    the platform does not say (only Linux's /proc is read). ``poetc compile``'s time limit
    counts from it: the interpreter's start and importing torch (1-2 s) are part of the
    command's wall time."""
    try:
        with open("/proc/self/stat") as f:
            # Field 22 (starttime, clock ticks since boot) follows the ")" ending field 2.
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime_s = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    age_s = uptime_s - start_ticks / os.sysconf("SC_CLK_TCK")
    if not 0.0 <= age_s < 3600.0:   # a clock that disagrees with itself: do not trust it
        return None
    return time.perf_counter() - age_s


# When the running command started (``poet_compiler.cli.main`` sets it): the console
# script's process start, or the call's instant when ``main`` runs inside a longer-lived
# process (a test worker, a notebook), whose own start says nothing about the command.
_COMMAND_STARTED: ContextVar[float | None] = ContextVar("poetc_command_started", default=None)


@contextmanager
def command_from(started: float) -> Iterator[None]:
    """Within the block, :func:`command_started` is ``started``."""
    token = _COMMAND_STARTED.set(started)
    try:
        yield
    finally:
        _COMMAND_STARTED.reset(token)


def command_started() -> float | None:
    """The ``time.perf_counter()`` instant the running command started (None outside one)."""
    return _COMMAND_STARTED.get()


def unlimited() -> Clock:
    """A clock with no practical deadline (callers outside a timed solve)."""
    return Clock(1e9)
