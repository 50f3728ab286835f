"""Fragmentation on the random layered DAGs: the arena planner's effort, and the interval
search's arena reserves, round by round.

``--efforts``: solve the interval model of the DAG (3 copies, ``--seconds``), lay its
schedule out at growing planner efforts and with the rescue, and print each arena against
the live peak and the budget.

``--search``: run ``interval_search`` alone for ``--seconds`` and print every round: the
solve (reserves held, result) and the arena check (live peak, arena, budget).

    PYTHONPATH=. .venv/bin/python bench/fragmentation_bench.py --nodes 100 --ram 90% --seconds 60 --efforts
    PYTHONPATH=. .venv/bin/python bench/fragmentation_bench.py --nodes 100 --ram 90% --seconds 120 --search
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from interval_bench import problem_for  # noqa: E402
from time_limit_bench import layered_dag  # noqa: E402

from poet_compiler.schedule.arena import buffers_of, peak_live_bytes, plan_arena, rescue_arena  # noqa: E402
from poet_compiler.schedule.cleanup import remove_pointless_work  # noqa: E402
from poet_compiler.schedule.linearize import linearize  # noqa: E402
from poet_compiler.solve import interval_search as search  # noqa: E402

EFFORTS = ((0, 2.0), (16, 10.0), (64, 30.0), (256, 120.0))


def efforts(problem, seconds: float) -> None:
    out = search._solve(problem, problem, [], 3, time.perf_counter() + seconds, None, 2, [])
    if out.schedule is None:
        print(f"no schedule in {seconds:g} s ({out.status})")
        return
    g = problem.graph
    program = remove_pointless_work(g, linearize(g, out.schedule, mode=problem.mode))
    buffers = buffers_of(g, program)
    print(f"schedule {out.energy_j:.2f} J ({out.status}), {len(buffers)} buffers, live peak "
          f"{peak_live_bytes(buffers)} B, budget {problem.activation_budget} B")
    for effort, limit in EFFORTS:
        t0 = time.perf_counter()
        laid = plan_arena(g, program, effort=effort, budget_bytes=problem.activation_budget, time_limit_s=limit)
        print(f"  plan_arena effort {effort:3d}, limit {limit:5.1f} s: arena {laid.arena_bytes} B "
              f"({laid.meta.get('arena_order')}, {time.perf_counter() - t0:.1f} s)")
    t0 = time.perf_counter()
    rescued = rescue_arena(g, program, problem.activation_budget, time_limit_s=60.0)
    print(f"  rescue_arena, 60 s: {None if rescued is None else rescued.arena_bytes} "
          f"({time.perf_counter() - t0:.1f} s)")


def rounds(problem, seconds: float) -> None:
    t_start = time.perf_counter()
    real_solve, real_finalize = search._solve, search.finalize

    def solve(problem_, sync, usable, copies, until, target_j, threads, reserves):
        out = real_solve(problem_, sync, usable, copies, until, target_j, threads, reserves)
        most = max((r.bytes for r in reserves), default=0)
        print(f"  [{time.perf_counter() - t_start:6.1f} s] solve: {len(reserves)} reserves (most {most} B) -> "
              f"{out.status}, {out.energy_j} J in {out.solve_s} s", flush=True)
        return out

    def finalize(problem_, schedule, **kw):
        res = real_finalize(problem_, schedule, **kw)
        print(f"  [{time.perf_counter() - t_start:6.1f} s] arena check: live peak {res.peak_ram_bytes} B, arena "
              f"{res.arena_bytes} B, budget {problem_.activation_budget} B", flush=True)
        return res

    search._solve, search.finalize = solve, finalize
    out = search.interval_search(problem, [], time_limit_s=seconds, threads=2)
    print(json.dumps({"energy_j": out.energy_j, "arena_fits": out.arena_fits, "arena_retries": out.arena_retries,
                      "wall_s": round(time.perf_counter() - t_start, 1),
                      "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--ram", default="90%")
    ap.add_argument("--seconds", type=float, default=60.0)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--efforts", action="store_true")
    mode.add_argument("--search", action="store_true")
    args = ap.parse_args()
    path = Path(tempfile.mkdtemp(prefix="poetc-frag-")) / f"layered_{args.nodes}.json"
    path.write_text(json.dumps(layered_dag(args.nodes)))
    problem = problem_for(str(path), "m4", args.ram, None, "remat")
    (efforts if args.efforts else rounds)(problem, args.seconds)


if __name__ == "__main__":
    main()
