"""The guided stage's first sub-problem under CP-SAT subsolver choices, side by side.

For each cell: the warm starts and the eviction-cover bound as ``poetc compile`` makes
them, then the first guided sub-problem (``guided.build_guided``, at half the deadline's
slack, from the better of the best heuristic's schedule and the cover's realization),
solved once per variant from the same hint for ``--limit`` seconds. A variant is a list
of full-problem subsolvers joined by ``+`` (``all``: CP-SAT's whole portfolio, as before
session 17; ``max_lp``: ``guided.GUIDED_SUBSOLVERS``). Printed: the simulated energy, the
best objective at 10/20/30 s, the solver's bound and time (a closed sub-problem stops).

    PYTHONPATH=. .venv/bin/python bench/guided_subsolvers.py \\
        --cells op_resnet18_cifar_a72_30_1.5,op_resnet18_cifar_m4_50_2.0 --variants all,max_lp
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench.heuristics_time import problem_of
from bench.time_limit_bench import emit
from poet_compiler.solve import guided
from poet_compiler.solve.backends.base import BackendOptions, is_large
from poet_compiler.solve.backends.cpsat import solve_cpsat_here
from poet_compiler.solve.cover import cover_bound
from poet_compiler.solve.problem import feasible_energy
from poet_compiler.solve.warm_start import warm_start_candidates


def run_cell(cell: str, variants: list[str], limit: float) -> list[dict]:
    problem = problem_of(cell)
    candidates = warm_start_candidates(problem, until=time.perf_counter() + 20)
    cover = cover_bound(problem, time_limit_s=10, workers=2)
    warm = candidates[0][2] if candidates else None
    realized = guided.cover_schedule(problem, cover)
    e_warm, e_real = feasible_energy(problem, warm), feasible_energy(problem, realized)
    use_realized = e_real is not None and (e_warm is None or e_real < e_warm)
    hint, hint_j = (realized, e_real) if use_realized else (warm, e_warm)
    rows = []
    for variant in variants:
        built = guided.build_guided(guided.half_the_slack(problem, hint), cover, hint)
        built.model.objective_floor = cover.energy_j
        subsolvers = tuple(x for x in variant.split("+") if x != "all")
        opts = BackendOptions(time_limit_s=limit, threads=2, relative_gap=0.001, large=is_large(built.model),
                              full_subsolvers=subsolvers)
        trace: list[tuple[float, float]] = []
        t0 = time.perf_counter()

        def seen(obj: float, _values: list[float], trace: list = trace, t0: float = t0) -> None:
            trace.append((time.perf_counter() - t0, obj))

        out = solve_cpsat_here(built.model, opts, on_solution=seen)
        energy = feasible_energy(problem, built.schedule(out.values)) if out.values else None
        at = {f"at_{t}s": min((o for s, o in trace if s <= t), default=None) for t in (10, 20, 30) if t <= limit}
        rows.append({"cell": cell, "variant": variant, "hint_j": hint_j,
                     "cover_bound_j": cover.energy_j, "energy_j": energy, "bound_j": out.bound,
                     "status": out.status, "solve_s": round(out.solve_time_s, 1), **at})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", required=True)
    ap.add_argument("--variants", default="all,max_lp")
    ap.add_argument("--limit", type=float, default=40.0)
    ap.add_argument("-o", "--out", type=Path)
    args = ap.parse_args()
    for cell in args.cells.split(","):
        for row in run_cell(cell, args.variants.split(","), args.limit):
            emit(json.dumps(row), args.out)


if __name__ == "__main__":
    main()
