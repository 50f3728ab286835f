"""POET's own graph against POET's published solver: poetc on POET's 27-node ``linear`` example.

The graph is POET's ``linear`` example on its m4 chipset (tests/regressions/poet_linear_m4.json,
in poet-graph/1), at the budget of the regression test (3,388 B, deadline 1.5x). The peer's
figure is the energy POET's published solver (PuLP on CBC) reaches on it, recorded in
tests/regressions/test_regressions.py (``POET_OPTIMUM_J``). poetc runs as a user runs it,
``poetc compile`` through the installed console script, once per solver; its energy is the
simulator's, charging paging time and static energy that POET's model leaves out.

    .venv/bin/python bench/peers_poet.py -o bench/results/peers_poet.md
    .venv/bin/python bench/peers_poet.py --quick       # the default solver only
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from poet_compiler.fileio import atomic_write_text
from tests.regressions.test_regressions import POET_OPTIMUM_J

ROOT = Path(__file__).resolve().parents[1]
GRAPH = ROOT / "tests" / "regressions" / "poet_linear_m4.json"
POETC = Path(sys.executable).with_name("poetc")


def run(solver: str, tmp: Path) -> list[str]:
    out = tmp / f"linear_{solver}.poet"
    t0 = time.perf_counter()
    proc = subprocess.run([str(POETC), "compile", str(GRAPH), "--ram", "3388", "--deadline", "1.5x",
                           "--solver", solver, "-o", str(out), "--quiet"], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return [solver, f"exit {proc.returncode}", "-", "-", "-", f"{wall:.1f}"]
    rep = json.loads(out.with_suffix(".json").read_text())
    return [solver, rep["status"], f"{rep['energy_j']:.4e}", f"{rep['energy_j'] / POET_OPTIMUM_J:.4f}",
            f"{rep['solve_time_s']:.2f}", f"{wall:.1f}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the default solver (auto) only")
    ap.add_argument("-o", "--out", type=Path, default=None, help="also write the Markdown table here")
    args = ap.parse_args(argv)
    solvers = ["auto"] if args.quick else ["auto", "cpsat", "highs"]
    head = ["poetc --solver", "status", "energy J", "/ POET's", "solve s", "wall s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    with tempfile.TemporaryDirectory(prefix="poetc-peers-") as tmp:
        lines += ["| " + " | ".join(run(s, Path(tmp))) + " |" for s in solvers]
    lines += ["", f"POET's published solver (PuLP/CBC) on the same graph and budget: {POET_OPTIMUM_J:.4e} J."]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out is not None:
        atomic_write_text(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
