"""HiGHS backend (highspy), run in a child process.

The OR-Tools wheel ships its own copy of HiGHS; loading highspy's into the same process
fails with undefined symbols, whichever is imported first. So the model is pickled to a
fresh interpreter (:mod:`.highs_worker`) that imports highspy only. HiGHS takes the
physical (floating-point) coefficients directly: no scaling.

:class:`HighsJob` runs the child without blocking (the portfolio of :mod:`.portfolio`
races it against CP-SAT): it streams incumbent/bound from the child's stderr and can be
killed; :func:`solve_highs` is the blocking form.
"""

from __future__ import annotations

import dataclasses
import math
import pickle
import subprocess
import sys
import threading
import time

from poet_compiler import progress
from poet_compiler.errors import SolverError
from poet_compiler.solve.backends.base import (
    PROGRESS_TAG,
    BackendOptions,
    BackendResult,
    _report,
)
from poet_compiler.solve.backends.memory import Watch
from poet_compiler.solve.formulation.model import LinearModel


class HighsJob:
    """One HiGHS child process; ``incumbent``/``bound`` follow its progress lines."""

    def __init__(self, model: LinearModel, options: BackendOptions, forward: bool = False) -> None:
        self.forward = forward  # hand progress figures to the live status line
        self.unit = model.objective_unit
        self.started = time.perf_counter()
        self.options = options
        self.incumbent: float | None = None
        self.bound: float | None = None
        self.killed = False
        self._stderr_tail: list[str] = []
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "poet_compiler.solve.backends.highs_worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if (options.progress_pipe or not options.progress) else None,
        )
        self._out: list[bytes] = []
        self._result: BackendResult | None = None
        # Feed stdin and drain stdout/stderr on threads: a large model or result would
        # otherwise fill a pipe and deadlock parent and child.
        self._threads = [threading.Thread(target=self._feed, args=(pickle.dumps((model, options)),), daemon=True),
                         threading.Thread(target=self._read_out, daemon=True)]
        if self._proc.stderr is not None:
            self._threads.append(threading.Thread(target=self._read_err, daemon=True))
        for t in self._threads:
            t.start()
        self.watch = Watch(self._proc.pid)
        self.memory_message = ""      # set when the memory limit stopped the child

    def _feed(self, payload: bytes) -> None:
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.write(payload)
            self._proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass     # the child died (or was killed); wait() reports it

    def _read_out(self) -> None:
        assert self._proc.stdout is not None
        self._out.append(self._proc.stdout.read())

    def _read_err(self) -> None:
        assert self._proc.stderr is not None
        for raw in self._proc.stderr:
            line = raw.decode(errors="replace").strip()
            if line.startswith(PROGRESS_TAG):
                try:
                    inc, bound = (float(x) for x in line.split()[1:3])
                except ValueError:
                    continue
                if math.isfinite(inc) and abs(inc) < 1e29:   # HiGHS reports +inf as 1e30 before a solution
                    self.incumbent = inc
                if math.isfinite(bound) and abs(bound) < 1e29:
                    self.bound = bound if self.bound is None else max(self.bound, bound)
                if self.forward:
                    _report("highs", self.incumbent, self.bound, self.unit)
            elif line:
                self._stderr_tail = (self._stderr_tail + [line])[-5:]

    def done(self) -> bool:
        """The child has ended; one past poetc's memory limit is stopped here."""
        if self._proc.poll() is None and self.watch.exceeded():
            self.memory_message = self.watch.message()
            self.kill()
        return self._proc.poll() is not None

    def kill(self) -> None:
        if self._proc.poll() is None:
            self.killed = True
            self._proc.kill()

    def wait(self, timeout: float | None = None) -> BackendResult | None:
        """The child's result; None if it was killed. Raises SolverError if it failed."""
        if self._result is not None:
            return self._result
        until = None if timeout is None else time.perf_counter() + timeout
        while not self.done():
            if until is not None and time.perf_counter() > until:
                self.kill()
            time.sleep(0.05)
        self._proc.wait()
        for t in self._threads:
            t.join()
        if self.killed:
            return None
        if self._proc.returncode != 0 or not self._out or not self._out[0]:
            err = self._stderr_tail
            raise SolverError(f"highs: the solver process failed: "
                              f"{err[-1] if err else 'exit ' + str(self._proc.returncode)}")
        result: BackendResult = pickle.loads(self._out[0])
        result.solve_time_s = time.perf_counter() - self.started
        self._result = result
        return result


def solve_highs(model: LinearModel, options: BackendOptions) -> BackendResult:
    if options.progress and progress.active() is not None:
        # The child must not write to the terminal under the live status line: it reports
        # through the pipe and the parent forwards its figures.
        options = dataclasses.replace(options, progress_pipe=True)
        job = HighsJob(model, options, forward=True)
    else:
        job = HighsJob(model, options)
    result = job.wait(timeout=options.time_limit_s + 120)
    if result is None and job.memory_message:
        return BackendResult("timeout", None, None, None, time.perf_counter() - job.started, "highs",
                             f"solver failure: {job.memory_message}", {})
    if result is None:
        raise SolverError(f"highs: the solver process did not finish within {options.time_limit_s + 120:g} s")
    return result
