"""Moccasin's own inputs (its random layered DAGs and Checkmate's graphs) against Moccasin.

Each cell is one graph file of Moccasin's repository (``data/``) at a memory multiplier, as
in its README's experiments. Moccasin's side runs ``bench/moccasin_peer_driver.py`` under
``--moccasin-python`` with ``--moccasin``'s ``src`` on its path: ``remat`` with the settings
of Moccasin's ``main.py`` at a budget of the multiplier x the peak memory of the graph's
topological order, and the graph written as poet-graph/1. poetc's side is ``poetc compile
GRAPH --mode remat --ram BUDGET --time-limit SECONDS`` (2 threads) through the console
script. Both minimize the same figure: the schedule's total compute duration (poetc's
energy, with ``compute_j`` = Moccasin's ``cost_cpu``). Moccasin's data is GPL-licensed and
stays in its checkout: without ``--moccasin`` nothing runs.

Peer environment used for BENCHMARKS.md: Moccasin's repository at ff7ad8b in a virtualenv
with networkx and ortools 9.6.2534 (its model builder passes generators, which OR-Tools
9.15 refuses).

    .venv/bin/python bench/peers_moccasin.py --moccasin ~/moccasin --moccasin-python ~/moccasin-venv/bin/python \\
        --seconds 300 -o bench/results/peers_moccasin.md
    .venv/bin/python bench/peers_moccasin.py --moccasin ... --quick     # the 100-node DAG at 0.9, 20 s
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from poet_compiler.fileio import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
POETC = Path(sys.executable).with_name("poetc")
DRIVER = ROOT / "bench" / "moccasin_peer_driver.py"
LAYERED = {100: "random_layered_n100_w0.27_nlv0.75_ed0.2_scd0.14.json",
           250: "random_layered_n250_w0.43_nlv0.75_ed0.2_scd0.14.json",
           500: "random_layered_n500_w0.36_nlv0.75_ed0.2_scd0.14.json",
           1000: "random_layered_n1000_w0.31_nlv0.75_ed0.2_scd0.14.json"}
CHECKMATE = {"ResNet50": "ResNet50 (MLSys)_256_(224, 224, 3)_train_nx.json",
             "fcn_8_vgg": "fcn_8_vgg (MLSys)_32_(416, 608, 3)_train_nx.json"}
#: Moccasin's README experiments: (label, file in data/, memory multiplier).
CELLS = [(f"DAG {n}", f, m) for n, f in LAYERED.items() for m in (0.9, 0.8)] + \
        [(name, f, m) for name, f in CHECKMATE.items() for m in (0.9, 0.8)]


def moccasin_side(data: Path, multiplier: float, seconds: float, graph: Path, args: argparse.Namespace) -> dict:
    env = dict(os.environ, PYTHONPATH=str(Path(args.moccasin).resolve() / "src"))
    proc = subprocess.run([args.moccasin_python, str(DRIVER), str(data), str(multiplier), str(seconds), str(graph)],
                          capture_output=True, text=True, env=env)
    rows = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not rows:
        raise SystemExit(f"Moccasin failed on {data.name}: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(rows[-1])


def poetc_side(graph: Path, budget: int, seconds: float, out_dir: Path) -> dict:
    out = out_dir / f"{graph.stem}.poet"
    # Moccasin's budget is the graph's tensors alone: --activations-only (the DAGs carry no fixed bytes anyway).
    proc = subprocess.run([str(POETC), "compile", str(graph), "--mode", "remat", "--ram", str(budget),
                           "--activations-only", "--time-limit", f"{seconds:g}", "-o", str(out), "--quiet"],
                          capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"poetc failed on {graph.name}: {proc.stderr.strip()}")
    return json.loads(out.with_suffix(".json").read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moccasin", required=True, help="a checkout of Moccasin's public repository")
    ap.add_argument("--moccasin-python", default="python3", help="a Python with networkx and OR-Tools for Moccasin")
    ap.add_argument("--seconds", type=float, default=300.0, help="each tool's time (Moccasin: half per phase)")
    ap.add_argument("--cells", default="", help="labels to run, comma-separated, e.g. 'DAG 100,ResNet50' (default all)")
    ap.add_argument("--quick", action="store_true", help="the 100-node DAG at 0.9 alone, 20 s each")
    ap.add_argument("-o", "--out", type=Path, default=None, help="also write the Markdown table here")
    args = ap.parse_args(argv)
    cells = CELLS[:1] if args.quick else [c for c in CELLS if not args.cells or c[0] in args.cells.split(",")]
    seconds = 20.0 if args.quick else args.seconds
    head = ["graph", "nodes", "memory x", "budget B", "Moccasin status", "Moccasin duration", "Moccasin s",
            "poetc status", "poetc duration", "poetc bound", "poetc s", "poetc / Moccasin"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    print("\n".join(lines), flush=True)
    with tempfile.TemporaryDirectory(prefix="poetc-moccasin-") as tmpdir:
        tmp = Path(tmpdir)
        (tmp / "out").mkdir()
        for label, name, multiplier in cells:
            graph = tmp / f"{label.replace(' ', '_')}_{multiplier:g}.json"
            peer = moccasin_side(Path(args.moccasin) / "data" / name, multiplier, seconds, graph, args)
            rep = poetc_side(graph, peer["budget"], seconds, tmp / "out")
            ok = rep["status"] in ("optimal", "feasible")
            theirs = peer.get("duration")
            row = [label, str(peer["nodes"]), f"{multiplier:g}", f"{peer['budget']:,}", str(peer["status"]).lower(),
                   f"{theirs:,}" if theirs else "-", f"{peer['solve_s']:.0f}", rep["status"],
                   f"{rep['energy_j']:,.0f}" if ok else "-",
                   f"{rep['lower_bound_j']:,.0f}" if ok and rep.get("lower_bound_j") else "-",
                   f"{rep['solve_time_s']:.0f}", f"{rep['energy_j'] / theirs:.4f}" if ok and theirs else "-"]
            lines.append("| " + " | ".join(row) + " |")
            print(lines[-1], flush=True)
    lines += ["", f"Each tool {seconds:g} s (Moccasin: {seconds / 2:g} s per phase), 2 workers. Durations in the "
              "graph's own units (Moccasin's cost_cpu)."]
    if args.out is not None:
        atomic_write_text(args.out, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
