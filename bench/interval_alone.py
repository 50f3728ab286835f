"""The interval search alone on a random layered DAG: does it find a first schedule?

The pipeline gives the interval search a share of ``--time-limit``; this gives it all of
the time (no hint: nothing in hand, so its least-RAM search runs first), to tell "too
little time" from "CP-SAT finds no first solution" (BENCHMARKS.md, issue 18 sessions 4-5)::

    PYTHONPATH=. .venv/bin/python bench/interval_alone.py --nodes 500 --ram 0.8 --seconds 280

Prints one JSON line: the search's summary, wall seconds and the MOVEs of its layout.
"""

from __future__ import annotations

import argparse
import json
import time

from bench.time_limit_bench import layered_dag
from poet_compiler.devices.cost_model import costs_for
from poet_compiler.graph.io import graph_from_dict
from poet_compiler.solve import interval_search as search
from poet_compiler.solve.budgets import reference, resolve_ram
from poet_compiler.solve.problem import Problem


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--ram", type=float, default=0.8, help="fraction of the no-remat peak")
    ap.add_argument("--seconds", type=float, default=280.0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    graph = graph_from_dict(layered_dag(args.nodes))
    costs = costs_for(graph, None)
    ram = resolve_ram(f"{args.ram * 100:g}%", reference(graph, costs), costs)
    problem = Problem(graph, costs, ram, mode="remat")
    started = time.perf_counter()
    out = search.interval_search(problem, [], time_limit_s=args.seconds, threads=args.threads)
    print(json.dumps({"nodes": args.nodes, "ram": args.ram, "seconds": args.seconds,
                      "wall_s": round(time.perf_counter() - started, 1), **out.summary(),
                      "n_move": None if out.layout is None else out.layout.n_move}))


if __name__ == "__main__":
    main()
