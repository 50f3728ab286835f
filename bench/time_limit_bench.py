"""Does `poetc compile --time-limit S` stop at S, and with what? The optimizer grid, scale and DAG cells

Runs `poetc compile ... --json` on a few cells, each in a fresh child process, and
records the wall time of the whole command, the report's ``solve_time_s``, status, gap,
where the time went (``stage_s``, when the report has it) and the peak RSS of the
command (its own and its largest child's: ``resource.getrusage`` RUSAGE_SELF and
RUSAGE_CHILDREN, the latter being the largest child such as CP-SAT's forked process).

    PYTHONPATH=. .venv/bin/python bench/time_limit_bench.py -o bench/results/time_limit_bench.md

Cells (``--cells`` selects by name):

- ``resnet18_m4_50``: resnet18_cifar, op level, m4, 50 %, 1.5x, ``--time-limit 60``;
- ``kws_a72_30``: kws_dscnn (ONNX), a72, 30 %, ``--time-limit 30``;
- ``dag500_80``: a random layered DAG of 500 nodes (:func:`layered_dag`), remat mode,
  80 % of its no-remat (checkpoint-all) peak, ``--time-limit 60``.

``NAME@S`` runs cell NAME at ``--time-limit S`` (e.g. ``bert_base_a72_70@20``).

``mdag100_80`` and ``mdag250_90`` are Moccasin's own random layered DAGs of 100 and 250
nodes (its repository's ``data/``, GPL, so not copied here) at 0.8 and 0.9 of their
topological order's peak, in remat mode, as in BENCHMARKS.md's Moccasin peer table: give
``--moccasin <checkout> --moccasin-python <a Python with networkx and ortools 9.6>``.
``--limits 10,30,60,120,300`` runs every cell at each of those limits (the rule that an
explicit ``--time-limit`` sets the effort: BENCHMARKS.md, "Time limits").

``--root DIR`` runs another checkout (e.g. an export of the previous commit) with this
interpreter, for a before/after comparison in one run. ``--busy N`` runs every cell beside
N CPU-bound processes (``python3 -c 'while True: pass'``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.load import busy_loops
from poet_compiler.solve.options import effort_units
from tests.support.layered import layered_dag  # noqa: F401 (the other benches import it from here)

CELLS = {
    "resnet18_a72_30": (["resnet18_cifar", "--device", "a72", "--ram", "30%", "--deadline", "1.5x"], 60.0),
    "resnet18_m4_50": (["resnet18_cifar", "--device", "m4", "--ram", "50%", "--deadline", "1.5x"], 60.0),
    "kws_a72_30": (["models/kws_dscnn.onnx", "--device", "a72", "--ram", "30%"], 30.0),
    "dag500_80": (["{dag500}", "--mode", "remat", "--ram", "80%"], 60.0),
    # The scale cells (the interval search): README demo, op-level models on a72,
    # layered DAGs.
    "kws_m4_256k": (["models/kws_dscnn.onnx", "--device", "m4", "--ram", "256k"], 60.0),
    "mobilenetv2_a72_50": (["mobilenetv2", "--device", "a72", "--ram", "50%"], 120.0),
    "bert_base_a72_70": (["bert_base", "--device", "a72", "--ram", "70%"], 120.0),
    "bert_base_a72_50": (["bert_base", "--device", "a72", "--ram", "50%"], 120.0),
    "gpt2_a72_50": (["gpt2", "--device", "a72", "--ram", "50%"], 120.0),
    "gpt2_a72_70": (["gpt2", "--device", "a72", "--ram", "70%"], 120.0),
    "mobilenetv2_a72_70": (["mobilenetv2", "--device", "a72", "--ram", "70%"], 120.0),
    "dag250_90": (["{dag250}", "--mode", "remat", "--ram", "90%"], 300.0),
    "dag500_80_120": (["{dag500}", "--mode", "remat", "--ram", "80%"], 120.0),
    "dag1000_90": (["{dag1000}", "--mode", "remat", "--ram", "90%"], 300.0),
    "dag100_90": (["{dag100}", "--mode", "remat", "--ram", "90%"], 60.0),
    "dag100_80": (["{dag100}", "--mode", "remat", "--ram", "80%"], 60.0),
    "dag100_90_120": (["{dag100}", "--mode", "remat", "--ram", "90%"], 120.0),
    # The DAG grid: 100/250/500/1,000 nodes at 80/90 %, --time-limit 300.
    "dag100_90_300": (["{dag100}", "--mode", "remat", "--ram", "90%"], 300.0),
    "dag100_80_300": (["{dag100}", "--mode", "remat", "--ram", "80%"], 300.0),
    "dag250_80": (["{dag250}", "--mode", "remat", "--ram", "80%"], 300.0),
    "dag500_90": (["{dag500}", "--mode", "remat", "--ram", "90%"], 300.0),
    "dag500_80_300": (["{dag500}", "--mode", "remat", "--ram", "80%"], 300.0),
    "dag1000_80": (["{dag1000}", "--mode", "remat", "--ram", "80%"], 300.0),
    # Moccasin's DAGs (--moccasin): the graph and the budget its driver computes.
    "mdag100_80": (["{mdag100_80}", "--mode", "remat", "--ram", "{mdag100_80_budget}"], 300.0),
    "mdag250_90": (["{mdag250_90}", "--mode", "remat", "--ram", "{mdag250_90_budget}"], 300.0),
    "gpt2_large_a72_50": (["gpt2_large", "--device", "a72", "--ram", "50%"], 600.0),
    # The same cell at the default limit and at 20 s: is the limit a limit on 1,567 nodes?
    "gpt2_large_a72_50_60": (["gpt2_large", "--device", "a72", "--ram", "50%"], 60.0),
    "gpt2_large_a72_50_20": (["gpt2_large", "--device", "a72", "--ram", "50%"], 20.0),
    "gpt2_large_a72_70": (["gpt2_large", "--device", "a72", "--ram", "70%"], 600.0),
    # The same 36-layer, 1,567-node graph at hidden 64 and vocab 512 (gpt2_large until
    # seq 512 was infeasible below 100 %: its tied embedding's gradient sum was the peak).
    "gpt2_large_mini_a72_50": (["gpt2_large_mini", "--device", "a72", "--ram", "50%"], 300.0),
}

# The child: run the CLI in-process, then print the peak RSS of itself and its children.
_CHILD = r"""
import inspect, resource, sys, time
from poet_compiler.cli import main
t0 = time.perf_counter()
kw = {}
if "started" in inspect.signature(main).parameters:    # as the console script: from the process start
    from poet_compiler.command_start import process_started
    kw["started"] = process_started()
try:
    code = main(sys.argv[1:], **kw)
except SystemExit as exc:
    code = exc.code
wall = time.perf_counter() - t0
import gc; gc.freeze()    # as the console script (poet_compiler.cli.run) before it exits
me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print("POETC-BENCH", wall, me, kids, code, file=sys.stderr)
"""


def emit(line: str, out: Path | None) -> None:
    """Print one JSON row and append it to ``out`` (the benches' ``-o``) when given."""
    print(line, flush=True)
    if out:
        with out.open("a") as fh:
            fh.write(line + "\n")


def grid_cell(name: str) -> tuple[list[str], float]:
    """A cell of the op-level optimizer grid by name, ``op_MODEL_DEVICE_RAM_DEADLINE`` (e.g.
    ``op_resnet18_cifar_m4_30_1.5``: 30 % of the checkpoint-all peak, 1.5x the
    compute-only time), at the grid's 60 s limit."""
    parts = name.split("_")
    if parts[0] != "op" or len(parts) < 5:
        raise SystemExit(f"unknown cell {name!r}")
    model, device, ram, deadline = "_".join(parts[1:-3]), parts[-3], parts[-2], parts[-1]
    return [model, "--granularity", "op", "--device", device, "--ram", f"{ram}%", "--deadline", f"{deadline}x"], 60.0


def cell_args(name: str) -> tuple[list[str], float]:
    """A cell's arguments and limit; ``NAME@S`` is cell NAME at ``--time-limit S``."""
    base, _, at = name.partition("@")
    args, limit = CELLS[base] if base in CELLS else grid_cell(base)
    return args, float(at) if at else limit


#: ``--uncapped``'s wall cap: far above any cell's effort.
UNCAPPED_S = 3600.0


def run_cell(name: str, root: Path, dags: dict[str, str | Path], python: str, defaults: bool = False,
             uncapped: bool = False) -> dict:
    """One cell; with ``defaults``, at poetc's default effort and wall cap (no ``--time-limit``)
    unless the name gives one (``NAME@S``); ``uncapped``: at the effort its limit sets
    (EFFORT_PER_LIMIT_S per second) under a cap that does not decide (UNCAPPED_S)."""
    args, limit = cell_args(name)
    timed = not defaults or "@" in name
    for key, path in dags.items():
        args = [a.replace("{" + key + "}", str(path)) for a in args]
    out = Path(tempfile.mkdtemp(prefix="poetc-bench-")) / "out.poet"
    limit_args = ["--time-limit", f"{limit:g}"] if timed else []
    if uncapped:
        limit_args = ["--effort", repr(effort_units(None, limit)), "--time-limit", f"{UNCAPPED_S:g}"]
    cmd = [python, "-c", _CHILD, "compile", *args, *limit_args, "--json", "-o", str(out)]
    env = dict(os.environ, PYTHONPATH=str(root))
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    row: dict = {"cell": name, "limit_s": limit if timed else None, "wall_s": round(wall, 1), "exit": proc.returncode,
                 "poet_sha256": hashlib.sha256(out.read_bytes()).hexdigest() if out.is_file() else None}
    try:
        rep = json.loads(proc.stdout)
    except json.JSONDecodeError:
        rep = {}
        row["error"] = proc.stderr.strip().splitlines()[-3:]
    for line in proc.stderr.splitlines():
        if line.startswith("POETC-BENCH"):
            _, w, me, kids, _code = line.split()
            row.update(rss_self_mb=round(int(me) / 1024), rss_child_mb=round(int(kids) / 1024))
    row.update(solve_time_s=rep.get("solve_time_s"), status=rep.get("status"), gap=rep.get("gap"),
               stopped_by=rep.get("stopped_by"), effort=rep.get("effort"), effort_used=rep.get("effort_used"),
               energy_j=rep.get("energy_j"), lower_bound_j=rep.get("lower_bound_j"),
               guided_source=rep.get("guided_source"),
               stage_s=rep.get("stage_s"), trace_s=rep.get("trace_s"), message=(rep.get("message") or "")[:160],
               arena_rescue=rep.get("arena_rescue"), n_move=rep.get("n_move"), move_bytes=rep.get("move_bytes"),
               memory_stops=rep.get("memory_stops"), memory_peak_mb=rep.get("memory_peak_mb"),
               compaction_j=rep.get("compaction_j"), fragmentation_retries=rep.get("fragmentation_retries"),
               presence=rep.get("presence"))
    return row


#: The Moccasin cells: (placeholder, file in Moccasin's data/, memory multiplier).
MOCCASIN_DAGS = [("mdag100_80", "random_layered_n100_w0.27_nlv0.75_ed0.2_scd0.14.json", 0.8),
                 ("mdag250_90", "random_layered_n250_w0.43_nlv0.75_ed0.2_scd0.14.json", 0.9)]


def moccasin_graphs(checkout: Path, python: str, tmp: Path) -> dict[str, str | Path]:
    """Moccasin's DAGs as poet-graph/1 files and their budgets, by bench/moccasin_peer_driver.py
    (SECONDS 0: the graph and budget only), as the Moccasin peer bench computes them."""
    driver = Path(__file__).resolve().with_name("moccasin_peer_driver.py")
    env = dict(os.environ, PYTHONPATH=str(checkout.resolve() / "src"))
    out: dict[str, str | Path] = {}
    for key, name, multiplier in MOCCASIN_DAGS:
        graph = tmp / f"{key}.json"
        proc = subprocess.run([python, str(driver), str(checkout / "data" / name), str(multiplier), "0", str(graph)],
                              capture_output=True, text=True, env=env, check=True)
        out[key], out[f"{key}_budget"] = graph, str(json.loads(proc.stdout.splitlines()[-1])["budget"])
    return out


def limit_table(rows: list[dict]) -> str:
    """cell x limit -> energy (gap), stopped_by, effort used of the effort, wall idle and busy,
    and whether idle and busy wrote the same .poet bytes (BENCHMARKS.md, "Time limits")."""
    def key(r: dict) -> tuple[str, float]:
        return r["cell"].partition("@")[0], float(r["limit_s"])

    idle = {key(r): r for r in rows if not r.get("busy") and not r.get("uncapped")}
    busy = {key(r): r for r in rows if r.get("busy") and not r.get("uncapped")}
    out = ["| cell | limit s | energy (gap) | stopped_by idle / busy | effort used / set | wall s idle / busy "
           "| same bytes idle, busy |", "|---|---|---|---|---|---|---|"]
    for k in sorted(idle, key=lambda k: (list(CELLS).index(k[0]) if k[0] in CELLS else 0, k[1])):
        a, b = idle[k], busy.get(k, {})
        # A schedule without a bound (the wall cap came before the bounds) has no gap to show.
        gap = f"{a['gap']:.2%}" if a.get("gap") is not None else "no bound"
        energy = f"{a['energy_j']:.7g} ({gap})" if a.get("energy_j") is not None else a.get("status")
        # Only a wall-cap stop may make two runs differ: say so where one did.
        capped = "time" in (a.get("stopped_by"), b.get("stopped_by"))
        same = "-" if not b else "yes" if a.get("poet_sha256") == b.get("poet_sha256") else \
            "no (time)" if capped else "**no**"
        out.append(f"| {k[0]} | {k[1]:g} | {energy} | {a.get('stopped_by')} / {b.get('stopped_by', '-')} | "
                   f"{a.get('effort_used')} / {a.get('effort')} | {a['wall_s']} / {b.get('wall_s', '-')} | {same} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--label", default="")
    ap.add_argument("--compare", default="",
                    help="LABEL=DIR,LABEL=DIR: run each cell on every checkout in turn (side by side)")
    ap.add_argument("--defaults", action="store_true",
                    help="run cells at poetc's default effort and wall cap (a cell NAME@S keeps its limit)")
    ap.add_argument("--busy", type=int, default=0, help="run beside this many CPU-bound processes")
    ap.add_argument("--uncapped", action="store_true",
                    help="each cell at the effort its --time-limit sets, under a 3,600 s cap: the answer the "
                         "limit gives wherever its wall cap does not decide, on any load")
    ap.add_argument("--limits", default="", help="S,S,...: run every cell at each of these --time-limit values")
    ap.add_argument("--moccasin", type=Path, help="a checkout of Moccasin's repository (the mdag cells)")
    ap.add_argument("--moccasin-python", default="python3", help="a Python with networkx and ortools 9.6")
    ap.add_argument("--table", nargs="+", type=Path, metavar="JSONL",
                    help="print the Markdown table of --limits rows (idle and --busy rows, side by side) and exit")
    ap.add_argument("-o", "--out", type=Path)
    args = ap.parse_args()
    if args.table:
        print(limit_table([json.loads(ln) for path in args.table for ln in path.read_text().splitlines() if ln]))
        return
    with busy_loops(args.busy):
        _run(args)


def _run(args: argparse.Namespace) -> None:
    roots = [(lab, Path(d).resolve()) for lab, d in (x.split("=", 1) for x in args.compare.split(",") if x)] \
        or [(args.label, args.root.resolve())]
    tmp = Path(tempfile.mkdtemp(prefix="poetc-dag-"))
    dags: dict[str, str | Path] = {}
    for n in (100, 250, 500, 1000):
        dags[f"dag{n}"] = tmp / f"layered_{n}.json"
        dags[f"dag{n}"].write_text(json.dumps(layered_dag(n)))
    if args.moccasin is not None:
        dags.update(moccasin_graphs(args.moccasin, args.moccasin_python, tmp))
    names = args.cells.split(",")
    if args.limits:
        names = [f"{n.partition('@')[0]}@{s}" for n in names for s in args.limits.split(",")]
    for name in names:
        for label, root in roots:
            row = run_cell(name, root, dags, sys.executable, args.defaults, args.uncapped)
            row.update(label=label, busy=args.busy, uncapped=args.uncapped)
            emit(json.dumps(row), args.out)


if __name__ == "__main__":
    main()
