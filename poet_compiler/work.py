"""Effort: the deterministic budget a solve spends, and the wall clock as its outer cap.

Every decision of ``strategy="optimal"`` (how long a stage may search, whether a stage
still runs, when a heuristic stops improving) is taken on *work*, never on measured
seconds, so that the same input, flags, version and ``--threads`` give the same schedule
on an idle machine and a loaded one. The unit is CP-SAT's deterministic second: a CP-SAT
call is charged its ``deterministic_time``, and the Python stages that simulate programs
(heuristics, the guided search's realizations, finalize) are charged per simulated
instruction (:data:`UNITS_PER_INSTRUCTION`).

Inside :func:`metered` the instant of :func:`now` is the work spent so far, so code that
keeps a deadline as ``now() + share`` keeps it in work units without knowing. Outside a
meter (baselines run alone, tests), :func:`now` is ``time.perf_counter()`` as before.

The wall clock only caps: a CP-SAT call's ``max_time_in_seconds`` is the time left to
the meter's wall deadline, and a step that polls :func:`past` stops there too. Whatever
stops on the wall cap sets :attr:`Meter.time_hit`: the report then says
``stopped_by="time"``, the only case in which two runs may differ.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

# One simulated instruction's charge, in deterministic seconds. Measured: a replay costs
# 1.15 us of CPU per instruction (ResNet-18-CIFAR m4 50 %, the best warm start's 462
# instructions in 0.53 ms), and CP-SAT's presence search on the README demo accrued 1.29
# deterministic s in 1.08 s of CPU on one worker, so parity is about 1.4e-6 units per
# instruction. The charge is set about 2x above it, so the simulation-heavy heuristics
# (capuchin: a whole-plan replay per step) yield to the solver stages early.
UNITS_PER_INSTRUCTION = 3e-6

# A CP-SAT call that used this share of its wall allowance stopped on the wall cap.
WALL_STOP_SHARE = 0.97


@dataclass
class Meter:
    """The work spent and the wall deadline (a ``time.perf_counter()`` instant, or None)."""

    wall_at: float | None = None
    spent: float = 0.0
    time_hit: bool = False

    def wall_left(self) -> float | None:
        return None if self.wall_at is None else max(0.0, self.wall_at - time.perf_counter())


# Ambient, not an argument: every simulated instruction is charged here (the simulator,
# heuristics' whole-plan replays, the arena planner's and compaction's stops, every CP-SAT
# call's limits), deep in the schedule layer and in heuristics whose signature is Problem
# -> Result; passing a meter through each of them would change every one of those
# signatures for one counter. The solve sets it once (solve_milp, a metered --strategy).
_METER: ContextVar[Meter | None] = ContextVar("poetc_meter", default=None)


@contextmanager
def metered(meter: Meter) -> Iterator[Meter]:
    """Within the block, :func:`now` is ``meter.spent`` and charges go to ``meter``."""
    token = _METER.set(meter)
    try:
        yield meter
    finally:
        _METER.reset(token)


def current() -> Meter | None:
    return _METER.get()


def now() -> float:
    """The instant deadlines are kept in: work spent inside a meter, else wall seconds."""
    m = _METER.get()
    return time.perf_counter() if m is None else m.spent


def charge(units: float) -> None:
    """Add ``units`` of deterministic work to the meter (nothing outside one)."""
    m = _METER.get()
    if m is not None and units > 0:
        m.spent += float(units)


def charge_instructions(count: int) -> None:
    charge(count * UNITS_PER_INSTRUCTION)


def wall_expired() -> bool:
    """Whether the meter's wall cap has passed (and note that the cap decided)."""
    m = _METER.get()
    if m is None or m.wall_at is None:
        return False
    if time.perf_counter() >= m.wall_at:
        m.time_hit = True
        return True
    return False


def past(at: float | None) -> bool:
    """Whether the deadline ``at`` (in :func:`now`'s units) or the wall cap has passed."""
    return (at is not None and now() >= at) or wall_expired()


def solver_limits(limit: float) -> tuple[float | None, float]:
    """``(deterministic seconds, wall seconds)`` for a CP-SAT call a caller gives
    ``limit`` (in :func:`now`'s units): inside a meter the work decides and the wall
    allowance is the time to the cap; outside one, the wall limit as before."""
    m = _METER.get()
    if m is None:
        return None, max(0.0, limit)
    wall = m.wall_left()
    return max(0.0, limit), (1e6 if wall is None else wall)


def settle(deterministic_s: float | None, limit_s: float | None, wall_used_s: float, wall_allowed_s: float) -> None:
    """Charge a finished CP-SAT call at most its deterministic limit ``limit_s``; a call
    that ran into its wall allowance marks the meter as stopped by time.

    The cap keeps the charge deterministic: with several workers, interleaved search ends
    the batch under way when the limit is reached, and how far the other workers' tasks
    had run by then depends on the machine (ResNet-18-CIFAR m4 50 % 1.5x: the guided
    sub-problem, limit 7.022, reported 7.123 on an idle machine and 7.044 beside two busy
    loops, with the same solution)."""
    m = _METER.get()
    if m is None:
        return
    used = deterministic_s or 0.0
    charge(used if limit_s is None else min(used, limit_s))
    if m.wall_at is not None and wall_used_s >= WALL_STOP_SHARE * wall_allowed_s:
        m.time_hit = True


__all__ = ["Meter", "UNITS_PER_INSTRUCTION", "charge", "charge_instructions", "current", "metered", "now",
           "past", "settle", "solver_limits", "wall_expired"]
