"""The backend interface: options in, status/values/objective/bound out (physical units)."""

from __future__ import annotations

import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from poet_compiler import progress
from poet_compiler.gap import relative_gap, within_gap

__all__ = ["BackendOptions", "BackendResult", "BackendStatus", "ProgressLine", "exit_reason", "relative_gap",
           "within_gap"]

BackendStatus = Literal["optimal", "feasible", "infeasible", "timeout"]


@dataclass(frozen=True)
class BackendOptions:
    time_limit_s: float = 60.0
    threads: int = 2
    progress: bool = False
    seed: int = 0
    # Stop once (incumbent - bound) / incumbent <= relative_gap. The backends still say
    # "optimal" only for a proven gap of 0; a stop within the limit is "feasible".
    relative_gap: float = 0.0
    # Not within relative_gap of the model's own bound: a restricted sub-problem's own
    # bound says nothing of the whole problem's. HiGHS and Gurobi still stop within the
    # gap of the objective floor; CP-SAT never stops on the floor (solvers/cpsat.py), so
    # it searches such a model to its own optimum or its limit.
    floor_only: bool = False
    # Large models: cheaper presolve (CP-SAT's presolve alone can take most of a minute
    # on ~70k binaries) and a stronger LP relaxation.
    large: bool = False
    # HiGHS child process only: report incumbent/bound on its message pipe, which the
    # parent forwards to the live status line, instead of a progress line of its own.
    progress_pipe: bool = False
    # Reproducible answers (CP-SAT: interleaved search stopped on deterministic time).
    deterministic: bool = True
    # CP-SAT only: the full-problem subsolvers to run beside the neighbourhood (LNS) ones,
    # by name (e.g. "max_lp"); empty: CP-SAT's whole portfolio. For sub-problems searched
    # from a hint, where the LNS workers find the schedules (see guided.GUIDED_SUBSOLVERS).
    full_subsolvers: tuple[str, ...] = ()
    # CP-SAT only: its deterministic limit (poet_compiler.work); ``time_limit_s`` is then
    # the wall allowance, the outer cap. None (outside a meter: tests, benches): the wall limit alone.
    deterministic_s: float | None = None


def exit_reason(code: int | None) -> str:
    """A child process's exit code, in words."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


@dataclass
class BackendResult:
    """``objective`` and ``bound`` are in the model's objective unit (J, B or s);
    ``bound`` is a valid lower bound (rounding of scaled costs already subtracted)."""

    status: BackendStatus
    values: list[float] | None
    objective: float | None
    bound: float | None
    solve_time_s: float
    solver: str
    message: str = ""
    stats: dict[str, Any] = field(default_factory=dict)
    # CP-SAT's deterministic seconds (the work poet_compiler.work charges), when known.
    deterministic_s: float | None = None


class ProgressLine:
    """A throttled one-line status on stderr: incumbent, bound, gap, elapsed."""

    def __init__(self, solver: str, unit: str, enabled: bool, every_s: float = 0.5) -> None:
        self.solver, self.unit, self.enabled, self.every_s = solver, unit, enabled, every_s
        self.start = time.perf_counter()
        self.last = -1e9
        self.incumbent: float | None = None
        self.bound: float | None = None
        self.printed = False

    def update(self, incumbent: float | None = None, bound: float | None = None, force: bool = False) -> None:
        if incumbent is not None:
            self.incumbent = incumbent
        if bound is not None:
            self.bound = bound
        # A compile's live status line (poet_compiler.progress) takes the figures instead.
        if self.enabled and progress.report(self.solver, self.incumbent, self.bound, self.unit):
            return
        now = time.perf_counter()
        # A terminal line is rewritten in place; a log file gets a line every 5 s at most.
        every = self.every_s if sys.stderr.isatty() else max(self.every_s, 5.0)
        if not self.enabled or (not force and now - self.last < every):
            return
        self.last = now
        gap = relative_gap(self.incumbent, self.bound)
        inc = "-" if self.incumbent is None else f"{self.incumbent:.6g} {self.unit}"
        bnd = "-" if self.bound is None else f"{self.bound:.6g} {self.unit}"
        g = "-" if gap is None else f"{100 * gap:.3f}%"
        end = "\r" if sys.stderr.isatty() else "\n"
        sys.stderr.write(f"[{self.solver}] {now - self.start:7.1f}s  incumbent {inc}  bound {bnd}  gap {g}   {end}")
        sys.stderr.flush()
        self.printed = True

    def close(self) -> None:
        if self.enabled and self.printed and sys.stderr.isatty():
            sys.stderr.write("\n")
            sys.stderr.flush()
