"""When the running command started: ``poetc compile``'s ``--time-limit`` counts from it.

The console script's process start (:func:`process_started`, read from Linux's /proc), or
the call's instant when :func:`~poet_compiler.cli.main` runs inside a longer-lived
process (a test worker, a notebook), whose own start says nothing about the command.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar


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
# Ambient, not an argument: typer calls a command's function with the user's options
# only, and main() (which knows the instant) wraps the whole app, not one command.
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
