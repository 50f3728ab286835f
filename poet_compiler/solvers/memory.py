"""poetc's memory limit on its solver processes (``--memory-limit``), measured, not estimated.

Every solver runs in a child process (CP-SAT forked, HiGHS spawned: :mod:`.cpsat`,
:mod:`.native`, :mod:`.highs`). Their memory is what grows with the model (a 362-node
MobileNetV2's stage model took 4.5 GB in CP-SAT), so that is where the limit acts: the
parent, while it waits for a child, measures poetc's memory — its own resident bytes plus
the child's *private* bytes (a forked child shares the parent's pages until it writes
them, so its resident size counts those twice) — and kills the child once that would
pass the limit before the next measurement, at the pace it grew since the last one. The
child's latest solution is kept, as for any other child that ends early; the result says
that the memory limit stopped it.

The limit is set for a solve with :func:`memory_limit` (a context variable, so every
solver process started inside it is watched without passing the limit through every
search); :func:`peak_rss` gives the kernel's peak figures for the report. Only Linux
exposes the figures (``/proc``); elsewhere nothing is watched and ``peak_rss`` still works.
"""

from __future__ import annotations

import contextlib
import resource
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

# Ambient, not arguments (the module docstring): every solver child started inside
# memory_limit() is watched and counted, wherever it is started (CP-SAT, HiGHS, a native
# model of the cover, the presence bound or the arena's exact packing), so the limit need
# not pass through every search; a thread that starts a solver runs in the caller's context.
_LIMIT: ContextVar[int | None] = ContextVar("poetc_memory_limit", default=None)


@dataclass
class Watched:
    """What the watches of one :func:`memory_limit` block saw: the messages of the
    solver processes the limit stopped, and the most memory measured (bytes of poetc
    itself plus its solver processes' private bytes)."""

    stops: list[str] = field(default_factory=list)
    peak_bytes: int = 0


_SEEN: ContextVar[Watched | None] = ContextVar("poetc_memory_seen", default=None)   # (as _LIMIT)
# Solver children being watched (the portfolio runs CP-SAT and HiGHS at once: each watch
# counts them all, and stops its own).
_WATCHED: set[int] = set()
# Seconds between two measurements of a child (reading smaps_rollup walks its page tables).
EVERY_S = 0.2
# A child is stopped when poetc's memory would pass the limit by the next measurement: at
# the pace it grew since the last one, and by at least this share of the limit, since
# CP-SAT allocates in bursts (on gpt2_large_mini, at that pace alone it still reached
# 4,120 MiB under a 4 GiB limit).
MARGIN = 0.02


@contextlib.contextmanager
def memory_limit(limit_bytes: int | None) -> Iterator[Watched]:
    """Watch every solver child started inside this block against ``limit_bytes`` of
    poetc's memory (None: no limit). Yields what the watches see, filled as it happens."""
    seen = Watched()
    token, token_seen = _LIMIT.set(limit_bytes), _SEEN.set(seen)
    try:
        yield seen
    finally:
        _LIMIT.reset(token)
        _SEEN.reset(token_seen)


def current_limit() -> int | None:
    return _LIMIT.get()


def _kib_fields(path: str, names: tuple[str, ...]) -> int | None:
    """Sum of the ``names`` fields (kB) of a /proc status-like file, in bytes."""
    try:
        with open(path, encoding="ascii") as f:
            total = sum(int(line.split()[1]) for line in f if line.split(":")[0] in names)
    except (OSError, ValueError, IndexError):
        return None
    return total * 1024


def self_rss() -> int | None:
    """This process's resident bytes now."""
    return _kib_fields("/proc/self/status", ("VmRSS",))


def private_bytes(pid: int) -> int | None:
    """The bytes process ``pid`` holds that no other process shares (what it adds)."""
    return _kib_fields(f"/proc/{pid}/smaps_rollup", ("Private_Clean", "Private_Dirty", "Private_Hugetlb"))


class Watch:
    """Measures one solver child against the limit in force when it was made."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.limit = current_limit()
        self.used: int | None = None      # poetc's bytes at the measurement that stopped the child
        self.growth = 0                   # and their growth since the measurement before
        self._last: int | None = None
        self._next = 0.0
        self._seen = _SEEN.get()
        if pid is not None and self.limit is not None:
            _WATCHED.add(pid)

    def exceeded(self) -> bool:
        """True once poetc's memory (this process and the child) would pass the limit
        before the next measurement (see MARGIN); measures at most every EVERY_S seconds.
        (Stopping only once it had passed let a growing CP-SAT go 41 MiB over a 4 GiB
        limit on gpt2_large_mini.)"""
        if self.used is not None:
            return True
        if self.limit is None or self.pid is None:
            return False
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + EVERY_S
        mine = self_rss()
        children = 0
        for pid in sorted(_WATCHED):
            got = private_bytes(pid)
            if got is None:
                _WATCHED.discard(pid)       # ended
            children += got or 0
        if mine is None or self.pid not in _WATCHED:
            return False
        if self._seen is not None:
            self._seen.peak_bytes = max(self._seen.peak_bytes, mine + children)
        used = mine + children
        growth = max(0, used - self._last) if self._last is not None else 0
        self._last = used
        if used + max(growth, int(MARGIN * self.limit)) > self.limit:
            self.used, self.growth = used, growth
            if self._seen is not None:
                self._seen.stops.append(self.message())
            return True
        return False

    def message(self) -> str:
        """What to report when :meth:`exceeded` stopped the child."""
        used, limit = (self.used or 0) / 2**30, (self.limit or 0) / 2**30
        if self.used is not None and self.used <= (self.limit or 0):
            return (f"memory limit: poetc reached {used:.2f} GiB with the solver process, growing "
                    f"{self.growth / 2**20:.0f} MiB per {EVERY_S:g} s (limit {limit:.2f} GiB); it was stopped")
        return (f"memory limit: poetc reached {used:.2f} GiB with the solver process "
                f"(limit {limit:.2f} GiB), which was stopped")


def peak_rss() -> dict[str, int]:
    """The kernel's peak resident MiB of this process and of its largest ended child."""
    me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"poetc_mb": round(me / 1024), "solver_mb": round(kids / 1024)}


__all__ = ["EVERY_S", "MARGIN", "Watch", "Watched", "current_limit", "memory_limit", "peak_rss", "private_bytes",
           "self_rss"]
