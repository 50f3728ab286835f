"""The presence bound alone on a time_limit_bench cell: how far the core search gets in a
given time, and whether its optimum realized as a schedule fits the budget.

    PYTHONPATH=. .venv/bin/python bench/presence_alone.py --cell dag100_80 --time-limit 600

One worker, no hint (as ``presence_bound`` runs it without a schedule in hand). Prints one
JSON row: the bound, whether it closed, the seconds, and the realized schedule's simulated
energy and peak against the budget.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from heuristics_time import problem_of  # noqa: E402

from poet_compiler.schedule.linearize import linearize  # noqa: E402
from poet_compiler.schedule.simulate import simulate  # noqa: E402
from poet_compiler.solve.presence import presence_bound  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cell", required=True)
    ap.add_argument("--time-limit", type=float, default=300.0)
    args = ap.parse_args()
    problem = problem_of(args.cell)
    started = time.perf_counter()
    found = presence_bound(problem, time_limit_s=args.time_limit)
    row = {"cell": args.cell, "n": problem.n, "pairs": found.pairs, "bound_j": found.energy_j,
           "closed": found.closed, "seconds": round(time.perf_counter() - started, 1),
           "budget_bytes": problem.activation_budget}
    if found.schedule is not None:
        program = linearize(problem.graph, found.schedule, mode=problem.mode, dma=not problem.synchronous)
        sim = simulate(problem.graph, problem.costs, program)
        row.update(realized_energy_j=sim.energy_j, realized_peak_bytes=sim.peak_bytes)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
