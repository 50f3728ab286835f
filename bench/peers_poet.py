"""POET's own graphs against POET's published solver (PuLP on CBC), cell by cell.

Each cell is one of POET's examples on one of its chipsets, at a RAM budget in bytes and a
deadline in multiples of the compute-only time. POET's side runs ``bench/poet_peer_driver.py``
under ``--poet-python`` with ``--poet`` (a checkout of POET's public repository) on its path:
it solves with POET's ``POETSolver`` on CBC (one thread, ``--poet-limit`` seconds) and writes
the example as a poet-graph/1 file with POET's costs. poetc's side is ``poetc compile`` of
that file through the installed console script (default settings: 60 s, 2 threads). Without
``--poet``, only cells whose graph is in the tree run, poetc's side alone.

Peer environment used for BENCHMARKS.md: POET's repository at 6e63098 in a virtualenv with
pulp 2.6.0 (its bundled CBC), numpy 1.26, pandas 2.2, matplotlib 3.9, loguru, toposort and
graphviz (POET's code predates numpy 2 and PuLP 3).

    .venv/bin/python bench/peers_poet.py --poet ~/poet --poet-python ~/poet-venv/bin/python \
        -o bench/results/peers_poet.md
    .venv/bin/python bench/peers_poet.py --quick        # POET's linear example, poetc's side
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
DRIVER = ROOT / "bench" / "poet_peer_driver.py"
#: (POET model, POET platform, --ram as poetc reads it, deadline x). POET gets the same bytes.
CELLS = [
    ("linear", "m4", "3388", 1.5),
    ("resnet18_cifar", "a72", "3000000", 7.6),     # the example of POET's README
    ("resnet18_cifar", "a72", "50%", 1.5),
    ("vgg16_cifar", "m4", "50%", 1.5),
]
IN_TREE = {("linear", "m4"): ROOT / "tests" / "regressions" / "poet_linear_m4.json"}


def poet_side(model: str, platform: str, ram: int | None, x: float, graph: Path, args: argparse.Namespace) -> dict:
    """POET's solver on the cell (``ram`` None: only write the graph)."""
    env = dict(os.environ, PYTHONPATH=str(Path(args.poet).resolve()))
    proc = subprocess.run([args.poet_python, str(DRIVER), model, platform, "-" if ram is None else str(ram), str(x),
                           str(graph),
                           str(args.poet_limit)], capture_output=True, text=True, env=env, cwd=args.poet)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"POET's solver failed on {model} {platform}: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(lines[-1])


def poetc_side(graph: Path, ram: int, x: float, tmp: Path) -> dict:
    """``poetc compile`` of the graph file at ``ram`` bytes; its report."""
    out = tmp / "schedules" / f"{graph.stem}.poet"     # beside the graph, its report would overwrite it
    out.parent.mkdir(exist_ok=True)
    # POET's budget is its activations' alone: --activations-only (its graphs carry no fixed bytes anyway).
    proc = subprocess.run([str(POETC), "compile", str(graph), "--ram", str(ram), "--deadline", f"{x:g}x",
                           "--activations-only", "-o", str(out), "--quiet"], capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"poetc failed on {graph.name}: {proc.stderr.strip()}")
    return json.loads(out.with_suffix(".json").read_text())


def budget_bytes(graph: Path, ram: str) -> int:
    """``--ram`` in bytes for a graph file, as poetc resolves it (``50%``: of its checkpoint-all peak)."""
    from poet_compiler.api import load_costs, resolve_graph
    from poet_compiler.solve.budgets import reference, resolve_ram

    g = resolve_graph(str(graph))
    costs = load_costs(g, None)
    return resolve_ram(ram, reference(g, costs), costs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--poet", help="a checkout of POET's public repository (runs POET's side)")
    ap.add_argument("--poet-python", default="python3", help="a Python with PuLP and POET's dependencies")
    ap.add_argument("--poet-limit", type=float, default=300.0, help="POET's solver time limit (s)")
    ap.add_argument("--quick", action="store_true", help="POET's linear example alone")
    ap.add_argument("-o", "--out", type=Path, default=None, help="also write the Markdown table here")
    args = ap.parse_args(argv)
    head = ["POET example", "chipset", "RAM B", "deadline", "nodes", "POET status", "POET energy J", "POET solve s",
            "poetc status", "poetc energy J", "poetc bound J", "poetc solve s", "poetc / POET"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    print("\n".join(lines), flush=True)
    with tempfile.TemporaryDirectory(prefix="poetc-peers-") as tmpdir:
        tmp = Path(tmpdir)
        for cell in CELLS[:1] if args.quick else CELLS:
            model, platform, ram_text, x = cell
            graph = tmp / f"poet_{model}_{platform}.json"
            peer: dict = {}
            if args.poet:
                poet_side(model, platform, None, x, graph, args)
                ram = budget_bytes(graph, ram_text)
                peer = poet_side(model, platform, ram, x, graph, args)
            elif (model, platform) in IN_TREE:
                graph = IN_TREE[(model, platform)]
                ram = budget_bytes(graph, ram_text)
            else:
                continue
            rep = poetc_side(graph, ram, x, tmp)
            ok = rep["status"] in ("optimal", "feasible")
            poet_e = peer.get("energy_j")
            row = [model, platform, f"{ram:,}", f"{x:g}x", str(rep.get("n_nodes", "-")),
                   peer.get("status", "-"),
                   f"{poet_e:.5g}" if poet_e else "-", str(peer.get("solve_s", "-")),
                   rep["status"], f"{rep['energy_j']:.5g}" if ok else "-",
                   f"{rep['lower_bound_j']:.5g}" if ok and rep.get("lower_bound_j") else "-",
                   f"{rep['solve_time_s']:.1f}", f"{rep['energy_j'] / poet_e:.4f}" if ok and poet_e else "-"]
            lines.append("| " + " | ".join(row) + " |")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if args.out is not None:
        atomic_write_text(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
