"""Where is the m4 grid's gap? The default compile against long reference runs, per cell.

The gap of a compile is ``(energy - bound) / energy``. A long reference run (any solver,
any formulation, hours of work) gives a better schedule and a better bound than the
default; the share of the default gap that is the incumbent's is ``(default energy -
best known energy) / default energy`` and the share that is the bound's ``(best proven
bound - default bound) / default energy``; what is left between the best known schedule
and the best proven bound is still unknown.

    PYTHONPATH=. .venv/bin/python bench/gap_reference.py prepare CELL...        # problem + default compile
    PYTHONPATH=. .venv/bin/python bench/gap_reference.py incumbent CELL --hours H
    PYTHONPATH=. .venv/bin/python bench/gap_reference.py bound CELL --hours H          # presence model
    PYTHONPATH=. .venv/bin/python bench/gap_reference.py pipeline CELL --effort E --hours H
    PYTHONPATH=. .venv/bin/python bench/gap_reference.py table -o bench/results/gap_reference.jsonl

Every run writes under ``--dir`` (default ``ref/``, not committed): ``CELL/problem.pkl``,
``CELL/default.json`` (+ ``default.pkl``, its schedule), ``CELL/best.pkl`` (the best
schedule any run found, simulated) and one JSON line per event in ``CELL/log.jsonl``
(``kind``: default, schedule, bound). ``table`` reads the logs, re-simulates every
schedule it reports, and writes the BENCHMARKS.md table. Runs are long and meant for the
background: ``nice -n 15 ... > ref/CELL/incumbent.out 2>&1 &``. A run stopped before
its end writes no ``end`` line: ``table`` then says the bound is that of a run cut short.

The figures and what they show: BENCHMARKS.md, "Where the m4 gap is".
"""

from __future__ import annotations

import argparse
import io
import json
import math
import pickle
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402

from poet_compiler import api, progress  # noqa: E402
from poet_compiler.schedule.schedule import Schedule  # noqa: E402
from poet_compiler.solve import presence  # noqa: E402
from poet_compiler.solve.baselines._common import to_program  # noqa: E402
from poet_compiler.solve.formulation.fast import build_fast, canonical  # noqa: E402
from poet_compiler.solve.problem import Problem, feasible_energy  # noqa: E402
from poet_compiler.solvers.base import BackendOptions  # noqa: E402
from poet_compiler.solvers.cpsat import solve_cpsat_here  # noqa: E402
from poet_compiler.solvers.native import NativeLimits, _solve_here  # noqa: E402

#: The m4 grid's tight cells: (model, device, ram, deadline), every one in POET's
#: convention (--activations-only).
CELLS: dict[str, tuple[str, str, str, str | None]] = {
    "kws_m4_256k_poet": ("models/kws_dscnn.onnx", "m4", "256k", None),
    "op_resnet18_cifar_m4_30_1.5": ("resnet18_cifar", "m4", "30%", "1.5x"),
    "op_resnet18_cifar_m4_30_2.0": ("resnet18_cifar", "m4", "30%", "2.0x"),
    "op_resnet18_cifar_m4_50_1.5": ("resnet18_cifar", "m4", "50%", "1.5x"),
    "op_resnet18_cifar_m4_50_2.0": ("resnet18_cifar", "m4", "50%", "2.0x"),
}


def cell_dir(root: Path, cell: str) -> Path:
    d = root / cell
    d.mkdir(parents=True, exist_ok=True)
    return d


def compile_cell(cell: str, **kw: Any) -> api.Compilation:
    model, device, ram, deadline = CELLS[cell]
    return api.compile(model, device=device, ram=ram, deadline=deadline, activations_only=True, **kw)


def load_problem(root: Path, cell: str) -> Problem:
    path = cell_dir(root, cell) / "problem.pkl"
    if not path.is_file():
        problem = compile_cell(cell, strategy="checkpoint_all").problem
        path.write_bytes(pickle.dumps(problem))
    return pickle.loads(path.read_bytes())


def log(root: Path, cell: str, **row: Any) -> None:
    row = {"t": round(time.time(), 1), **row}
    with (cell_dir(root, cell) / "log.jsonl").open("a") as fh:
        fh.write(json.dumps(row) + "\n")
    print(json.dumps(row), flush=True)


def offer(root: Path, cell: str, problem: Problem, schedule: Schedule | None, source: str) -> float | None:
    """Keep ``schedule`` as the cell's best if the simulator says it is feasible and cheaper."""
    if schedule is None:
        return None
    energy = feasible_energy(problem, schedule)
    if energy is None:
        return None
    path = cell_dir(root, cell) / "best.pkl"
    best = pickle.loads(path.read_bytes()) if path.is_file() else None
    if best is None or energy < best["energy_j"]:
        path.write_bytes(pickle.dumps({"energy_j": energy, "schedule": schedule, "source": source}))
        log(root, cell, kind="schedule", energy_j=energy, source=source)
    return energy


def best_schedule(root: Path, cell: str) -> Schedule | None:
    path = cell_dir(root, cell) / "best.pkl"
    return pickle.loads(path.read_bytes())["schedule"] if path.is_file() else None


def prepare(root: Path, cell: str, threads: int) -> None:
    """The cell's problem and its default compile (energy, bound, gap, schedule)."""
    problem = load_problem(root, cell)
    t0 = time.perf_counter()
    comp = compile_cell(cell, threads=threads)
    res = comp.result
    rep = res.report()
    row = {k: rep.get(k) for k in ("status", "energy_j", "lower_bound_j", "gap", "stopped_by", "effort_used",
                                   "n_page_in", "n_page_out", "guided_source", "presence", "cover_bound_j")}
    row["wall_s"] = round(time.perf_counter() - t0, 1)
    (cell_dir(root, cell) / "default.json").write_text(json.dumps(row, indent=1))
    (cell_dir(root, cell) / "default.pkl").write_bytes(pickle.dumps(res.schedule))
    log(root, cell, kind="default", **row)
    offer(root, cell, problem, res.schedule, "default compile")


def incumbent(root: Path, cell: str, hours: float, effort: float) -> None:
    """The full fast model (every memory row, no row generation) on CP-SAT's interleaved
    search on one thread, from the best schedule known, for ``effort`` deterministic
    seconds or ``hours`` of wall, whichever ends first; every solution is simulated and
    kept when cheaper, every bound logged."""
    problem = load_problem(root, cell)
    hint = best_schedule(root, cell)
    t0 = time.perf_counter()
    built = build_fast(problem)
    if hint is not None:
        built.hint_from(canonical(problem, hint))
    log(root, cell, kind="start", method="full fast model, CP-SAT", effort=effort, hours=hours,
        build_s=round(time.perf_counter() - t0, 1), **{k: v for k, v in built.model.stats().items()
                                                       if isinstance(v, int)})

    def on_solution(objective: float, values: list[float]) -> None:
        offer(root, cell, problem, built.schedule(values), f"full fast model, CP-SAT ({objective:.6g})")

    opts = BackendOptions(time_limit_s=hours * 3600, threads=1, large=True, deterministic=True,
                          deterministic_s=effort, progress=True)
    with _ProgressLog(root, cell, "full fast model, CP-SAT"):
        out = solve_cpsat_here(built.model, opts, on_solution=on_solution)
    if out.values is not None:
        offer(root, cell, problem, built.schedule(out.values), "full fast model, CP-SAT (end)")
    log(root, cell, kind="end", method="full fast model, CP-SAT", status=out.status, objective=out.objective,
        bound_j=out.bound, deterministic_s=out.deterministic_s, wall_s=round(time.perf_counter() - t0, 1))


def pipeline(root: Path, cell: str, hours: float, effort: float) -> None:
    """poetc's own pipeline at ``effort`` deterministic seconds on one thread (a long
    guided search, presence model and full model), under a wall cap of ``hours``."""
    problem = load_problem(root, cell)
    method = f"poetc pipeline, effort {effort:g}, 1 thread"
    log(root, cell, kind="start", method=method, effort=effort, hours=hours)
    t0 = time.perf_counter()
    comp = compile_cell(cell, threads=1, effort=effort, time_limit_s=hours * 3600, memory_limit="8G")
    res = comp.result
    rep = res.report()
    offer(root, cell, problem, res.schedule, method)
    log(root, cell, kind="end", method=method, bound_j=res.lower_bound_j, energy_j=res.energy_j,
        stopped_by=rep.get("stopped_by"), presence=rep.get("presence"), stage_effort=rep.get("stage_effort"),
        wall_s=round(time.perf_counter() - t0, 1))


class _ProgressLog(progress.LiveStatus):
    """The search's progress figures as ``progress`` lines of the cell's log, when the
    bound rises by more than 1e-5 relative. They are the solver's bound before the
    objective's rounding is subtracted (solvers/cpsat.py, ``valid_bound``): ``table``
    takes only the valid bound of the ``end`` line."""

    def __init__(self, root: Path, cell: str, method: str) -> None:
        super().__init__(Console(file=io.StringIO()))
        self.root, self.cell, self.method, self.last = root, cell, method, -math.inf

    def set_figures(self, source: str, incumbent: float | None, bound: float | None, unit: str,
                    detail: str = "") -> None:
        super().set_figures(source, incumbent, bound, unit, detail)
        if bound is not None and bound > self.last + 1e-5 * abs(bound):
            self.last = bound
            log(self.root, self.cell, kind="progress", method=self.method, bound_j=bound,
                wall_s=round(time.perf_counter() - self.started, 1))


class _BoundLog:
    """Logs a method's bound when it rises by more than 1e-5 relative."""

    def __init__(self, root: Path, cell: str, method: str) -> None:
        self.root, self.cell, self.method, self.last = root, cell, method, -math.inf
        self.t0 = time.perf_counter()

    def __call__(self, bound_j: float) -> None:
        if bound_j > self.last + 1e-5 * abs(bound_j):
            self.last = bound_j
            log(self.root, self.cell, kind="bound", method=self.method, bound_j=bound_j,
                wall_s=round(time.perf_counter() - self.t0, 1))


def presence_reference(root: Path, cell: str, hours: float, effort: float) -> None:
    """The presence model (solve/presence.py) by unsatisfiable cores, one worker, to its
    optimum or the limits; its bound is a bound of the problem."""
    problem = load_problem(root, cell)
    t0 = time.perf_counter()
    md = presence._build(problem)
    hint = best_schedule(root, cell)
    if hint is not None:
        presence._hint(md, presence.image_of(problem, to_program(problem, hint)))
    base = problem.costs.compute_only_j
    method = "presence model, CP-SAT cores"
    log(root, cell, kind="start", method=method, pairs=presence.pairs(problem), effort=effort, hours=hours)
    bound_log = _BoundLog(root, cell, method)

    def joules(units: float) -> float:
        return base + math.floor(units + 1e-6) / md.e_scale

    limits = NativeLimits(time_limit_s=hours * 3600, deterministic_s=effort, core=True)
    res = _solve_here(md.m, limits, on_solution=lambda obj, bound, values, det=None: bound_log(joules(bound)),
                      on_bound=lambda b: bound_log(joules(b)))
    bound = None if res.bound is None else joules(res.bound)
    log(root, cell, kind="end", method=method, status=res.status, bound_j=bound,
        objective_j=None if res.objective is None else joules(res.objective),
        deterministic_s=res.deterministic_s, wall_s=round(time.perf_counter() - t0, 1))


def best_bound(lines: list[dict[str, Any]], default: dict[str, Any]) -> dict[str, Any]:
    """The highest valid bound the log holds (a run's ``bound`` and ``end`` lines, not its
    ``progress`` lines), with its method, its run's deterministic and wall seconds, and
    whether that run ended (else the figures are where it was cut short)."""
    best = {"bound_j": default["lower_bound_j"], "method": "default compile", "finished": True,
            "deterministic_s": default.get("effort_used"), "wall_s": default.get("wall_s")}
    for ln in lines:
        if ln["kind"] not in ("bound", "end") or ln.get("bound_j") is None:
            continue
        # An end line equal to the last bound line is the same bound, now finished.
        if ln["bound_j"] > best["bound_j"] or (ln["kind"] == "end" and ln["bound_j"] >= best["bound_j"]):
            best = {"bound_j": ln["bound_j"], "method": ln["method"], "finished": ln["kind"] == "end",
                    "deterministic_s": ln.get("deterministic_s"), "wall_s": ln.get("wall_s")}
    return best


def table(root: Path, cells: list[str]) -> list[dict[str, Any]]:
    """Per cell: the default compile, the best schedule any run kept (both simulated
    again here) and the best bound any run logged, and the shares of the default gap
    (module docstring)."""
    rows = []
    for cell in cells:
        d = cell_dir(root, cell)
        if not (d / "log.jsonl").is_file() or not (d / "default.json").is_file():
            continue
        lines = [json.loads(ln) for ln in (d / "log.jsonl").read_text().splitlines() if ln]
        default = json.loads((d / "default.json").read_text())
        problem = load_problem(root, cell)
        d_energy = feasible_energy(problem, pickle.loads((d / "default.pkl").read_bytes()))
        best = pickle.loads((d / "best.pkl").read_bytes())
        best_energy = feasible_energy(problem, best["schedule"])
        if d_energy is None or best_energy is None:
            raise SystemExit(f"{cell}: a saved schedule fails the simulator")
        bound = best_bound(lines, default)
        runs = sorted({ln["method"] for ln in lines if ln["kind"] == "start"})
        cut = sorted(set(runs) - {ln["method"] for ln in lines if ln["kind"] == "end"})
        rows.append({"cell": cell, "default_energy_j": default["energy_j"], "default_schedule_j": d_energy,
                     "default_bound_j": default["lower_bound_j"], "default_gap": default["gap"],
                     "best_energy_j": best_energy, "best_source": best["source"],
                     "best_bound_j": bound["bound_j"], "bound_method": bound["method"],
                     "bound_finished": bound["finished"], "bound_deterministic_s": bound["deterministic_s"],
                     "bound_wall_s": bound["wall_s"], "runs": runs, "runs_cut_short": cut,
                     "incumbent_share": (d_energy - best_energy) / d_energy,
                     "bound_share": (bound["bound_j"] - default["lower_bound_j"]) / d_energy,
                     "open": (best_energy - bound["bound_j"]) / d_energy})
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    out = ["| cell | default: energy J / bound J (gap) | best schedule known J, simulated (by) "
           "| best bound proven J (by; det s, wall s) | incumbent's share | bound's share | still open |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        det = "-" if r["bound_deterministic_s"] is None else f"{r['bound_deterministic_s']:.4g}"
        ended = "" if r["bound_finished"] else ", cut short"
        out.append(f"| {r['cell']} | {r['default_energy_j']:.7g} / {r['default_bound_j']:.7g} "
                   f"({r['default_gap']:.2%}) | {r['best_energy_j']:.7g} ({r['best_source']}) "
                   f"| {r['best_bound_j']:.7g} ({r['bound_method']}; {det}, {r['bound_wall_s']}{ended}) "
                   f"| {r['incumbent_share']:.2%} | {r['bound_share']:.2%} | {r['open']:.2%} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=["prepare", "incumbent", "bound", "pipeline", "table"])
    ap.add_argument("--hours", type=float, default=3.0, help="wall cap of a reference run")
    ap.add_argument("--effort", type=float, default=1e5, help="deterministic seconds of a reference run")
    ap.add_argument("cells", nargs="*", default=list(CELLS))
    ap.add_argument("--dir", type=Path, default=ROOT / "ref")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("-o", "--out", type=Path, help="table: the rows as JSON lines")
    args = ap.parse_args()
    if args.command == "table":
        rows = table(args.dir, args.cells)
        if args.out:
            args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(markdown(rows))
        return
    for cell in args.cells:
        if args.command == "prepare":
            prepare(args.dir, cell, args.threads)
        elif args.command == "pipeline":
            pipeline(args.dir, cell, args.hours, args.effort)
        elif args.command == "incumbent":
            incumbent(args.dir, cell, args.hours, args.effort)
        else:
            presence_reference(args.dir, cell, args.hours, args.effort)


if __name__ == "__main__":
    main()
