"""What the full model costs in memory, against what predicts it before it is built.

The full model (row generation's first round, :mod:`poet_compiler.solve.row_generation`)
is what makes poetc's memory grow with n^2: on MobileNetV2 (362 nodes, a72, 50 %) poetc
measured 3.7 GiB with it and 0.96 GiB without, for the same schedule. This measures, per
cell, each in a fresh process: the predictor (``useful`` pairs, cheap), the first round's
size, the Python bytes its build adds to poetc, and poetc's measured peak (its RSS plus
its solver children's private bytes, as ``--memory-limit`` counts it) while the default
``auto`` solver works on it for ``--seconds``::

    PYTHONPATH=. .venv/bin/python bench/full_model_memory.py --seconds 30 -o bench/results/full_model_memory.jsonl

Prints (and appends to ``-o``) one JSON line per cell.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from bench.time_limit_bench import emit

# name: (model, device, ram, deadline, mode), as in bench/row_generation_bench.py
CELLS = {
    "kws_m4_256k": ("models/kws_dscnn.onnx", "m4", "256k", None, "poet"),
    "gpt2_tiny_m4_30": ("gpt2_tiny", "m4", "30%", None, "poet"),
    "resnet18_m4_50": ("resnet18_cifar", "m4", "50%", "1.5x", "poet"),
    "vgg16_a72_30": ("vgg16_cifar", "a72", "30%", "2.0x", "poet"),
    "dag100_80": ("dag100", None, "80%", None, "remat"),
    "dag250_80": ("dag250", None, "80%", None, "remat"),
    "mobilenetv2_a72_50": ("mobilenetv2", "a72", "50%", None, "poet"),
}


def measure(name: str, seconds: float) -> dict:
    from bench.row_generation_bench import problem_of
    from poet_compiler.solve.formulation.fast import build_fast, canonical, useful_table
    from poet_compiler.solve.tuning import TUNING
    from poet_compiler.solve.warm_start import warm_start_candidates
    from poet_compiler.solvers import BackendOptions, solve_model
    from poet_compiler.solvers.memory import memory_limit, self_rss

    problem = problem_of(name, CELLS)
    useful = sum(map(sum, useful_table(problem)))
    candidates = warm_start_candidates(problem)
    before = self_rss() or 0
    t0 = time.perf_counter()
    built = build_fast(problem, full_stages=set().__contains__)
    build_s = time.perf_counter() - t0
    after = self_rss() or 0
    if candidates:
        built.hint_from(canonical(problem, candidates[0][2]))
    stats = built.model.stats()
    opts = BackendOptions(time_limit_s=seconds, threads=2, relative_gap=1e-3, large=TUNING.large_model(built.model))
    with memory_limit(64 * 2**30) as seen:
        out = solve_model(built.model, "auto", opts)
    return {"cell": name, "nodes": problem.n, "useful_pairs": useful, **stats, "build_s": round(build_s, 2),
            "rss_before_build_mb": before >> 20, "build_adds_mb": (after - before) >> 20,
            "measured_peak_mb": seen.peak_bytes >> 20,
            "child_maxrss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss >> 10,
            "status": out.status, "seconds": seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("-o", "--out", type=Path)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.seconds)))
        return
    for name in args.cells.split(","):
        proc = subprocess.run([sys.executable, __file__, "--one", name, "--seconds", str(args.seconds)],
                              capture_output=True, text=True)
        line = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else \
            json.dumps({"cell": name, "error": proc.stderr.strip().splitlines()[-3:]})
        emit(line, args.out)


if __name__ == "__main__":
    main()
