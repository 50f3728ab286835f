"""Native CP-SAT models: the one entry point for a model built on CP-SAT's own API.

Some of poetc's models use what only CP-SAT has — intervals and ``NoOverlap2D`` (the
arena's exact packing, :mod:`poet_compiler.schedule.arena`), implications and at-most-one
over literals (the eviction cover, :mod:`poet_compiler.solve.cover`) — so they are built
as a ``cp_model.CpModel`` (:func:`new_model`) rather than as the solver-neutral
``LinearModel``, and solved by :func:`solve_native`. Only ``solvers/`` imports
OR-Tools: a caller builds the model and reads the result's values without naming it.

The stopping rule (:class:`NativeLimits`), the same for every native model: the search
ends at the first of

- ``time_limit_s``: wall seconds, the caller's time left on its clock (required);
- ``deterministic_s``: CP-SAT's deterministic seconds, optional: a work limit for a caller
  whose answer must not depend on the machine's load (the wall limit stays as the cap);
- a proven optimum;
- with ``target``: the first solution whose objective is at most ``target``.

Nothing ever stops CP-SAT's search (``stop_search()``) from a solution callback or from
another thread: OR-Tools 9.15 can abort the whole process when it is stopped while a
hinted solution is still being postsolved (:mod:`.cpsat`). Without a target the search
runs in this process and only its own limits end it. With a target it runs in a forked
child whose solution callback only *sends* the first solution within the target; the
parent then kills the child (a process, not a search, is ended), so the answer is the
one a stop at that solution would give, and a failure inside CP-SAT is a status here,
never the end of poetc. The parent kills a child that outlives its wall limit by
:data:`CHILD_GRACE_S` (a presolve that does not stop).
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from poet_compiler import work
from poet_compiler.solvers.cpsat import next_message
from poet_compiler.solvers.memory import Watch

NativeStatus = Literal["optimal", "feasible", "infeasible", "unknown"]

# Seconds past its wall limit before the parent kills a target-seeking child.
CHILD_GRACE_S = 2.0


def new_model() -> Any:
    """An empty ``cp_model.CpModel`` to build a native model in."""
    from ortools.sat.python import cp_model  # lazy: heavy; never loaded beside HiGHS

    return cp_model.CpModel()


@dataclass(frozen=True)
class NativeLimits:
    """When :func:`solve_native` stops (module docstring) and how it searches."""

    time_limit_s: float
    deterministic_s: float | None = None
    # Objective value (model units, minimization) at or below which the first solution is
    # the answer.
    target: int | None = None
    workers: int = 1
    # None: CP-SAT's default.
    seed: int | None = None
    linearization_level: int | None = None
    # Run in a forked child even without a target, and keep its latest solution if it
    # dies or outlives its limit: for large models whose failure must not end poetc and
    # whose memory should be returned when the search ends.
    isolate: bool = False
    # Solve with every hinted variable fixed to its hint (does the hint satisfy the model?).
    fix_to_hint: bool = False
    # Prove the bound by unsatisfiable cores over the objective's literals, on one worker
    # (``workers`` is ignored): for models whose LP bound is weak
    # (:mod:`poet_compiler.solve.presence`). On the README demo's presence model, a second
    # worker (``no_lp``) took the proof from 1.08 to 1.95 s of CPU; core minimization level
    # 1 (CP-SAT's default is 2) from 1.34 to 1.08 s.
    core: bool = False
    # CP-SAT's interleaved search (``interleave_search``): the subsolvers' work goes out
    # in batches and is synchronized after each, so with ``workers`` > 1 the search does
    # not depend on thread timing (the same answer whenever the time limit does not bind)
    # and the large-neighbourhood workers still run beside the LP search.
    interleave: bool = False


@dataclass
class NativeResult:
    """``objective`` and ``bound`` in the model's units (``bound``: CP-SAT's best bound,
    when a solution was found). ``values``: the solution, one integer per model variable.
    ``at_target``: the search ended at a solution within the target."""

    status: NativeStatus
    objective: float | None
    bound: float | None
    solve_time_s: float
    values: list[int] | None = None
    at_target: bool = False
    message: str = ""
    # CP-SAT's deterministic seconds (the work poet_compiler.work charges), when known.
    deterministic_s: float | None = None

    @property
    def has_solution(self) -> bool:
        return self.values is not None

    def value(self, var: Any) -> int:
        """The solution's value of a variable or literal (``~b`` included) of the model."""
        if self.values is None:
            raise ValueError(f"no solution to read ({self.status})")
        i = var.index
        return self.values[i] if i >= 0 else 1 - self.values[-i - 1]


def solve_native(m: Any, limits: NativeLimits) -> NativeResult:
    """Solve the native model ``m`` (from :func:`new_model`) under ``limits`` (the module's
    stopping rule). Inside a meter (:mod:`poet_compiler.work`) ``limits.time_limit_s`` is
    work: the deterministic limit (unless one is given), with the time to the meter's wall
    cap as the wall allowance; the call is charged its deterministic time."""
    det, wall = work.solver_limits(float(limits.time_limit_s))
    if det is not None:
        det = det if limits.deterministic_s is None else min(det, limits.deterministic_s)
        limits = dataclasses.replace(limits, time_limit_s=wall, deterministic_s=det,
                                     interleave=limits.interleave or limits.workers > 1)
    if limits.target is None and not limits.isolate:
        out = _solve_here(m, limits)
    else:
        run = NativeRun(m, limits)
        run.wait(math.inf)       # ends by the child's result, its death, or the cap past its limit
        out = run.stop()
    work.settle(out.deterministic_s if out.deterministic_s is not None else det, det, out.solve_time_s,
                float(limits.time_limit_s))
    return out


def _solve_here(m: Any, limits: NativeLimits,
                on_solution: Callable[..., None] | None = None,
                on_bound: Callable[[float], None] | None = None) -> NativeResult:
    """Solve in this process; ``on_solution(objective, bound, values)`` sees each solution,
    ``on_bound(bound)`` each improvement of the bound."""
    from ortools.sat.python import cp_model  # lazy: heavy; never loaded beside HiGHS

    started = time.perf_counter()
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.0, float(limits.time_limit_s))
    solver.parameters.num_workers = max(1, int(limits.workers))
    if limits.deterministic_s is not None:
        solver.parameters.max_deterministic_time = limits.deterministic_s
    if limits.seed is not None:
        solver.parameters.random_seed = limits.seed
    if limits.linearization_level is not None:
        solver.parameters.linearization_level = limits.linearization_level
    if limits.interleave:
        solver.parameters.interleave_search = True
    if limits.fix_to_hint:
        solver.parameters.fix_variables_to_their_hinted_value = True
    if limits.core:
        solver.parameters.num_workers = 1
        solver.parameters.optimize_with_core = True
        solver.parameters.linearization_level = 0
        solver.parameters.core_minimization_level = 1
    if on_bound is not None:
        solver.best_bound_callback = on_bound
    if on_solution is None:
        code = solver.solve(m)
    else:
        report = on_solution

        class _Report(cp_model.CpSolverSolutionCallback):
            """Hands each solution on; never stops the search (module docstring)."""

            def on_solution_callback(self) -> None:
                report(self.objective_value, self.best_objective_bound, list(self.response_proto.solution),
                       self.deterministic_time)

        code = solver.solve(m, _Report())
    status: NativeStatus = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible",
                            cp_model.INFEASIBLE: "infeasible"}.get(code, "unknown")  # type: ignore[assignment]
    elapsed = time.perf_counter() - started
    det = solver.deterministic_time
    if status not in ("optimal", "feasible"):
        message = "model invalid: " + m.validate() if code == cp_model.MODEL_INVALID else ""
        return NativeResult(status, None, None, elapsed, message=message, deterministic_s=det)
    return NativeResult(status, solver.objective_value, solver.best_objective_bound, elapsed,
                        list(solver.response_proto.solution), deterministic_s=det)


def _child(conn: Any, m: Any, limits: NativeLimits) -> None:
    """Body of the forked child: send the first solution within the target (the parent
    then kills this process), or, isolated, every solution and every improvement of the
    bound; then the search's own result."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # Ctrl-C is the parent's to handle
    target = limits.target
    sent = False

    def on_solution(objective: float, bound: float, values: list[int], det: float | None = None) -> None:
        nonlocal sent
        if not sent and target is not None and objective <= target:
            sent = True
            conn.send(("target", objective, bound, values, det))
        elif limits.isolate and not sent:
            conn.send(("solution", objective, bound, values))

    def on_bound(bound: float) -> None:
        conn.send(("bound", bound))

    try:
        res = _solve_here(m, limits, on_solution, on_bound if limits.isolate else None)
        conn.send(("result", res))
    except Exception as exc:  # noqa: BLE001 - reported to the parent as a status
        conn.send(("error", f"CP-SAT raised {type(exc).__name__}: {exc}"))
    conn.close()


class NativeRun:
    """A search in a forked child (module docstring) that its parent waits for
    (:meth:`wait`) and stops (:meth:`stop`), applying the memory limit's watch (:mod:`.memory`)."""

    def __init__(self, m: Any, limits: NativeLimits) -> None:
        self.started = time.perf_counter()
        ctx = multiprocessing.get_context("fork")
        self._conn, child = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_child, args=(child, m, limits), daemon=True)
        self._proc.start()
        child.close()
        self.cap = self.started + max(0.0, float(limits.time_limit_s)) + CHILD_GRACE_S
        self._watch = Watch(self._proc.pid)
        self.result: NativeResult | None = None
        self._latest: NativeResult | None = None     # the latest solution (isolated child)
        self._bound: float | None = None             # the best bound it reported
        self.error = ""

    @property
    def ended(self) -> bool:
        return self.result is not None or bool(self.error)

    def _pump(self, wait_s: float) -> None:
        """Take one message (waiting at most ``wait_s``), and check the limits."""
        msg = next_message(self._conn, self._proc, wait_s)
        if msg is None:
            if self._proc.is_alive() and time.perf_counter() > self.cap:
                self.error = "the CP-SAT process outlived its time limit"
        elif msg[0] == "target":
            self.result = NativeResult("feasible", msg[1], msg[2], time.perf_counter() - self.started,
                                       msg[3], at_target=True)   # charged its limit (see cpsat's good-enough stop)
        elif msg[0] == "solution":
            self._latest = NativeResult("feasible", msg[1], msg[2], time.perf_counter() - self.started, msg[3])
        elif msg[0] == "bound":
            self._bound = msg[1] if self._bound is None else max(self._bound, msg[1])
        elif msg[0] == "result":
            self.result = msg[1]
        else:
            self.error = msg[1]
        if not self.ended and self._watch.exceeded():
            self.error = self._watch.message()
        if self.ended and self._proc.is_alive():
            self._proc.kill()

    def wait(self, until: float) -> bool:
        """Take the child's messages until it ends or the instant ``until``; True if ended."""
        while not self.ended and time.perf_counter() < until:
            self._pump(min(0.02, max(0.0, until - time.perf_counter())))
        return self.ended

    def stop(self) -> NativeResult:
        """End the child (if it still runs). The search's result if it ended; else its
        latest solution (or none) with the best bound it reported, status "feasible" (or
        "unknown"), taken before the kill: a child killed here did not fail."""
        elapsed = time.perf_counter() - self.started
        latest, bound = self._latest, self._bound
        if self.result is not None:
            out = self.result
        elif latest is not None:
            best = bound if latest.bound is None or bound is None else max(bound, latest.bound)
            out = NativeResult("feasible", latest.objective, best, elapsed, latest.values, message=self.error)
        else:
            out = NativeResult("unknown", None, bound, elapsed, message=self.error)
        if self._proc.is_alive():
            self._proc.kill()
        self._proc.join(timeout=5.0)
        self._conn.close()
        if self.result is None and out.values is not None and out.message:
            out.message = f"{out.message}; its last solution is kept"
        return out


__all__ = ["CHILD_GRACE_S", "NativeLimits", "NativeResult", "NativeRun", "NativeStatus", "new_model", "solve_native"]
