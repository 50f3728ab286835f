"""HiGHS backend (highspy), run in a child process.

The OR-Tools wheel ships its own copy of HiGHS; loading highspy's into the same process
fails with undefined symbols, whichever is imported first. So the model is pickled to a
fresh interpreter (:mod:`.highs_worker`) that imports highspy only. HiGHS takes the
physical (floating-point) coefficients directly: no scaling.

:class:`HighsJob` runs the child: it follows incumbent/bound from the child's message pipe
(forwarded to the live status line) and kills a child past its time or memory limit.
"""

from __future__ import annotations

import dataclasses
import math
import os
import pickle
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection

from poet_compiler import progress
from poet_compiler.errors import InternalError, SolverError
from poet_compiler.solvers.base import (
    BackendOptions,
    BackendResult,
    exit_reason,
)
from poet_compiler.solvers.memory import Watch
from poet_compiler.solvers.model import LinearModel


class HighsJob:
    """One HiGHS child process; ``incumbent``/``bound`` follow its progress messages.

    The child's messages come on a pipe of their own (:mod:`.highs_worker`); its stdout
    goes nowhere and its stderr is kept only for the last lines of a crash."""

    def __init__(self, model: LinearModel, options: BackendOptions) -> None:
        self.forward = options.progress_pipe  # hand progress figures to the live status line
        self.unit = model.objective_unit
        self.started = time.perf_counter()
        self.incumbent: float | None = None
        self.bound: float | None = None
        self.killed = False
        self._stderr_tail: list[str] = []
        read_fd, write_fd = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "poet_compiler.solvers.highs_worker", str(write_fd)],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, pass_fds=(write_fd,),
                stderr=subprocess.PIPE if (options.progress_pipe or not options.progress) else None,
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)     # the child holds its copy: EOF here when it ends
        self._messages = Connection(read_fd, writable=False)
        self._result: BackendResult | None = None
        self._failure: tuple[str, str] | None = None    # (one line, traceback) of the child's exception
        # Feed stdin and drain the message pipe and stderr on threads: a large model or
        # result would otherwise fill a pipe and deadlock parent and child.
        self._threads = [threading.Thread(target=self._feed, args=(pickle.dumps((model, options)),), daemon=True),
                         threading.Thread(target=self._read_messages, daemon=True)]
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

    def _read_messages(self) -> None:
        try:
            while True:
                msg = self._messages.recv()
                if msg[0] == "progress":
                    self._progress(msg[1], msg[2])
                elif msg[0] == "result":
                    self._result = msg[1]
                elif msg[0] == "error":
                    self._failure = (msg[1], msg[2])
        except (EOFError, OSError):
            pass     # the child has ended (or was killed)
        finally:
            self._messages.close()

    def _progress(self, inc: float, bound: float) -> None:
        if math.isfinite(inc) and abs(inc) < 1e29:   # HiGHS reports +inf as 1e30 before a solution
            self.incumbent = inc
        if math.isfinite(bound) and abs(bound) < 1e29:
            self.bound = bound if self.bound is None else max(self.bound, bound)
        if self.forward:
            progress.report("highs", self.incumbent, self.bound, self.unit)

    def _read_err(self) -> None:
        assert self._proc.stderr is not None
        for raw in self._proc.stderr:
            line = raw.decode(errors="replace").strip()
            if line:
                self._stderr_tail = (self._stderr_tail + [line])[-5:]

    def kill(self) -> None:
        if self._proc.poll() is None:
            self.killed = True
            self._proc.kill()

    def wait(self, timeout: float) -> BackendResult | None:
        """The child's result; None if it was killed (past ``timeout`` or poetc's memory
        limit). Raises InternalError when the child raised (a bug of poetc's), SolverError
        when it died without a result."""
        until = time.perf_counter() + timeout
        while self._proc.poll() is None:
            if self.watch.exceeded():
                self.memory_message = self.watch.message()
                self.kill()
            if time.perf_counter() > until:
                self.kill()
            time.sleep(0.05)
        self._proc.wait()
        for t in self._threads:
            t.join()
        if self.killed and self._result is None:
            return None
        if self._failure is not None:
            raise InternalError(f"the HiGHS solver process raised {self._failure[0]}", detail=self._failure[1])
        if self._result is None:
            err = self._stderr_tail
            raise SolverError(f"highs: the solver process failed: "
                              f"{err[-1] if err else exit_reason(self._proc.returncode)}")
        self._result.solve_time_s = time.perf_counter() - self.started
        return self._result


def solve_highs(model: LinearModel, options: BackendOptions) -> BackendResult:
    if options.progress and progress.active() is not None:
        # The child must not write to the terminal under the live status line: it reports
        # through the pipe and the parent forwards its figures.
        options = dataclasses.replace(options, progress_pipe=True)
    job = HighsJob(model, options)
    result = job.wait(timeout=options.time_limit_s + 120)
    if result is None and job.memory_message:
        return BackendResult("timeout", None, None, None, time.perf_counter() - job.started, "highs",
                             f"solver failure: {job.memory_message}", {})
    if result is None:
        raise SolverError(f"highs: the solver process did not finish within {options.time_limit_s + 120:g} s")
    return result
