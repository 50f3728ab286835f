"""How long each warm-start heuristic takes, and what it finds, per cell (issue 18).

The warm starts (poet_compiler/solve/warm_start.py) run every heuristic baseline, quick
ones first, and stop at ``milp.WARM_START_SHARE`` of the time limit. This measures each
heuristic's plan time and energy on the benchmark's cells, so the order and the share
rest on figures: which heuristic is cut at a given limit, and whether it was the
cheapest (the answer is never above the cheapest warm start that ran).

    PYTHONPATH=. .venv/bin/python bench/heuristics_time.py --cells gpt2_large_a72_50,op_resnet18_cifar_m4_50_2.0 \\
        -o bench/results/heuristics_time.jsonl

A cell is a ``bench/time_limit_bench.py`` cell (its model, device, budget and deadline);
each row: the cell, the heuristic, its seconds, its status and energy (plans only: no
arena planned, as in the warm starts).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench.time_limit_bench import cell_args
from poet_compiler import api
from poet_compiler.solve.baselines import BASELINES
from poet_compiler.solve.baselines._common import plans_only
from poet_compiler.solve.problem import Problem
from poet_compiler.solve.warm_start import QUICK_FIRST
from tests.support.layered import layered_graph


def _option(args: list[str], flag: str, default: str | None = None) -> str | None:
    return args[args.index(flag) + 1] if flag in args else default


def problem_of(cell: str) -> Problem:
    """The Problem ``poetc compile`` would solve for a time_limit_bench cell."""
    args, _ = cell_args(cell)
    model = args[0]
    if model.startswith("{dag"):
        graph = layered_graph(int(model[4:-1]))
    else:
        _, _, graph = api._load(model, _option(args, "--granularity", "op") or "op", None, None, None,
                                None, None, None, None)
    # A layered DAG carries its own costs (no device), as a graph file does.
    costs = api.load_costs(graph, api._profile_for(graph if model.startswith("{dag") else model,
                                                   _option(args, "--device")))
    ref = api.reference(graph, costs)
    return Problem(graph=graph, costs=costs, ram_budget_bytes=api.resolve_ram(_option(args, "--ram"), ref, costs),
                   deadline_s=api.resolve_deadline(_option(args, "--deadline"), ref, costs),
                   mode=_option(args, "--mode", "poet"))  # type: ignore[arg-type]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", required=True)
    ap.add_argument("-o", "--out", type=Path)
    args = ap.parse_args()
    for cell in args.cells.split(","):
        problem = problem_of(cell)
        for name in QUICK_FIRST:
            started = time.perf_counter()
            with plans_only():
                res = BASELINES[name](problem)
            row = {"cell": cell, "n": problem.n, "heuristic": name, "seconds": round(time.perf_counter() - started, 3),
                   "status": res.status, "energy_j": res.energy_j}
            line = json.dumps(row)
            print(line, flush=True)
            if args.out is not None:
                with args.out.open("a") as f:
                    f.write(line + "\n")


if __name__ == "__main__":
    main()
