"""OR-Tools CP-SAT backend: integer-scaled model (:mod:`.scaling`), hints, progress line.

CP-SAT runs in a forked child process (:func:`solve_cpsat`), so that a failure inside
the solver is a status with a message, never the end of poetc. OR-Tools 9.15 aborts the
whole process ("Check failed: solution->size() == postsolve_mapping.size()") when a
search is stopped while a hinted solution is still being postsolved early in the solve:
POET's own ``linear`` graph at 3388 B (shared/regressions) did it every time, from a
solution callback and from another thread alike. So poetc never stops CP-SAT from a
callback, and whatever stops it (the wall cap) first takes the child's latest solution:
if the child then dies, that solution is kept.

A search ends on CP-SAT's own terms: its deterministic limit, the gap to its own bound,
a proof, or the wall cap. The model's objective floor (an outside bound) is the reported
bound, never a stop. With several workers the interleaved search is deterministic at its
synchronization points only: between two of them the workers' tasks run at once, and the
solution callback sees strict improvements in the order the threads report them. A stop
on the first callback solution within the gap of the floor answered with whichever task
came first (random problem 36 of ``bench/same_bytes.py``: two tasks of one batch found
different schedules of the same cost, and one run in about 36 under load took the other;
BENCHMARKS.md, "Reproducibility"). CP-SAT's own stops fall on a synchronization point,
and its answer is the first of its solution pool, ordered by objective, then by values.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import multiprocessing
import signal
import threading
import time
from collections.abc import Callable
from typing import Any  # Any: OR-Tools objects, imported lazily

from poet_compiler import work
from poet_compiler.solvers.base import (
    BackendOptions,
    BackendResult,
    BackendStatus,
    ProgressLine,
    exit_reason,
)
from poet_compiler.solvers.memory import Watch
from poet_compiler.solvers.model import LinearModel
from poet_compiler.solvers.scaling import Scaled, scale_model


def solve_cpsat_here(model: LinearModel, options: BackendOptions, *,
                     on_solver: Callable[[object], None] | None = None,
                     on_solution: Callable[[float, list[float]], None] | None = None) -> BackendResult:
    """Solve on CP-SAT in this process. ``on_solver`` receives the ``CpSolver`` before
    the search starts; ``on_solution`` (objective, values) each improving solution, which
    decides nothing (module docstring)."""
    from ortools.sat.python import cp_model  # lazy: heavy; never loaded beside HiGHS

    started = time.perf_counter()
    deadline = started + float(options.time_limit_s)
    sc = scale_model(model)
    built = _cp_model(model, sc, deadline)
    if built is None:
        # The wall allowance ran out while building (1.7 s on a 250-node DAG's guided
        # sub-problem, given 1.0 s): no search.
        return BackendResult("timeout", None, None, None, time.perf_counter() - started, "cpsat",
                             "no time left to search after building the model", model.stats(),
                             deterministic_s=0.0)
    cp, xs = built
    solver = cp_model.CpSolver()
    _set_parameters(solver.parameters, options, deadline)
    search = _Search(model, sc, options, started, on_solution)
    if on_solver is not None:
        on_solver(solver)
    if options.progress or on_solution is not None:
        solver.best_bound_callback = lambda b: search.line.update(bound=search.to_phys(b))
        status = solver.solve(cp, search.callback(cp_model.CpSolverSolutionCallback))
    else:
        status = solver.solve(cp)
    search.line.close()
    return search.result(cp, solver, status, xs)


def _cp_model(model: LinearModel, sc: Scaled, deadline: float) -> tuple[Any, list[Any]] | None:
    """The CP-SAT model of ``sc`` (``model`` scaled to integers) with its hint, and its
    variables; None when the ``time.perf_counter()`` instant ``deadline`` passes first."""
    from ortools.sat.python import cp_model  # lazy: heavy; never loaded beside HiGHS

    cp = cp_model.CpModel()
    xs = []
    for v in range(model.n_vars):
        if model.kind[v] == "bin":
            x = cp.new_bool_var(model.names[v])
            if sc.lb[v] == sc.ub[v]:
                cp.add(x == sc.lb[v])
        else:
            x = cp.new_int_var(sc.lb[v], sc.ub[v], model.names[v])
        xs.append(x)
    for k, (terms, lo, hi) in enumerate(sc.rows):
        if k % 256 == 0 and time.perf_counter() > deadline:
            return None
        expr = sum(c * xs[v] for v, c in terms.items())
        if lo is not None and hi is not None and lo == hi:
            cp.add(expr == lo)
        else:
            if lo is not None:
                cp.add(expr >= lo)
            if hi is not None:
                cp.add(expr <= hi)
    if sc.objective:
        cp.minimize(sum(c * xs[v] for v, c in sorted(sc.objective.items())))
    for v, val in sorted(model.hint.items()):
        cp.add_hint(xs[v], int(round(val)))
    return cp, xs


def _set_parameters(params: Any, options: BackendOptions, deadline: float) -> None:
    """CP-SAT's parameters for ``options``, its wall limit what is left to ``deadline``."""
    # The wall allowance counts from the call: the build is part of it.
    params.max_time_in_seconds = max(0.01, deadline - time.perf_counter())
    params.num_workers = max(1, int(options.threads))
    params.random_seed = options.seed
    if options.deterministic:
        # Interleaved search is deterministic for any number of workers; stopping it on
        # deterministic time (not wall time) makes the answer reproducible. The wall limit
        # stays as a cap: on a machine too loaded to reach the deterministic limit in time
        # the answer can differ. Measured on ResNet-18-CIFAR at 30 %: same schedule twice,
        # and a better one (108.2 J) than the portfolio search in the same time (109.5 J).
        params.interleave_search = True
        if options.deterministic_s is not None:
            params.max_deterministic_time = max(0.01, float(options.deterministic_s))
    params.relative_gap_limit = 0.0 if options.floor_only else max(0.0, float(options.relative_gap))
    if options.full_subsolvers:
        params.subsolvers.extend(options.full_subsolvers)
    if options.large:
        # Measured on ResNet-18 (132 nodes, ~70k binaries): the default presolve loops
        # take ~29 s; one iteration without probing keeps the model nearly as small.
        params.max_presolve_iterations = 1
        params.cp_model_probing_level = 0
        params.linearization_level = 2
        if options.deterministic:
            # Interleaved search synchronizes after each batch of tasks (by default three
            # per worker) and starts no batch it cannot finish within the limits; here each
            # full-problem task takes seconds (its first LP), so one batch could take most
            # of the time and the LNS workers, which find the better schedules, never ran.
            # Measured on ResNet-18-CIFAR a72 30 % 1.5x's guided sub-problem (29 s): one
            # batch, stopped at 17 s with the hint's 51.72 J; a batch per worker count:
            # 45.11 J in 29 s, the same on 3 of 3 runs (portfolio search: 45.48-45.54 J).
            params.interleave_batch_size = params.num_workers


class _Search:
    """One CP-SAT search's figures in physical units: its progress line and the result it
    ends with."""

    def __init__(self, model: LinearModel, sc: Scaled, options: BackendOptions, started: float,
                 on_solution: Callable[[float, list[float]], None] | None) -> None:
        self.sc, self.options, self.started = sc, options, started
        self.floor = model.objective_floor
        self.line = ProgressLine("cpsat", model.objective_unit, options.progress)
        self.on_solution = on_solution
        self.stats = {"u_t": sc.u_t, "u_e": sc.u_e, "objective_rounding": sc.obj_err * sc.obj_unit, **model.stats()}

    def to_phys(self, x: float) -> float:
        return x * self.sc.obj_unit

    def valid_bound(self, b: float) -> float:
        # Integer objective: round the bound up, then subtract the cost rounding so it
        # bounds the real objective; the outside bound is one too.
        phys = (math.ceil(b - 1e-9) - self.sc.obj_err) * self.sc.obj_unit
        return phys if self.floor is None else max(phys, self.floor)

    def callback(self, base: type) -> Any:
        """A ``CpSolverSolutionCallback`` (``base``: the class, imported lazily) that
        reports each improving solution; it decides nothing (module docstring)."""
        search = self

        class _Callback(base):
            def on_solution_callback(self) -> None:
                search.on_solution_found(self)

        return _Callback()

    def on_solution_found(self, cb: Any) -> None:
        inc = self.to_phys(cb.ObjectiveValue())
        self.line.update(inc, max(self.to_phys(cb.BestObjectiveBound()), self.floor or -math.inf), force=True)
        if self.on_solution is not None:
            self.on_solution(inc, [float(x) for x in cb.response_proto.solution])

    def result(self, cp: Any, solver: Any, status: Any, xs: list[Any]) -> BackendResult:
        """What the finished search (``status``) found."""
        from ortools.sat.python import cp_model  # lazy: heavy; never loaded beside HiGHS

        sc, floor = self.sc, self.floor
        elapsed = time.perf_counter() - self.started
        det_s = solver.deterministic_time
        if status == cp_model.INFEASIBLE:
            return BackendResult("infeasible", None, None, None, elapsed, "cpsat", "proven infeasible", self.stats,
                                 deterministic_s=det_s)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            msg = "model invalid: " + cp.validate() if status == cp_model.MODEL_INVALID else \
                "no solution within its limit"
            return BackendResult("timeout", None, None, None, elapsed, "cpsat", msg, self.stats,
                                 deterministic_s=det_s)
        values = [float(solver.value(x)) for x in xs]
        obj = solver.objective_value if sc.objective else 0.0
        bound = solver.best_objective_bound if sc.objective else 0.0
        # OPTIMAL also means "within relative_gap_limit": only a closed gap is optimal.
        closed = sc.objective == {} or math.ceil(bound - 1e-9) >= round(obj) or \
            (floor is not None and obj * sc.obj_unit <= floor * (1 + 1e-12))
        st: BackendStatus = "optimal" if status == cp_model.OPTIMAL and closed else "feasible"
        return BackendResult(st, values, obj * sc.obj_unit, self.valid_bound(bound), elapsed, "cpsat", "", self.stats,
                             deterministic_s=det_s)


def _child(conn, model: LinearModel, options: BackendOptions) -> None:  # noqa: ANN001
    """Body of the child process: solve on a thread, stop it when the parent asks (its
    wall cap), report back."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # Ctrl-C is the parent's to handle
    holder: dict[str, object] = {}
    latest: list[tuple[float, list[float]]] = []
    stop = threading.Event()
    done: list[BackendResult] = []

    def run() -> None:
        try:
            done.append(solve_cpsat_here(
                model, options, on_solver=lambda s: holder.__setitem__("solver", s),
                on_solution=lambda obj, vals: latest.__setitem__(slice(None), [(obj, vals)])))
        finally:
            stop.set()

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    stopped = False
    while worker.is_alive():
        if conn.poll(0.02):
            if conn.recv()[0] == "stop":
                stop.set()
        if stop.is_set() and not stopped and worker.is_alive():
            stopped = True
            if latest:
                conn.send(("solution", *latest[0]))   # kept even if stopping aborts the child
            solver = holder.get("solver")
            if solver is not None:
                solver.stop_search()  # type: ignore[attr-defined]
    worker.join()
    conn.send(("result", done[0]) if done else ("error", "CP-SAT raised an exception"))
    conn.close()


def next_message(conn, proc, wait_s: float) -> tuple | None:  # noqa: ANN001 - a Connection and a Process
    """A solver child's next message within ``wait_s``; None when it sent nothing and is
    still running (or has ended with messages still to read); ``("died", reason)`` when
    it ended without a message left, or its pipe broke."""
    try:
        ready = conn.poll(wait_s)
    except (OSError, EOFError):
        ready = False
    if ready:
        try:
            return conn.recv()
        except (EOFError, OSError):
            proc.join(timeout=5.0)
    elif proc.is_alive() or conn.poll(0):
        return None
    return ("died", f"the CP-SAT process died ({exit_reason(proc.exitcode)})")


def solve_cpsat(model: LinearModel, options: BackendOptions) -> BackendResult:
    """Solve on CP-SAT in a forked child process (module docstring).

    Inside a meter (:mod:`poet_compiler.work`) ``options.time_limit_s`` is work: it
    becomes CP-SAT's deterministic limit, the wall allowance is the time to the meter's
    cap, and the call is charged its deterministic time."""
    det, wall = work.solver_limits(float(options.time_limit_s))
    if det is not None:
        options = dataclasses.replace(options, deterministic_s=det, time_limit_s=wall, deterministic=True)
    out = _solve_in_child(model, options)
    work.settle(out.deterministic_s if out.deterministic_s is not None else det, det, out.solve_time_s,
                float(options.time_limit_s))
    return out


def _solve_in_child(model: LinearModel, options: BackendOptions) -> BackendResult:
    started = time.perf_counter()
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=True)
    proc = ctx.Process(target=_child, args=(child, model, options), daemon=True)
    proc.start()
    child.close()
    # The child stops on its own deterministic/wall limits; past this, stop it, then kill.
    wall_cap = started + float(options.time_limit_s) * 1.05 + 2.0
    watch = Watch(proc.pid)
    solution: tuple[float, list[float]] | None = None
    result: BackendResult | None = None
    error = ""
    asked = killed = False
    while result is None and not error:
        msg = next_message(parent, proc, 0.05)
        if msg is not None:
            if msg[0] == "solution":
                solution = (msg[1], msg[2])
            elif msg[0] == "result":
                result = msg[1]
            else:       # "error", "died"
                error = msg[1]
        if result is None and not error and watch.exceeded():
            proc.kill()         # a process, not a search, is ended (module docstring)
            error = watch.message()
        if msg is not None:
            continue
        now = time.perf_counter()
        if now > wall_cap and not asked:
            with contextlib.suppress(OSError, ValueError):     # the child may have gone
                parent.send(("stop",))   # it sends its latest solution, then stops
            asked = True
        elif now > wall_cap + 5.0 and not killed:
            proc.kill()
            killed = True
    if result is not None and proc.is_alive():
        proc.kill()     # the answer is in hand
    proc.join(timeout=5.0)
    parent.close()
    if result is not None:
        return result
    elapsed = time.perf_counter() - started
    if solution is not None:
        # The child was stopped with a solution in hand and then failed: keep it.
        return BackendResult("feasible", solution[1], solution[0], None, elapsed, "cpsat",
                             f"{error}; its last solution is kept", {})
    return BackendResult("timeout", None, None, None, elapsed, "cpsat", f"solver failure: {error}", {})
