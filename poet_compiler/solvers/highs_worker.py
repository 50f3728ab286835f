"""Child process of the HiGHS backend: read a pickled (LinearModel, options), solve, send the result.

Imports highspy and nothing from OR-Tools (see :mod:`.highs`). The model comes on stdin;
progress and the result go back on a pipe of their own (the file descriptor named on the
command line), never on stdout or stderr: HiGHS and the C libraries under it print there
(highspy 1.16 prints its banner to stdout even with ``output_flag`` off).
"""

from __future__ import annotations

import math
import pickle
import sys
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any  # Any: highspy objects, imported lazily

import numpy as np

from poet_compiler.solvers.base import (
    BackendOptions,
    BackendResult,
    BackendStatus,
    ProgressLine,
    within_gap,
)
from poet_compiler.solvers.model import LinearModel


def run(model: LinearModel, options: BackendOptions, send: Connection | None = None) -> BackendResult:
    """Solve ``model``; with ``options.progress_pipe``, (incumbent, bound) go to ``send``."""
    import highspy  # lazy: loaded only in the child process (it conflicts with OR-Tools)

    started = time.perf_counter()
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(options.time_limit_s))
    h.setOptionValue("threads", int(options.threads))
    h.setOptionValue("mip_rel_gap", 1e-9 if options.floor_only else max(1e-9, float(options.relative_gap)))
    h.setOptionValue("mip_abs_gap", 1e-12)
    h.setOptionValue("random_seed", int(options.seed))
    h.passModel(_lp(model))
    if model.hint:
        sol = highspy.HighsSolution()
        vals = np.array(model.lb, dtype=float)
        for v, x in model.hint.items():
            vals[v] = x
        sol.col_value = list(vals)
        try:
            h.setSolution(sol)
        except Exception:  # noqa: BLE001 - a rejected hint only loses the warm start
            pass
    line = ProgressLine("highs", model.objective_unit, options.progress and not options.progress_pipe, every_s=1.0)
    if options.progress or options.progress_pipe or model.objective_floor is not None:
        _watch(h, model, options, line, send)
    h.run()
    line.close()
    return _result(h, model, time.perf_counter() - started)


def _lp(model: LinearModel) -> Any:
    """``model`` as a ``highspy.HighsLp`` (a column-wise sparse matrix)."""
    import highspy  # lazy: loaded only in the child process (it conflicts with OR-Tools)

    inf = highspy.kHighsInf
    n = model.n_vars
    lp = highspy.HighsLp()
    lp.num_col_ = n
    lp.num_row_ = len(model.rows)
    cost = np.zeros(n)
    for v, c in model.objective.items():
        cost[v] = c
    lp.col_cost_ = cost
    lp.col_lower_ = np.array(model.lb, dtype=float)
    lp.col_upper_ = np.array(model.ub, dtype=float)
    lp.row_lower_ = np.array([r.lo if math.isfinite(r.lo) else -inf for r in model.rows], dtype=float)
    lp.row_upper_ = np.array([r.hi if math.isfinite(r.hi) else inf for r in model.rows], dtype=float)
    cols: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for j, r in enumerate(model.rows):
        for v, c in r.terms.items():
            cols[v].append((j, c))
    start, index, value = [0], [], []
    for col in cols:
        for j, c in col:
            index.append(j)
            value.append(c)
        start.append(len(index))
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.array(start, dtype=np.int32)
    lp.a_matrix_.index_ = np.array(index, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(value, dtype=float)
    lp.integrality_ = [highspy.HighsVarType.kInteger if k == "bin" else highspy.HighsVarType.kContinuous
                       for k in model.kind]
    return lp


def _watch(h: Any, model: LinearModel, options: BackendOptions, line: ProgressLine, send: Connection | None) -> None:
    """A MIP callback that reports progress (on the pipe, throttled, or the line) and
    interrupts the search once the model's outside bound proves the incumbent."""
    import highspy  # lazy: loaded only in the child process (it conflicts with OR-Tools)

    floor = model.objective_floor
    last = [0.0]

    def report(inc: float, bound: float) -> None:
        # Throttled progress for the parent's status line.
        now = time.perf_counter()
        if now - last[0] >= 0.2:
            last[0] = now
            if send is not None:
                send.send(("progress", inc, bound))

    try:
        def cb(callback_type, message, data_out, data_in, user_data):  # noqa: ANN001
            inc = float(data_out.objective_function_value)
            bound = max(float(data_out.mip_dual_bound), floor if floor is not None else -math.inf)
            if options.progress_pipe:
                report(inc, bound)
            elif options.progress:
                line.update(inc, bound)
            # The outside bound proves the incumbent good enough: interrupt.
            if floor is not None and math.isfinite(inc) and \
                    within_gap(inc, floor, max(options.relative_gap, 1e-12)):
                data_in.user_interrupt = True
        h.setCallback(cb, None)
        h.startCallback(highspy.cb.HighsCallbackType.kCallbackMipInterrupt)
    except Exception:  # noqa: BLE001 - progress is best effort on older highspy
        pass


def _result(h: Any, model: LinearModel, elapsed: float) -> BackendResult:
    """What the finished run found, judged by the model's outside bound too."""
    import highspy  # lazy: loaded only in the child process (it conflicts with OR-Tools)

    status = h.getModelStatus()
    info = h.getInfo()
    stats = dict(model.stats())
    floor = model.objective_floor
    MS = highspy.HighsModelStatus
    if status == MS.kInfeasible:
        return BackendResult("infeasible", None, None, None, elapsed, "highs", "proven infeasible", stats)
    if info.primal_solution_status != 2:   # not kSolutionStatusFeasible
        return BackendResult("timeout", None, None, None, elapsed, "highs",
                             f"no solution ({h.modelStatusToString(status)})", stats)
    values = list(h.getSolution().col_value)
    obj = float(info.objective_function_value)
    bound = float(info.mip_dual_bound)
    if floor is not None:
        bound = max(bound, floor) if math.isfinite(bound) else floor
    closed = math.isfinite(bound) and obj - bound <= 1e-9 * max(1.0, abs(obj))
    st: BackendStatus = "optimal" if (status == MS.kOptimal or floor is not None) and closed else "feasible"
    return BackendResult(st, values, obj, bound if math.isfinite(bound) else None, elapsed, "highs", "", stats)


def main(argv: list[str]) -> int:
    """``highs_worker FD``: messages to the parent go on file descriptor FD only:
    ``("progress", incumbent, bound)``, then ``("result", BackendResult)`` or
    ``("error", one line, traceback)`` for an exception of the child's own."""
    send = Connection(int(argv[0]), readable=False)
    try:
        model, options = pickle.loads(sys.stdin.buffer.read())
        send.send(("result", run(model, options, send)))
    except Exception as exc:  # noqa: BLE001 - handed to the parent, which reports it as a bug
        send.send(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
        return 1
    finally:
        send.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
