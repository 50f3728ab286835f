"""What the one restriction of the optimizer costs: DMA devices where time matters.

With DMA, a deadline or static power, poetc's formulations let a transfer overlap
compute only across a whole stage (docs/model.md, "What the optimizer searches"). This
bench measures that restriction against the program-level oracle of the tests
(tests/support/oracle.py) on random training-shaped graphs, and, as the control, shows
the synchronous cases (no DMA, or time free) equal to it.

    PYTHONPATH=. .venv/bin/python bench/oracle_gap.py -o bench/results/oracle_gap.md
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

from poet_compiler.solve.milp import solve_milp
from poet_compiler.solve.options import SolveOptions
from tests.support import oracle
from tests.support.graphs import training_problem

MODES = ("poet", "remat", "paging", "none")


def measure(seeds: int, n_fwd: int, dma: bool, static_w: float, deadline: bool) -> dict[str, object]:
    same = above = lost = arena = kept = n = 0
    gaps: list[float] = []
    for seed, mode in itertools.product(range(seeds), MODES):
        problem = training_problem(seed, n_fwd, mode, dma=dma, static_w=static_w, deadline=deadline)
        best = oracle.search(problem)
        res = solve_milp(problem, SolveOptions(time_limit_s=60, gap_limit=0.0))
        if best is None:
            continue
        n += 1
        if res.energy_j is None or (res.status != "optimal" and "arena" in res.message):
            if "arena" in res.message and res.ok:
                kept += 1          # a schedule kept, whose arena fits (above the oracle's live-bytes optimum)
            elif "arena" in res.message:
                arena += 1         # lost: no schedule whose arena fits
            else:
                lost += 1          # the oracle has a program, poetc says infeasible
            continue
        g = res.energy_j / best.energy_j - 1
        if g <= 1e-6:
            same += 1
        else:
            above += 1
            gaps.append(g)
    return {"instances with a program": n, "equal": same, "above": above, "poetc infeasible": lost,
            "arena only": arena, "arena kept": kept, "max above": max(gaps, default=0.0),
            "mean above (where above)": sum(gaps) / len(gaps) if gaps else 0.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=12)
    ap.add_argument("-o", "--out", type=Path)
    args = ap.parse_args()
    cases = [("no DMA, static 0.2 W, deadline (control)", 3, False, 0.2, True),
             ("DMA, time free (control)", 3, True, 0.0, False),
             ("DMA, static 0.3 W", 2, True, 0.3, False),
             ("DMA, deadline", 2, True, 0.0, True),
             ("DMA, static 0.3 W and deadline", 2, True, 0.3, True),
             # Little static power and three forward nodes: paging across stages pays off
             # (the case of tests/solve/test_oracle.py's stage-long family test).
             ("DMA, static 0.02 W and deadline", 3, True, 0.02, True)]
    lines = [f"# The DMA restriction against the program oracle ({time.strftime('%Y-%m-%d')}, {args.seeds} seeds x "
             f"{len(MODES)} modes per row)", "",
             "| case | nodes | with a program | equal | above | poetc infeasible | arena only (lost) | arena (kept) "
             "| max above | mean above |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for label, n_fwd, dma, sw, dl in cases:
        t0 = time.time()
        r = measure(args.seeds, n_fwd, dma, sw, dl)
        lines.append(f"| {label} | {2 * n_fwd + 1} | {r['instances with a program']} | {r['equal']} | {r['above']} | "
                     f"{r['poetc infeasible']} | {r['arena only']} | {r['arena kept']} | {r['max above']:.2%} | "
                     f"{r['mean above (where above)']:.2%} |")
        print(lines[-1], f"({time.time() - t0:.0f} s)", flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
