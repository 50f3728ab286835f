"""Solver benchmark: fast vs dense formulation on CP-SAT over the zoo (issue 4, "Must show").

Cells: models x devices x RAM (30/50/70 % of the checkpoint-all peak) x deadline
(1.0/1.5/2.0 x the compute-only time), both formulations on the same solver, one run.
Records status, solve time, gap, simulated energy, model size; writes a CSV and a
Markdown table (paste the table into BENCHMARKS.md).

    .venv/bin/python bench/solve_bench.py --time-limit 60 --threads 2 \
        --out bench/results/solve_bench           # -> .csv and .md

Options narrow the grid (``--models resnet18_cifar --devices m4 --ram 0.5 --deadline 1.5``).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import sys
import time
from pathlib import Path

from poet_compiler.fileio import atomic_write_text
from poet_compiler.solve.budgets import reference
from poet_compiler.solve.milp import solve_milp
from poet_compiler.solve.problem import Problem

MODELS = ("resnet18_cifar", "vgg16_cifar", "bert_tiny")
DEVICES = ("m4", "a72")
RAM_FRACTIONS = (0.3, 0.5, 0.7)
DEADLINES = (1.0, 1.5, 2.0)
FIELDS = ("model", "device", "nodes", "ram_frac", "ram_bytes", "deadline_x", "deadline_s", "formulation",
          "status", "solve_time_s", "build_s", "gap", "energy_j", "lower_bound_j", "runtime_s", "peak_ram_bytes",
          "variables", "binaries", "constraints", "nonzeros", "best_baseline", "best_baseline_energy_j",
          "beats_baselines", "message")


def baselines(problem: Problem) -> tuple[str | None, float | None]:
    """The cheapest feasible heuristic baseline (the MILP-backed ones are left out: they
    would take the MILP's time limit again)."""
    from poet_compiler.errors import PoetError
    from poet_compiler.solve.baselines import BASELINES, HEURISTICS

    best: tuple[str | None, float | None] = (None, None)
    for name in HEURISTICS:
        try:
            r = BASELINES[name](problem)
        except PoetError:
            continue
        if r.ok and r.energy_j is not None and (best[1] is None or r.energy_j < best[1]):
            best = (name, r.energy_j)
    return best


def load(model: str, device: str, granularity: str):
    from poet_compiler.api import load_costs, resolve_graph

    graph = resolve_graph(model, granularity=granularity)
    return graph, load_costs(graph, device)


def run(args: argparse.Namespace) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for model in args.models:
        for device in args.devices:
            graph, costs = load(model, device, args.granularity)
            ref = reference(graph, costs)
            for frac in args.ram:
                for dx in args.deadline:
                    base = Problem(graph=graph, costs=costs, ram_budget_bytes=max(1, int(ref.peak_bytes * frac)),
                                   deadline_s=costs.compute_only_s * dx, mode=args.mode)
                    b_name, b_energy = baselines(base)
                    for form in args.formulations:
                        started = time.perf_counter()
                        # "fast@auto": formulation fast on solver auto (default: --solver).
                        name, _, solv = form.partition("@")
                        res = solve_milp(dataclasses.replace(base), solver=solv or args.solver, formulation=name,
                                         time_limit_s=args.time_limit, threads=args.threads, progress=args.progress)
                        row = {
                            "model": model, "device": device, "nodes": graph.n, "ram_frac": frac,
                            "ram_bytes": base.ram_budget_bytes, "deadline_x": dx, "deadline_s": base.deadline_s,
                            "formulation": form, "status": res.status,
                            "solve_time_s": round(time.perf_counter() - started, 3),
                            "gap": res.gap, "energy_j": res.energy_j, "lower_bound_j": res.lower_bound_j,
                            "runtime_s": res.runtime_s, "peak_ram_bytes": res.peak_ram_bytes,
                            "build_s": res.extra.get("model_build_s"),
                            "variables": res.extra.get("model_variables"),
                            "binaries": res.extra.get("model_binaries"),
                            "constraints": res.extra.get("model_constraints"),
                            "nonzeros": res.extra.get("model_nonzeros"),
                            "best_baseline": b_name, "best_baseline_energy_j": b_energy,
                            # The optimum may never cost more than a baseline (bug if so).
                            "beats_baselines": None if (b_energy is None or res.energy_j is None or not res.ok)
                            else res.energy_j <= b_energy * (1 + 1e-9),
                            "message": res.message[:160],
                        }
                        rows.append(row)
                        print(" ".join(f"{k}={row[k]}" for k in ("model", "device", "ram_frac", "deadline_x",
                                                                 "formulation", "status", "solve_time_s", "gap",
                                                                 "energy_j")), file=sys.stderr, flush=True)
    return rows


def _num(x: object) -> float | None:
    if x is None or x == "" or x == "None":
        return None
    return float(x)  # type: ignore[arg-type]


def markdown(rows: list[dict[str, object]]) -> str:
    """One line per cell: fast and dense side by side, the speed-up, the best baseline."""
    cells: dict[tuple, dict[str, dict[str, object]]] = {}
    for r in rows:
        key = (r["model"], r["device"], r["nodes"], float(r["ram_frac"]), float(r["deadline_x"]))
        cells.setdefault(key, {})[str(r["formulation"])] = r

    def fmt(x: object, spec: str) -> str:
        v = _num(x)
        return "-" if v is None else format(v, spec)

    out = ["| model | nodes | device | RAM | deadline | fast status | fast s | fast gap | fast energy J "
           "| dense status | dense s | dense gap | dense energy J | speed-up | auto status | auto s | auto gap "
           "| auto energy J | best baseline | baseline J | fast <= baseline |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (model, device, nodes, frac, dx), by in cells.items():
        f, d, a = by.get("fast", {}), by.get("dense", {}), by.get("fast@auto", {})
        speed = "-"
        ft, dt = _num(f.get("solve_time_s")), _num(d.get("solve_time_s"))
        if ft and dt:
            speed = f"{dt / max(1e-3, ft):.1f}x"
        src = f or d
        out.append(f"| {model} | {nodes} | {device} | {int(round(frac * 100))}% | {dx}x | {f.get('status', '-')} | "
                   f"{fmt(f.get('solve_time_s'), '.1f')} | {fmt(f.get('gap'), '.2%')} | {fmt(f.get('energy_j'), '.6g')} | "
                   f"{d.get('status', '-')} | {fmt(d.get('solve_time_s'), '.1f')} | {fmt(d.get('gap'), '.2%')} | "
                   f"{fmt(d.get('energy_j'), '.6g')} | {speed} | {a.get('status', '-')} | "
                   f"{fmt(a.get('solve_time_s'), '.1f')} | {fmt(a.get('gap'), '.2%')} | {fmt(a.get('energy_j'), '.6g')} | "
                   f"{src.get('best_baseline') or '-'} | "
                   f"{fmt(src.get('best_baseline_energy_j'), '.6g')} | {f.get('beats_baselines', '-')} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--devices", nargs="+", default=list(DEVICES))
    ap.add_argument("--ram", nargs="+", type=float, default=list(RAM_FRACTIONS))
    ap.add_argument("--deadline", nargs="+", type=float, default=list(DEADLINES))
    ap.add_argument("--formulations", nargs="+", default=["fast", "dense"])
    ap.add_argument("--solver", default="cpsat")
    ap.add_argument("--mode", default="poet")
    ap.add_argument("--granularity", default="module")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--out", default="bench/results/solve_bench")
    ap.add_argument("--append", action="store_true", help="add to the rows already in OUT.csv")
    args = ap.parse_args(argv)
    out = Path(args.out)
    old: list[dict[str, object]] = []
    if args.append and out.with_suffix(".csv").exists():
        with out.with_suffix(".csv").open() as f:
            old = list(csv.DictReader(f))
    rows = old + run(args)
    out.parent.mkdir(parents=True, exist_ok=True)
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=FIELDS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(out.with_suffix(".csv"), buf.getvalue())
    atomic_write_text(out.with_suffix(".md"), markdown(rows))
    print(markdown(rows))


if __name__ == "__main__":
    main()
