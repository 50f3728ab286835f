"""How often ``optimal`` proves its answer on the oracle's small DMA cases (gap limit 0).

On DMA devices where time matters, graphs of at most 40 nodes get two program families
(stage-long and synchronous) and the union's bound. This counts, per case of
``bench/oracle_gap.py``, the statuses ``solve_milp`` ends with and the seconds it took:
"feasible" with a gap limit of 0 is a schedule whose bound did not close.

    PYTHONPATH=. .venv/bin/python bench/oracle_status.py --label new -o bench/results/oracle_status.jsonl

``PYTHONPATH=<another checkout>`` measures that checkout's solver with the same cases.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

from poet_compiler.solve.milp import solve_milp
from poet_compiler.solve.options import SolveOptions
from tests.support.graphs import training_problem

MODES = ("poet", "remat", "paging", "none")
# (label, forward nodes, static W, deadline): the DMA rows of bench/oracle_gap.py.
CASES = (("DMA, static 0.3 W", 2, 0.3, False), ("DMA, deadline", 2, 0.0, True),
         ("DMA, static 0.3 W and deadline", 2, 0.3, True), ("DMA, static 0.02 W and deadline", 3, 0.02, True))


def measure(n_fwd: int, static_w: float, deadline: bool, seeds: int) -> dict[str, object]:
    statuses: dict[str, int] = {}
    seconds = 0.0
    for seed, mode in itertools.product(range(seeds), MODES):
        problem = training_problem(seed, n_fwd, mode, dma=True, static_w=static_w, deadline=deadline)
        res = solve_milp(problem, SolveOptions(time_limit_s=60, gap_limit=0.0))
        statuses[res.status] = statuses.get(res.status, 0) + 1
        seconds += res.solve_time_s
    return {"statuses": statuses, "solve_s": round(seconds, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=12)
    ap.add_argument("--label", default="")
    ap.add_argument("-o", "--out", type=Path)
    args = ap.parse_args()
    for label, n_fwd, static_w, deadline in CASES:
        row = {"code": args.label, "case": label, **measure(n_fwd, static_w, deadline, args.seeds)}
        print(json.dumps(row), flush=True)
        if args.out is not None:
            with args.out.open("a") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
