"""Sweep cache benchmark: how much faster is a repeated identical ``poetc sweep``?

Runs the same sweep twice against a fresh cache directory, end to end through the CLI
(a new process each time: import, tracing, reference simulation, solves or cache reads,
CSV), and checks the repeat solved nothing and wrote the same CSV. Prints a Markdown
table (BENCHMARKS.md, "Sweeps and cache"). Expected: the repeat is >= 10x faster.

    .venv/bin/python bench/sweep_cache_bench.py -o bench/results/sweep_cache.md   # cifar_cnn_tiny on m4
    .venv/bin/python bench/sweep_cache_bench.py --quick                          # one cell, one strategy
    .venv/bin/python bench/sweep_cache_bench.py --model resnet18_cifar --time-limit 30 --jobs 2
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from poet_compiler.fileio import atomic_write_text


def run(argv: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"sweep failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    return elapsed, proc.stderr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="cifar_cnn_tiny")
    ap.add_argument("--device", default="m4")
    ap.add_argument("--ram", default="50%,70%,90%")
    ap.add_argument("--deadline", default="1.2x,2x")
    ap.add_argument("--strategies", default="optimal,checkmate,paging_only")
    ap.add_argument("--time-limit", default="10")
    ap.add_argument("--jobs", default="2")
    ap.add_argument("--quick", action="store_true", help="the smallest cell: one budget, one deadline, one strategy")
    ap.add_argument("-o", "--out", type=Path, default=None, help="also write the table here")
    args = ap.parse_args()
    if args.quick:
        args.ram, args.deadline, args.strategies, args.time_limit = "90%", "2x", "checkpoint_all", "5"

    poetc = [sys.executable, "-m", "poet_compiler.cli"]
    with tempfile.TemporaryDirectory(prefix="poetc-sweep-bench-") as tmp:
        d = Path(tmp)
        common = [*poetc, "sweep", args.model, "--device", args.device, "--ram", args.ram, "--deadline", args.deadline,
                  "--strategies", args.strategies, "--time-limit", args.time_limit, "--jobs", args.jobs,
                  "--cache", str(d / "cache"), "-q"]
        cold, err1 = run([*common, "-o", str(d / "cold.csv")])
        warm, err2 = run([*common, "-o", str(d / "warm.csv")])
        same = (d / "cold.csv").read_bytes() == (d / "warm.csv").read_bytes()
    cells = re.search(r"(\d+) cells \((\d+) solved", err1)
    solved_again = re.search(r"\((\d+) solved", err2)
    table = "\n".join([
        "| model | device | cells | cold (s) | repeat (s) | speedup | repeat solved | same CSV |",
        "|---|---|---|---|---|---|---|---|",
        f"| {args.model} | {args.device} | {cells.group(1) if cells else '?'} | {cold:.2f} | {warm:.2f} | "
        f"{cold / warm:.1f}x | {solved_again.group(1) if solved_again else '?'} | {'yes' if same else 'NO'} |"]) + "\n"
    print(table, end="")
    if args.out is not None:
        atomic_write_text(args.out, table)


if __name__ == "__main__":
    main()
