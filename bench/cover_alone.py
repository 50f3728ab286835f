"""The eviction-cover bound alone on time_limit_bench cells, side by side across checkouts.

    PYTHONPATH=. .venv/bin/python bench/cover_alone.py --cells op_resnet18_cifar_a72_70_2.0,bert_base_a72_70 \
        --compare base=/tmp/wt_base,new=. -o bench/results/cover_alone.jsonl

Each checkout runs in its own child process (its own ``poet_compiler``), on two workers
as the pipeline runs it, with the pipeline's 10 s cap. Prints one JSON row per cell and
checkout: the bound, whether the cover closed, its seconds, the refined model's absence
literals (the build forecast's input), its restores (how many page), the deep cover's
bound and seconds where the checkout has :func:`deeper_cover`, and the checkout's label.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

# The child: the cover of one cell, in the checkout named by PYTHONPATH.
_CHILD = r"""
import json, sys, time
from bench.heuristics_time import problem_of
import poet_compiler.solve.cover as cover_mod
from poet_compiler.solve.cover import absence_literals, cover_bound
for cell in sys.argv[1].split(","):
    problem = problem_of(cell)
    started = time.perf_counter()
    cover = cover_bound(problem, time_limit_s=10.0, workers=2)
    row = {"cell": cell, "n": problem.n, "bound_j": cover.energy_j, "closed": cover.closed,
           "infeasible": cover.infeasible, "seconds": round(time.perf_counter() - started, 2),
           "absence_literals": absence_literals(problem), "restores": len(cover.restores),
           "pages": sum(r.how == "page" for r in cover.restores)}
    if hasattr(cover_mod, "deeper_cover"):    # the chains of dead inputs (session 18 on)
        started = time.perf_counter()
        deep = cover_mod.deeper_cover(problem, cover, time_limit_s=10.0, workers=2)
        row.update(deep_bound_j=deep.energy_j, deep_seconds=round(time.perf_counter() - started, 2))
    print(json.dumps(row), flush=True)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", required=True)
    ap.add_argument("--compare", default="new=.", help="LABEL=DIR,... checkouts to run, in this order")
    ap.add_argument("-o", "--out", type=Path)
    args = ap.parse_args()
    for label, root in (x.split("=", 1) for x in args.compare.split(",") if x):
        env = dict(os.environ, PYTHONPATH=str(Path(root).resolve()))
        proc = subprocess.run([sys.executable, "-c", _CHILD, args.cells], cwd=root, env=env,
                              capture_output=True, text=True, check=True)
        for line in proc.stdout.splitlines():
            row = json.dumps({"label": label, **json.loads(line)})
            print(row, flush=True)
            if args.out:
                with args.out.open("a") as fh:
                    fh.write(row + "\n")


if __name__ == "__main__":
    main()
