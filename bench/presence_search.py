"""The presence model alone (:mod:`poet_compiler.solve.presence`): its bound over time
under one CP-SAT search setting, and its best solution's energy (an upper end of what
the bound can ever reach: the model's optimum lies between the two).

    PYTHONPATH=. .venv/bin/python bench/presence_search.py --cell op_resnet18_cifar_m4_30_1.5 \
        --search core --seconds 90 -o bench/results/presence_search.jsonl

Cells are time_limit_bench's (``problem_of``). Searches, all on one worker:

- ``core``: what the pipeline runs (unsatisfiable cores, core minimization level 1);
- ``core2``: the same at CP-SAT's default minimization level (2);
- ``core_lp``: cores with the linear relaxation (linearization level 1);
- ``lb_tree``: CP-SAT's lower-bound tree search (linearization level 2);
- ``core_nostrat`` / ``core_ascent``: cores without stratification, or stratified in
  ascending weight (default: descending);
- ``core_depth`` / ``core_weight``: assumptions ordered by depth or weight;
- ``core_single``: one core per round (``find_multiple_cores`` off);
- ``core_nocover``: without cover optimization.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench.heuristics_time import problem_of
from poet_compiler.solve import presence

SEARCHES = ("core", "core2", "core_lp", "lb_tree", "core_nostrat", "core_ascent", "core_depth", "core_weight",
            "core_single", "core_nocover")


def _parameters(solver: object, search: str, seconds: float) -> None:
    p = solver.parameters  # type: ignore[attr-defined]
    p.max_time_in_seconds = seconds
    p.num_workers = 1
    if search == "lb_tree":
        p.optimize_with_lb_tree_search = True
        p.linearization_level = 2
        return
    p.optimize_with_core = True
    p.linearization_level = 1 if search == "core_lp" else 0
    p.core_minimization_level = 2 if search == "core2" else 1
    if search in ("core_nostrat", "core_ascent"):
        S = type(p)
        p.max_sat_stratification = (S.STRATIFICATION_NONE if search == "core_nostrat"
                                    else S.STRATIFICATION_ASCENT)
    if search in ("core_depth", "core_weight"):
        S = type(p)
        p.max_sat_assumption_order = (S.ORDER_ASSUMPTION_BY_DEPTH if search == "core_depth"
                                      else S.ORDER_ASSUMPTION_BY_WEIGHT)
    if search == "core_single":
        p.find_multiple_cores = False
    if search == "core_nocover":
        p.cover_optimization = False


def run(cell: str, search: str, seconds: float) -> dict[str, object]:
    from ortools.sat.python import cp_model

    problem = problem_of(cell)
    started = time.perf_counter()
    md = presence._build(problem, problem.activation_budget)
    built_s = time.perf_counter() - started
    base = problem.costs.compute_only_j
    trace: list[tuple[float, float]] = []
    solver = cp_model.CpSolver()
    _parameters(solver, search, seconds)
    solver.best_bound_callback = lambda b: trace.append((round(time.perf_counter() - started, 1),
                                                         round(base + b / md.e_scale, 5)))
    code = solver.solve(md.m)
    found = code in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    return {"cell": cell, "search": search, "seconds": seconds, "build_s": round(built_s, 2),
            "status": solver.status_name(code),
            "bound_j": round(base + solver.best_objective_bound / md.e_scale, 5),
            "best_solution_j": round(base + solver.objective_value / md.e_scale, 5) if found else None,
            "trace": trace}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cell", required=True)
    ap.add_argument("--search", choices=SEARCHES, default="core")
    ap.add_argument("--seconds", type=float, default=90.0)
    ap.add_argument("-o", "--out", type=Path)
    args = ap.parse_args()
    row = run(args.cell, args.search, args.seconds)
    print(json.dumps({k: v for k, v in row.items() if k != "trace"}))
    if args.out is not None:
        with args.out.open("a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
