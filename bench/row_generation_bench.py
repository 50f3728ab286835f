"""The full model against row generation, from the same schedule and for the same time.

The pipeline's full-model stage starts from whatever the stages before it found, whose
timing varies (the interval search stops on wall time), so ``time_limit_bench`` cannot
tell the two apart on every cell. Here both start from the same hint (the guided search's
schedule, computed once per cell) with the cover bound as their floor, in one run, each
for ``--seconds``; the simulator judges both schedules::

    PYTHONPATH=. .venv/bin/python bench/row_generation_bench.py --seconds 40 -o bench/results/row_generation.jsonl

Prints (and appends to ``-o``) one JSON line per cell and method: simulated energy of the
best schedule that fits, the bound, rounds and stages given all their rows.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench.time_limit_bench import emit, layered_dag
from poet_compiler.api import load_costs, resolve_graph
from poet_compiler.graph.io import graph_from_dict
from poet_compiler.solve.budgets import reference, resolve_deadline, resolve_ram
from poet_compiler.solve.clock import Clock
from poet_compiler.solve.cover import cover_bound
from poet_compiler.solve.formulation.fast import build_fast, canonical
from poet_compiler.solve.guided import guided_search
from poet_compiler.solve.options import SolveOptions
from poet_compiler.solve.pipeline.context import Context
from poet_compiler.solve.pipeline.steps import STEPS
from poet_compiler.solve.problem import Problem, feasible_energy
from poet_compiler.solve.row_generation import solve_by_rows
from poet_compiler.solve.warm_start import warm_start_candidates
from poet_compiler.solvers import BackendOptions, solve_model

# name: (model, device, ram, deadline, mode)
CELLS = {
    "kws_m4_256k": ("models/kws_dscnn.onnx", "m4", "256k", None, "poet"),
    "kws_a72_30": ("models/kws_dscnn.onnx", "a72", "30%", None, "poet"),
    "gpt2_tiny_m4_30": ("gpt2_tiny", "m4", "30%", None, "poet"),
    "resnet18_m4_30": ("resnet18_cifar", "m4", "30%", "1.5x", "poet"),
    "resnet18_m4_50": ("resnet18_cifar", "m4", "50%", "1.5x", "poet"),
    "vgg16_a72_30": ("vgg16_cifar", "a72", "30%", "2.0x", "poet"),
    "dag100_80": ("dag100", None, "80%", None, "remat"),
    "dag100_90": ("dag100", None, "90%", None, "remat"),
    "dag250_90": ("dag250", None, "90%", None, "remat"),
}


def problem_of(name: str, cells: dict[str, tuple] = CELLS) -> Problem:
    model, device, ram, deadline, mode = cells[name]
    graph = graph_from_dict(layered_dag(int(model[3:]))) if model.startswith("dag") else resolve_graph(model)
    costs = load_costs(graph, device)
    ref = reference(graph, costs)
    return Problem(graph, costs, resolve_ram(ram, ref, costs), resolve_deadline(deadline, ref, costs), mode=mode)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("-o", "--out", type=Path)
    args = ap.parse_args()
    for name in args.cells.split(","):
        problem = problem_of(name)
        cover = cover_bound(problem)
        candidates = warm_start_candidates(problem)
        # Outside a meter: wall limits (the effort never binds).
        ctx = Context.start(problem, SolveOptions(solver="cpsat", threads=2, effort=1e6), steps=STEPS)
        guided = guided_search(ctx, problem, cover, candidates[0][2] if candidates else None, time_limit_s=20.0,
                               relative_gap=1e-3)
        hint = guided.schedule if guided.schedule is not None else (candidates[0][2] if candidates else None)
        hint = canonical(problem, hint) if hint is not None else None
        common = {"cell": name, "nodes": problem.n, "seconds": args.seconds, "cover_bound_j": cover.energy_j,
                  "hint_j": feasible_energy(problem, hint)}
        rows = []
        t0 = time.perf_counter()
        built = build_fast(problem, hint=hint, floor=cover.energy_j)
        out = solve_model(built.model, "cpsat", BackendOptions(time_limit_s=args.seconds, threads=2,
                                                               relative_gap=1e-3, large=True))
        energy = feasible_energy(problem, built.schedule(out.values)) if out.values is not None else None
        rows.append({"method": "full model", "energy_j": energy, "bound_j": out.bound, "status": out.status,
                     "wall_s": round(time.perf_counter() - t0, 1), "rows": built.model.stats()["constraints"]})
        t0 = time.perf_counter()
        rounds = solve_by_rows(Context(problem, ctx.options, Clock(args.seconds), STEPS), problem, hint,
                               budget=problem.activation_budget, floor=cover.energy_j, finalize_s=0.0, gap=1e-3)
        out = rounds.out
        energy = feasible_energy(problem, rounds.built.schedule(out.values)) if out.values is not None else None
        rows.append({"method": "rows", "energy_j": energy, "bound_j": out.bound, "status": out.status,
                     "wall_s": round(time.perf_counter() - t0, 1), **rounds.summary(),
                     "rows": rounds.built.model.stats()["constraints"]})
        for row in rows:
            emit(json.dumps({**common, **row}), args.out)


if __name__ == "__main__":
    main()
