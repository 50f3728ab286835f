"""Every strategy on the optimizer grid: the simulated energy of each baseline's schedule.

The grid is the optimizer grid's (BENCHMARKS.md, "Optimizer grid"): op-level
ResNet-18-CIFAR and VGG16-CIFAR at 30/50/70 % of the checkpoint-all peak x 1.0/1.5/2.0x
the compute-only time, on m4 and a72. Each cell is compiled with every strategy but
``optimal`` through :func:`poet_compiler.compile` (the path of ``poetc compile
--strategy NAME``: the heuristics, and the MILP in one mechanism's mode for ``checkmate``
and ``paging_only`` at ``--time-limit``), each model traced once. A cell without a
schedule reads ``-``. ``optimal``'s own figures are the optimizer grid's rows.

    .venv/bin/python bench/baselines_bench.py -o bench/results/baselines.md
    .venv/bin/python bench/baselines_bench.py --quick      # VGG16-CIFAR m4 70 % 2.0x, the heuristics only
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import poet_compiler
from poet_compiler.fileio import atomic_write_text
from poet_compiler.frontends import trace_zoo
from poet_compiler.solve.strategies import strategy_names

MODELS = ("resnet18_cifar", "vgg16_cifar")
DEVICES = ("m4", "a72")
RAM = ("30%", "50%", "70%")
DEADLINES = ("1.0x", "1.5x", "2.0x")
SOLVER_BACKED = ("checkmate", "paging_only")


def cells(quick: bool) -> list[tuple[str, str, str, str]]:
    if quick:
        return [("vgg16_cifar", "m4", "70%", "2.0x")]
    return [(m, d, r, t) for m in MODELS for d in DEVICES for r in RAM for t in DEADLINES]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=10.0, help="limit of the MILP-backed baselines (s)")
    ap.add_argument("--quick", action="store_true", help="the smallest cell, the heuristics only")
    ap.add_argument("-o", "--out", type=Path, default=None, help="also write the Markdown table here")
    args = ap.parse_args(argv)
    names = [n for n in strategy_names() if n != "optimal" and not (args.quick and n in SOLVER_BACKED)]
    head = ["model", "device", "RAM", "deadline", *names, "cheapest"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    print("\n".join(lines), flush=True)
    graphs = {}
    seconds: dict[str, float] = dict.fromkeys(names, 0.0)
    for model, device, ram, deadline in cells(args.quick):
        if model not in graphs:
            graphs[model] = trace_zoo(model, granularity="op").graph
        energies: dict[str, float | None] = {}
        for name in names:
            t0 = time.perf_counter()
            c = poet_compiler.compile(graphs[model], device, ram, deadline, strategy=name,
                                      time_limit_s=args.time_limit, threads=2)
            seconds[name] += time.perf_counter() - t0
            energies[name] = c.result.energy_j if c.result.ok else None
        found = {n: e for n, e in energies.items() if e is not None}
        best = min(found, key=lambda n: found[n]) if found else "-"
        row = [model, device, ram, deadline, *(f"{e:.4f}" if e is not None else "-" for e in energies.values()), best]
        lines.append("| " + " | ".join(row) + " |")
        print(lines[-1], flush=True)
    lines += ["", "Energy per step in J (simulated); `-`: no schedule within the budgets. Seconds per strategy over "
              "the run: " + ", ".join(f"{n} {s:.1f}" for n, s in seconds.items()) + "."]
    if args.out is not None:
        atomic_write_text(args.out, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
