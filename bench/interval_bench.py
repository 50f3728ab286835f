"""The interval formulation alone, beside the pipeline's own bound (issue 18).

For each cell: build the interval model (solve/formulation/interval.py) with C copies,
hint it from the best heuristic schedule it can hold, solve it on CP-SAT (2 workers,
in-process) for a fixed time, decode the schedule and judge it with the simulator (live
bytes) and with finalize (the static arena too); print the model's size, its own bound
(valid for at most C stays per tensor only), the cover bound, and the peak RSS.

    PYTHONPATH=. .venv/bin/python bench/interval_bench.py --cells kws_m4_256k,dag100_90 --seconds 30
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from time_limit_bench import layered_dag  # noqa: E402

from poet_compiler.api import load_costs, resolve_graph  # noqa: E402
from poet_compiler.graph.io import read_graph  # noqa: E402
from poet_compiler.solve.backends.native import NativeLimits, solve_native  # noqa: E402
from poet_compiler.solve.budgets import reference, resolve_deadline, resolve_ram  # noqa: E402
from poet_compiler.solve.cover import cover_bound  # noqa: E402
from poet_compiler.solve.finalize import finalize  # noqa: E402
from poet_compiler.solve.formulation.interval import build_interval, hint  # noqa: E402
from poet_compiler.solve.problem import Problem, feasible_energy  # noqa: E402
from poet_compiler.solve.warm_start import warm_start_candidates  # noqa: E402

# name: (model, device, ram, deadline, mode, copies)
CELLS = {
    "kws_m4_256k": ("models/kws_dscnn.onnx", "m4", "256k", None, "poet", 3),
    "mobilenetv2_a72_50": ("mobilenetv2", "a72", "50%", None, "poet", 2),
    "dag100_90": ("{dag100}", "m4", "90%", None, "remat", 2),
    "dag100_80": ("{dag100}", "m4", "80%", None, "remat", 4),
    "gpt2_large_mini_a72_50": ("gpt2_large_mini", "a72", "50%", None, "poet", 2),
}


def problem_for(model: str, device: str, ram: str, deadline: str | None, mode: str) -> Problem:
    graph = read_graph(model) if model.endswith(".json") else resolve_graph(model)
    costs = load_costs(graph, device)
    ref = reference(graph, costs)
    return Problem(graph, costs, resolve_ram(ram, ref, costs), resolve_deadline(deadline, ref, costs), mode=mode)


def run(name: str, seconds: float, dag100: Path) -> dict:
    model, device, ram, deadline, mode, copies = CELLS[name]
    problem = problem_for(model.replace("{dag100}", str(dag100)), device, ram, deadline, mode)
    sync = problem if problem.synchronous else dataclasses.replace(problem, transfers="sync")
    t0 = time.perf_counter()
    im = build_interval(sync, copies=copies)
    build_s = time.perf_counter() - t0
    held = next((name for _e, name, s in warm_start_candidates(sync, None) if hint(im, s)), None)
    res = solve_native(im.model, NativeLimits(time_limit_s=seconds, workers=2))
    row: dict = {"cell": name, "n": problem.n, "copies_per_tensor": copies, "build_s": round(build_s, 3), **im.stats,
                 "hint": held, "status": res.status, "solve_s": round(res.solve_time_s, 1)}
    if res.has_solution:
        schedule = im.schedule(res.value)
        row["energy_j"] = feasible_energy(sync, schedule)
        row["model_bound_j"] = im.energy_bound(res.bound or 0.0)
        fin = finalize(sync, schedule, strategy="optimal", arena_time_s=20)
        row.update(arena_fits=fin.ok, arena_bytes=fin.arena_bytes, peak_bytes=fin.peak_ram_bytes,
                   budget=sync.activation_budget)
    row["cover_bound_j"] = cover_bound(sync, time_limit_s=10).energy_j
    row["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--seconds", type=float, default=30.0)
    args = ap.parse_args()
    dag100 = Path(tempfile.mkdtemp(prefix="poetc-dag-")) / "layered_100.json"
    dag100.write_text(json.dumps(layered_dag(100)))
    for name in args.cells.split(","):
        print(json.dumps(run(name, args.seconds, dag100)), flush=True)


if __name__ == "__main__":
    main()
