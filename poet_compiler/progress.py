"""One live status line for a compile: stage, incumbent, bound, gap, elapsed time.

``poetc compile`` (and ``poet_compiler.compile(..., progress=True)``) opens a
:class:`LiveStatus` for the whole pipeline. The pipeline names its stages
(:func:`stage`: tracing, costs, solving, ...) and the solver backends report their
incumbent and bound through :func:`report` — the same calls whether or not anyone
listens, so the solver code knows nothing of the display.

On a terminal the status is one line that rich rewrites in place (four times a
second, so the elapsed time ticks while a solver is silent). Elsewhere (a log file, a
pipe, CI) nothing is drawn while the compile runs and the final status is written once
as a single line, instead of a new line every few seconds. All of it goes to stderr:
stdout stays machine-clean for ``--json``, and ``--quiet`` opens no status at all.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console
from rich.live import Live
from rich.text import Text

from poet_compiler.gap import relative_gap

_lock = threading.Lock()
_active: LiveStatus | None = None


@dataclass
class _Figures:
    source: str
    incumbent: float | None
    bound: float | None
    unit: str
    detail: str = ""


def _num(x: float | None, unit: str) -> str:
    return "-" if x is None else f"{x:.5g} {unit}".rstrip()


class LiveStatus:
    """The status line; use as a context manager (it becomes the active one)."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.started = time.perf_counter()
        self.stage_name = "loading"
        self.figures: _Figures | None = None
        self._live: Live | None = None

    # -- what the pipeline and the solvers call --------------------------------------
    def set_stage(self, name: str) -> None:
        self.stage_name = name
        self.figures = None  # figures belong to the stage that produced them
        self._refresh()

    def set_figures(self, source: str, incumbent: float | None, bound: float | None, unit: str,
                    detail: str = "") -> None:
        # No redraw here: a solver may report hundreds of times a second; the live
        # display redraws on its own clock.
        self.figures = _Figures(source, incumbent, bound, unit, detail)

    # -- rendering -------------------------------------------------------------------
    def line(self) -> str:
        """The status as plain text (what the terminal shows, without styles)."""
        # Elapsed time first and the solver's detail last: a narrow terminal cuts the end.
        parts = [f"{time.perf_counter() - self.started:6.1f}s", self.stage_name]
        f = self.figures
        if f is not None:
            gap = relative_gap(f.incumbent, f.bound)
            parts.append(f"{f.source}: incumbent {_num(f.incumbent, f.unit)}  bound {_num(f.bound, f.unit)}  "
                         f"gap {'-' if gap is None else f'{100 * gap:.2f}%'}")
            if f.detail:
                parts.append(f"({f.detail})")
        return "  ".join(parts)

    def __rich__(self) -> Text:
        return Text(self.line(), no_wrap=True, overflow="ellipsis")

    def _refresh(self) -> None:
        if self._live is not None:
            self._live.refresh()

    def __enter__(self) -> LiveStatus:
        global _active
        if self.console.is_terminal:
            self._live = Live(self, console=self.console, refresh_per_second=4, transient=False)
            self._live.start()
        with _lock:
            _active = self
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        global _active
        with _lock:
            _active = None
        failed = exc_type is not None  # the error's own one line says it all: no status left
        if self._live is not None:
            self._live.transient = failed  # else the final line stays on the terminal
            self._live.stop()
            self._live = None
        elif not failed:
            self.console.print(self.line(), markup=False, highlight=False, soft_wrap=True)


def active() -> LiveStatus | None:
    """The status line of the running compile, if one is shown."""
    return _active


def stage(name: str) -> None:
    """Name the pipeline stage now running (no-op without a status line)."""
    status = _active
    if status is not None:
        status.set_stage(name)


def report(source: str, incumbent: float | None, bound: float | None, unit: str, detail: str = "") -> bool:
    """A solver's incumbent and bound; True if a status line took them (the caller then
    prints nothing itself)."""
    status = _active
    if status is None:
        return False
    status.set_figures(source, incumbent, bound, unit, detail)
    return True


@contextmanager
def live_status(enabled: bool, console: Console | None = None) -> Iterator[LiveStatus | None]:
    """A status line for the block when ``enabled`` and none is shown yet."""
    if not enabled or _active is not None:
        yield _active
        return
    with LiveStatus(console) as status:
        yield status


__all__ = ["LiveStatus", "active", "live_status", "report", "stage"]
