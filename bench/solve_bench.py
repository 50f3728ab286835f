"""Solver benchmark: the fast formulation against the dense one (POET's Algorithm 1) on CP-SAT over the zoo.

Cells: models x devices x RAM (30/50/70 % of the checkpoint-all peak) x deadline
(1.0/1.5/2.0 x the compute-only time), both formulations on the same solver, one run.
Records status, solve time, gap, simulated energy, model size; writes a CSV and a
Markdown table (paste the table into BENCHMARKS.md).

    .venv/bin/python bench/solve_bench.py --time-limit 60 --threads 2 \
        --out bench/results/solve_bench           # -> .csv and .md

Options narrow the grid (``--models resnet18_cifar --devices m4 --ram 0.5 --deadline 1.5``).
A model may carry a batch size, ``bert_tiny:64`` (default: the zoo's). Rows are written after
every solve (CSV and Markdown, atomically), so a run cut short loses nothing; ``--append``
adds to the rows already in OUT.csv. ``--summary`` only re-renders OUT.md from OUT.csv.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import os
import statistics
import sys
import time
from pathlib import Path

from poet_compiler.fileio import atomic_write_text
from poet_compiler.solve.budgets import reference
from poet_compiler.solve.milp import solve_milp
from poet_compiler.solve.problem import Problem

MODELS = ("resnet18_cifar", "vgg16_cifar", "bert_tiny")
LIMIT_S = 60.0      # the grid's time limit, for the summary's "within the limit" counts
DEVICES = ("m4", "a72")
RAM_FRACTIONS = (0.3, 0.5, 0.7)
DEADLINES = (1.0, 1.5, 2.0)
FIELDS = ("model", "device", "nodes", "ram_frac", "ram_bytes", "deadline_x", "deadline_s", "formulation",
          "status", "solve_time_s", "build_s", "gap", "energy_j", "lower_bound_j", "runtime_s", "peak_ram_bytes",
          "variables", "binaries", "constraints", "nonzeros", "best_baseline", "best_baseline_energy_j",
          "beats_baselines", "message")
#: Heuristic baselines whose energies are recorded per cell (None where not applicable
#: or infeasible). The MILP-backed ones (checkmate, paging_only) are left out: they would
#: take the MILP's time limit again.
BASELINE_NAMES = ("checkpoint_all", "chen_sqrt_n", "chen_greedy", "griewank", "capuchin", "dtr", "pofo")
FIELDS = FIELDS[:2] + ("batch",) + FIELDS[2:] + ("infeasible_proof", "load1", "cover_bound_j", "solver_used", "commit") + tuple(
    f"e_{n}" for n in BASELINE_NAMES)


def baselines(problem: Problem) -> dict[str, float | None]:
    """Energy of every heuristic baseline on ``problem``; None where it is not applicable
    (e.g. a chain-only DP on a DAG) or cannot meet the budgets."""
    from poet_compiler.errors import PoetError
    from poet_compiler.solve.baselines import BASELINES

    out: dict[str, float | None] = {}
    for name in BASELINE_NAMES:
        try:
            r = BASELINES[name](problem)
        except PoetError:
            out[name] = None
            continue
        out[name] = r.energy_j if r.ok and r.energy_j is not None else None
    return out


def split_model(spec: str) -> tuple[str, int | None]:
    """``bert_tiny:64`` -> ("bert_tiny", 64); a plain name keeps the zoo's batch."""
    name, _, batch = spec.partition(":")
    return name, (int(batch) if batch else None)


def load(model: str, device: str, granularity: str):
    from poet_compiler.api import load_costs, resolve_graph

    name, batch = split_model(model)
    graph = resolve_graph(name, granularity=granularity, batch=batch)
    return graph, load_costs(graph, device)


def infeasible_proof(res) -> str | None:  # noqa: ANN001 - a Result
    """How an "infeasible" status was established: by the up-front working-set / deadline
    check (with its minimum-RAM search), or by the solver on the full model."""
    if res.status != "infeasible":
        return None
    return "solver" if res.extra.proven_infeasible else "up-front"


def write(out: Path, rows: list[dict[str, object]]) -> None:
    """CSV and Markdown of ``rows``, each written atomically."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=FIELDS, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(out.with_suffix(".csv"), buf.getvalue())
    atomic_write_text(out.with_suffix(".md"), summary(rows) + "\n" + markdown(rows))


def run(args: argparse.Namespace, rows: list[dict[str, object]], out: Path) -> list[dict[str, object]]:
    """Solve every cell of the grid, appending to ``rows`` and rewriting ``out`` after each."""
    for model in args.models:
        for device in args.devices:
            graph, costs = load(model, device, args.granularity)
            ref = reference(graph, costs)
            for frac in args.ram:
                for dx in args.deadline:
                    base = Problem(graph=graph, costs=costs, ram_budget_bytes=max(1, int(ref.peak_bytes * frac)),
                                   deadline_s=costs.compute_only_s * dx, mode=args.mode)
                    energies = baselines(base)
                    feasible = {k: v for k, v in energies.items() if v is not None}
                    b_name = min(feasible, key=lambda k: (feasible[k], k)) if feasible else None
                    b_energy = feasible[b_name] if b_name else None
                    for form in args.formulations:
                        started = time.perf_counter()
                        # "fast@auto": formulation fast on solver auto (default: --solver).
                        name, _, solv = form.partition("@")
                        res = solve_milp(dataclasses.replace(base), solver=solv or args.solver, formulation=name,
                                         time_limit_s=args.time_limit, threads=args.threads, progress=args.progress)
                        row = {
                            "model": split_model(model)[0], "device": device,
                            "batch": split_model(model)[1] or "", "nodes": graph.n, "ram_frac": frac,
                            "ram_bytes": base.ram_budget_bytes, "deadline_x": dx, "deadline_s": base.deadline_s,
                            "formulation": form, "status": res.status,
                            "solve_time_s": round(time.perf_counter() - started, 3),
                            "gap": res.gap, "energy_j": res.energy_j, "lower_bound_j": res.lower_bound_j,
                            "runtime_s": res.runtime_s, "peak_ram_bytes": res.peak_ram_bytes,
                            "build_s": res.extra.model_build_s,
                            "variables": res.extra.model_variables,
                            "binaries": res.extra.model_binaries,
                            "constraints": res.extra.model_constraints,
                            "nonzeros": res.extra.model_nonzeros,
                            "best_baseline": b_name, "best_baseline_energy_j": b_energy,
                            # The optimum may never cost more than a baseline (bug if so).
                            "beats_baselines": None if (b_energy is None or res.energy_j is None or not res.ok)
                            else res.energy_j <= b_energy * (1 + 1e-9),
                            "message": res.message[:160],
                            "infeasible_proof": infeasible_proof(res),
                            "load1": round(os.getloadavg()[0], 2),
                            "cover_bound_j": res.extra.cover_bound_j,
                            "solver_used": res.extra.solver_used,
                            "commit": _commit(),
                            **{f"e_{k}": v for k, v in energies.items()},
                        }
                        rows.append(row)
                        write(out, rows)
                        print(" ".join(f"{k}={row[k]}" for k in ("model", "device", "ram_frac", "deadline_x",
                                                                 "formulation", "status", "solve_time_s", "gap",
                                                                 "energy_j")), file=sys.stderr, flush=True)
    return rows


def _commit() -> str:
    """The code's commit (rows of a table may come from several runs)."""
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, check=False)
    except OSError:
        return ""
    return out.stdout.strip()


def _proved(row: dict[str, object], within_s: float | None = None) -> bool:
    """The row's gap is at most 0.1% (and, with ``within_s``, it took at most that long)."""
    gap = _num(row.get("gap"))
    if gap is None or gap > 1e-3 + 1e-12:
        return False
    return within_s is None or (_num(row.get("solve_time_s")) or 1e9) <= within_s


def _num(x: object) -> float | None:
    if x is None or x == "" or x == "None":
        return None
    return float(x)  # type: ignore[arg-type]


def _label(r: dict[str, object]) -> str:
    return f"{r['model']} (b{r['batch']})" if r.get("batch") not in (None, "", "None") else str(r["model"])


def _cells(rows: list[dict[str, object]]) -> dict[tuple, dict[str, dict[str, object]]]:
    cells: dict[tuple, dict[str, dict[str, object]]] = {}
    for r in rows:
        key = (_label(r), r["device"], r["nodes"], float(r["ram_frac"]), float(r["deadline_x"]))
        cells.setdefault(key, {})[str(r["formulation"])] = r
    return cells


def summary(rows: list[dict[str, object]]) -> str:
    """The counts the issue's targets are about, computed from the rows (never typed in)."""
    cells = _cells(rows)
    lines = [f"Cells: {len(cells)}; solver runs: {len(rows)}."]
    feas = [k for k, by in cells.items() if any(str(r["status"]) in ("optimal", "feasible") for r in by.values())]
    inf = {k: by for k, by in cells.items() if k not in feas
           and all(str(r["status"]) == "infeasible" for r in by.values())}
    proofs: dict[str, int] = {}
    for by in inf.values():
        how = "+".join(sorted({str(r.get("infeasible_proof") or "?") for r in by.values()}))
        proofs[how] = proofs.get(how, 0) + 1
    other = len(cells) - len(feas) - len(inf)
    lines.append(f"Feasible cells: {len(feas)}; infeasible: {len(inf)} (proof: "
                 + (", ".join(f"{k} {v}" for k, v in sorted(proofs.items())) or "-")
                 + f"); neither (timeout/mixed): {other}.")
    for form in sorted({str(r["formulation"]) for r in rows}):
        runs = [by[form] for k, by in cells.items() if k in feas and form in by]
        proved = [r for r in runs if _proved(r)]
        in_limit = [r for r in proved if _proved(r, within_s=LIMIT_S)]
        lines.append(f"{form}: gap <= 0.1% on {len(proved)}/{len(runs)} feasible cells "
                     f"({len(in_limit)} of them within {LIMIT_S:g} s wall, build included).")
    pairs = [(by["fast"], by["dense"]) for k, by in cells.items() if k in feas and "fast" in by and "dense" in by]
    sp = [_num(d["solve_time_s"]) / max(1e-3, _num(f["solve_time_s"]))  # type: ignore[operator]
          for f, d in pairs if _proved(f) and _proved(d) and _num(f.get("solve_time_s")) and _num(d.get("solve_time_s"))]
    lines.append("fast/dense speed-up on CP-SAT where both proved gap <= 0.1%: "
                 + (f"{len(sp)} cells, median {statistics.median(sp):.1f}x, min {min(sp):.1f}x, "
                    f"max {max(sp):.1f}x" if sp else "no such cell") + ".")
    # Cells fast proved and dense did not within the limit: dense needs more than the limit.
    only = [LIMIT_S / max(1e-3, _num(f["solve_time_s"]))  # type: ignore[operator]
            for f, d in pairs if _proved(f, within_s=LIMIT_S) and not _proved(d)]
    lines.append(f"fast proved gap <= 0.1% and dense did not within the {LIMIT_S:g} s limit: "
                 + (f"{len(only)} cells; {LIMIT_S:g} s / fast's time: min {min(only):.1f}x, median "
                    f"{statistics.median(only):.1f}x (dense needs more than the limit: lower bounds on the speed-up)"
                    if only else "no such cell") + ".")
    for model in ("resnet18_cifar", "vgg16_cifar"):
        runs = [by["fast"] for k, by in cells.items() if k in feas and "fast" in by and k[0] == model]
        ok = [r for r in runs if _proved(r, within_s=LIMIT_S)]
        if runs:
            lines.append(f"{model}: fast proved gap <= 0.1% within {LIMIT_S:g} s on {len(ok)}/{len(runs)} feasible cells.")
    worse = []
    for r in rows:
        e = _num(r.get("energy_j"))
        if e is None or str(r["status"]) not in ("optimal", "feasible"):
            continue
        for n in BASELINE_NAMES:
            b = _num(r.get(f"e_{n}"))
            if b is not None and e > b * (1 + 1e-9):
                worse.append(f"{_label(r)} {r['device']} {r['ram_frac']} {r['deadline_x']}x {r['formulation']} > {n}")
    lines.append("Solver energy above a baseline's on a feasible cell: "
                 + ("; ".join(worse) if worse else "never") + ".")
    return "\n".join(f"- {x}" for x in lines) + "\n"


def markdown(rows: list[dict[str, object]]) -> str:
    """One line per cell: fast and dense side by side, the speed-up, the best baseline."""
    cells = _cells(rows)

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
    ap.add_argument("--summary", action="store_true", help="only re-render OUT.md from OUT.csv")
    args = ap.parse_args(argv)
    out = Path(args.out)
    rows: list[dict[str, object]] = []
    if (args.append or args.summary) and out.with_suffix(".csv").exists():
        with out.with_suffix(".csv").open() as f:
            rows = list(csv.DictReader(f))
    out.parent.mkdir(parents=True, exist_ok=True)
    if not args.summary:
        run(args, rows, out)
    write(out, rows)
    print(summary(rows) + "\n" + markdown(rows))


if __name__ == "__main__":
    main()
