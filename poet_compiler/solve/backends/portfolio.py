"""The ``auto`` solver: CP-SAT first, then CP-SAT and HiGHS racing on the two cores.

Measured on the zoo's layer-level graphs (46 nodes): CP-SAT finds good schedules fast but
its bound stalls at the trivial compute-only energy; HiGHS's LP-based bound is far
tighter. So:

1. **Phase 1** — CP-SAT alone, all threads, a short slice (``PHASE1_SHARE`` of the limit,
   at most ``PHASE1_MAX_S``): small models are proven here and never pay for a race.
   Skipped on large models (CP-SAT's presolve alone would eat the slice).
2. **Phase 2** — the race: HiGHS in its child process (one thread) and CP-SAT in this
   process (the other threads), both hinted with the best schedule so far (``rehint``
   turns phase 1's incumbent into a complete hint). It stops as soon as the *combined*
   gap — best incumbent of either against the highest valid bound of either — is within
   the gap limit, or at the time limit.

The answer: the incumbent with the lowest true objective (re-evaluated with the model's
exact coefficients, not CP-SAT's scaled ones) and the highest valid lower bound seen
(CP-SAT's is rounding-corrected by :mod:`.cpsat`; HiGHS works in physical units).
"""

from __future__ import annotations

import contextvars
import dataclasses
import math
import sys
import threading
import time
from collections.abc import Callable

from poet_compiler.errors import SolverError
from poet_compiler.solve.backends.base import (
    BackendOptions,
    BackendResult,
    _report,
    relative_gap,
)
from poet_compiler.solve.backends.cpsat import solve_cpsat
from poet_compiler.solve.backends.highs import HighsJob
from poet_compiler.solve.formulation.model import LinearModel

PHASE1_SHARE = 0.1
PHASE1_MAX_S = 5.0
POLL_S = 0.05
# Relative tolerance when comparing bound and incumbent (HiGHS's feasibility tolerances).
_CLOSE = 1e-9


class _Race:
    """Shared state of one race: best incumbent/bound, both progress figures."""

    def __init__(self, gap_limit: float, progress: bool, unit: str) -> None:
        self.lock = threading.Lock()
        self.gap_limit = gap_limit
        self.progress = progress
        self.unit = unit
        self.cp_inc: float | None = None
        self.cp_bound: float | None = None
        self.hi_inc: float | None = None
        self.hi_bound: float | None = None
        self.bound: float | None = None    # best valid bound from anywhere (phase 1 included)
        self.start = time.perf_counter()
        self.last_print = -1e9
        self.printed = False

    def note_bound(self, b: float | None) -> None:
        if b is not None and math.isfinite(b):
            self.bound = b if self.bound is None else max(self.bound, b)

    def incumbent(self) -> float | None:
        vals = [x for x in (self.cp_inc, self.hi_inc) if x is not None]
        return min(vals) if vals else None

    def proven(self) -> bool:
        inc, b = self.incumbent(), self.bound
        if inc is None or b is None:
            return False
        return inc - b <= self.gap_limit * abs(inc) + _CLOSE * max(1.0, abs(inc))

    def cpsat_progress(self, inc: float | None, bound: float | None) -> None:
        with self.lock:
            if inc is not None:
                self.cp_inc = inc if self.cp_inc is None else min(self.cp_inc, inc)
            if bound is not None:
                self.cp_bound = bound if self.cp_bound is None else max(self.cp_bound, bound)
                self.note_bound(bound)

    def show(self, force: bool = False) -> None:
        """One line with both solvers' figures and the combined gap."""
        now = time.perf_counter()

        def f(x: float | None) -> str:
            return "-" if x is None else f"{x:.6g}"

        if self.progress and _report(
            "auto",
            self.incumbent(),
            self.bound,
            self.unit,
            f"cpsat {f(self.cp_inc)}/{f(self.cp_bound)}  highs {f(self.hi_inc)}/{f(self.hi_bound)}",
        ):
            return  # the compile's live status line shows it
        # A terminal line is rewritten in place; a log file gets a line every 5 s only.
        every = 0.5 if sys.stderr.isatty() else 5.0
        if not self.progress or (not force and now - self.last_print < every):
            return
        self.last_print = now

        gap = relative_gap(self.incumbent(), self.bound)
        g = "-" if gap is None else f"{100 * gap:.3f}%"
        end = "\r" if sys.stderr.isatty() else "\n"
        sys.stderr.write(f"[auto] {now - self.start:7.1f}s  cpsat {f(self.cp_inc)}/{f(self.cp_bound)}  "
                         f"highs {f(self.hi_inc)}/{f(self.hi_bound)} {self.unit}  gap {g}   {end}")
        sys.stderr.flush()
        self.printed = True

    def close(self) -> None:
        if self.printed and sys.stderr.isatty():
            sys.stderr.write("\n")
            sys.stderr.flush()


def solve_auto(model: LinearModel, options: BackendOptions,
               rehint: Callable[[list[float]], dict[int, float]] | None = None) -> BackendResult:
    """Portfolio solve (see the module docstring); same contract as every backend."""
    started = time.perf_counter()
    race = _Race(max(0.0, options.relative_gap), options.progress, model.objective_unit)
    results: list[BackendResult] = []
    phase1 = 0.0 if options.large else min(PHASE1_MAX_S, PHASE1_SHARE * options.time_limit_s)
    if phase1 > 0:
        first = solve_cpsat(model, dataclasses.replace(options, time_limit_s=phase1, progress=False),
                            on_progress=race.cpsat_progress)
        first.stats["phase1_s"] = round(first.solve_time_s, 3)
        if first.status in ("optimal", "infeasible") or (
                first.objective is not None and first.bound is not None and
                first.objective - first.bound <= race.gap_limit * abs(first.objective)):
            first.solver = "auto(cpsat)"
            return first
        results.append(first)
        race.note_bound(first.bound)
        if first.values is not None:
            race.cp_inc = first.objective
            if rehint is not None:
                model = dataclasses.replace(model, hint=rehint(first.values))
    remaining = options.time_limit_s - (time.perf_counter() - started)
    if remaining <= 0.2:
        return _combine(model, results, race, started)
    hi_threads = 1
    cp_threads = max(1, options.threads - hi_threads)
    job = None
    try:
        job = HighsJob(model, dataclasses.replace(options, time_limit_s=remaining, threads=hi_threads,
                                                  progress=False, progress_pipe=True))
    except (OSError, SolverError):
        job = None     # no HiGHS: CP-SAT runs alone below
    holder: dict[str, object] = {}
    cp_out: list[BackendResult] = []
    cp_err: list[BaseException] = []

    def run_cpsat() -> None:
        try:
            cp_out.append(solve_cpsat(
                model, dataclasses.replace(options, time_limit_s=remaining, threads=cp_threads, progress=False),
                on_solver=lambda s: holder.__setitem__("solver", s), on_progress=race.cpsat_progress))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            cp_err.append(exc)

    # In this call's context: the memory limit (a context variable, .memory) must reach
    # the CP-SAT child the thread starts, and a new thread starts with an empty context.
    thread = threading.Thread(target=contextvars.copy_context().run, args=(run_cpsat,), daemon=True)
    thread.start()
    stop_sent = False
    over_at = started + options.time_limit_s + 5.0     # both should have stopped by then
    while thread.is_alive() or (job is not None and not job.done()):
        time.sleep(POLL_S)
        if job is not None:
            with race.lock:
                race.hi_inc, race.hi_bound = job.incumbent, job.bound
                race.note_bound(job.bound)
        race.show()
        if stop_sent:
            continue
        # Stop the other side once one has proven its answer, or the combined figures
        # prove the gap limit, or the time is up.
        done_proof = race.proven() or time.perf_counter() > over_at
        if not thread.is_alive() and cp_out and cp_out[0].status in ("optimal", "infeasible"):
            done_proof = True
        if job is not None and job.done():
            try:
                hi = job.wait()
            except SolverError:
                hi = None
            if hi is not None and hi.status in ("optimal", "infeasible"):
                done_proof = True
        if done_proof:
            _stop(holder, job)
            stop_sent = True
    thread.join()
    if cp_err:
        if job is not None:
            job.kill()
            job.wait()
        raise cp_err[0]
    results += cp_out
    if job is not None:
        try:
            hi = job.wait()
        except SolverError:
            hi = None
        if hi is not None:
            results.append(hi)
        race.hi_inc, race.hi_bound = job.incumbent, job.bound
        race.note_bound(job.bound)
    race.show(force=True)
    race.close()
    return _combine(model, results, race, started)


def _stop(holder: dict[str, object], job) -> None:  # noqa: ANN001
    solver = holder.get("solver")
    if solver is not None:
        solver.stop_search()   # type: ignore[attr-defined]
    if job is not None:
        job.kill()


def _combine(model: LinearModel, results: list[BackendResult], race: _Race, started: float) -> BackendResult:
    """Best incumbent (true objective) and best valid bound of all the runs."""
    elapsed = time.perf_counter() - started
    stats: dict[str, object] = dict(model.stats())
    for r in results:
        for k, v in r.stats.items():
            stats.setdefault(k, v)
    if any(r.status == "infeasible" for r in results):
        return BackendResult("infeasible", None, None, None, elapsed, "auto", "proven infeasible", stats)
    for r in results:
        race.note_bound(r.bound)
    best: tuple[float, BackendResult] | None = None
    for r in results:
        if r.values is None:
            continue
        # CP-SAT's objective is on rounded costs: compare on the exact coefficients of the
        # binaries plus the solver's own value of any continuous objective term.
        obj = r.objective if r.objective is not None else math.inf
        exact = _exact_objective(model, r)
        if exact is not None:
            obj = exact
        if best is None or obj < best[0]:
            best = (obj, r)
    if best is None:
        return BackendResult("timeout", None, None, race.bound, elapsed, "auto",
                             "no solution within the time limit", stats)
    obj, r = best
    bound = race.bound
    if bound is not None and bound > obj:
        bound = obj     # float noise of a proven optimum
    closed = bound is not None and obj - bound <= _CLOSE * max(1.0, abs(obj))
    stats["winner"] = r.solver
    stats.update({f"bound_{x.solver}": x.bound for x in results if x.bound is not None})
    return BackendResult("optimal" if closed else "feasible", r.values, obj, bound, elapsed,
                         f"auto({r.solver})", "", stats)


def _exact_objective(model: LinearModel, r: BackendResult) -> float | None:
    """The objective with exact coefficients when it is over binaries only (else None)."""
    if r.values is None or any(model.kind[v] != "bin" for v in model.objective):
        return None
    return sum(c * r.values[v] for v, c in model.objective.items())
