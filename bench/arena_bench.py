"""Arena planner benchmark: variants of the exact packing, side by side in one run.

Programs: the zoo's heuristic schedules (capuchin, chen_greedy, dtr) at 30/50/70 % of the
checkpoint-all peak on m4 and a72 — paging-heavy schedules are the ones that fragment.
Each program is planned once per variant (``VARIANTS``: module settings of
:mod:`poet_compiler.schedule.arena`), at effort 0 and at finalize's retry effort, with no
budget (so the planner tries to reach the peak). Records arena / peak and wall time.
The variants now: both passes of the exact packing in address units of the sizes' gcd
(before), both in the coarser units of ``_quantum``, and the first coarse, the second
fine (now).

    .venv/bin/python bench/arena_bench.py --out bench/results/arena_bench   # -> .md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from poet_compiler.errors import PoetError
from poet_compiler.fileio import atomic_write_text
from poet_compiler.schedule import arena
from poet_compiler.solve.baselines import BASELINES
from poet_compiler.solve.budgets import reference
from poet_compiler.solve.finalize import ARENA_RETRY_EFFORT
from poet_compiler.solve.problem import Problem

sys.path.insert(0, str(Path(__file__).parent))
from solve_bench import load  # noqa: E402

MODELS = ("resnet18_cifar", "vgg16_cifar", "bert_tiny:64")
STRATEGIES = ("capuchin", "chen_greedy", "dtr")
VARIANTS: dict[str, dict[str, object]] = {
    "fine L0+L1": {"EXACT_PASSES": ((0, False), (1, False))},
    "coarse L0+L1": {"EXACT_PASSES": ((0, True), (1, True))},
    "coarse L0, fine L1": {"EXACT_PASSES": ((0, True), (1, False))},
}


def programs(models: list[str], devices: list[str]):
    """``(label, graph, program)`` for every heuristic schedule that meets its budget."""
    for model in models:
        for device in devices:
            graph, costs = load(model, device, "module")
            ref = reference(graph, costs)
            for frac in (0.3, 0.5, 0.7):
                problem = Problem(graph=graph, costs=costs, ram_budget_bytes=int(ref.peak_bytes * frac),
                                  deadline_s=None, mode="poet")
                for name in STRATEGIES:
                    try:
                        res = BASELINES[name](problem)
                    except PoetError:
                        continue
                    if res.program is not None and res.peak_ram_bytes is not None \
                            and res.peak_ram_bytes <= problem.activation_budget:
                        yield f"{model} {device} {frac:.0%} {name}", graph, res.program


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--devices", nargs="+", default=["m4", "a72"])
    ap.add_argument("--out", default="bench/results/arena_bench")
    args = ap.parse_args()
    rows = []
    for label, graph, program in programs(args.models, args.devices):
        row = [label]
        for effort in (0, ARENA_RETRY_EFFORT):
            for settings in VARIANTS.values():
                for key, value in settings.items():
                    setattr(arena, key, value)
                t0 = time.perf_counter()
                planned = arena.plan_arena(graph, program, effort=effort)
                row += [planned.meta["fragmentation"], time.perf_counter() - t0, planned.meta["arena_order"]]
        rows.append(row)
        print(label, " ".join(f"{x:.4f}" if isinstance(x, float) else str(x) for x in row[1:]), flush=True)
    head = ["program"] + [f"{what} e{e} {name}" for e in (0, ARENA_RETRY_EFFORT) for name in VARIANTS
                          for what in ("arena/peak", "s", "method")]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lines.append("| " + " | ".join(f"{x:.4f}" if isinstance(x, float) else str(x) for x in r) + " |")
    summary = []
    for k, (e, name) in enumerate((e, name) for e in (0, ARENA_RETRY_EFFORT) for name in VARIANTS):
        frag = [r[1 + 3 * k] for r in rows]
        secs = [r[2 + 3 * k] for r in rows]
        summary.append(f"- effort {e}, {name}: at the peak {sum(f <= 1.0 for f in frag)}/{len(rows)}, "
                       f"mean arena/peak {statistics.mean(frag):.4f}, max {max(frag):.4f}; "
                       f"time median {statistics.median(secs):.2f} s, max {max(secs):.2f} s, total {sum(secs):.1f} s")
    atomic_write_text(Path(args.out).with_suffix(".md"), "\n".join(summary + [""] + lines) + "\n")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
