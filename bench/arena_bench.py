"""Arena planner benchmark: variants of the exact packing, side by side in one run.

Programs: the zoo's heuristic schedules (capuchin, chen_greedy, dtr) at 30/50/70 % of the
checkpoint-all peak on m4 and a72 — paging-heavy schedules are the ones that fragment.
Each program is planned once per variant (``VARIANTS``: module settings of
:mod:`poet_compiler.schedule.arena`), at effort 0 and at finalize's retry effort, with no
budget (so the planner tries to reach the peak). Records arena / peak and wall time.
The variants now: both passes of the exact packing in address units of the sizes' gcd
(before), both in the coarser units of ``_quantum`` (now), and the first coarse, the
second fine.

    .venv/bin/python bench/arena_bench.py --guided --out bench/results/arena_bench   # -> .md

``--guided`` adds the cover-guided search's schedules of the ResNet-18-CIFAR 30 % cells
(``GUIDED_CELLS``; 40 s of search each), planned against their budget: workspace-heavy
programs near the budget, where a layout that misses by 0.2 % cost 4 J of energy.
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


# Solver schedules that fragment (workspace-heavy, near the budget): the cover-guided
# search's schedule of these cells, as the MILP finalizes it. (model, device, RAM, deadline)
GUIDED_CELLS = (("resnet18_cifar", "m4", 0.3, 1.5), ("resnet18_cifar", "m4", 0.3, 2.0),
                ("resnet18_cifar", "a72", 0.3, 1.5), ("resnet18_cifar", "a72", 0.3, 2.0))
GUIDED_LIMIT_S = 40.0   # the guided stage's share of a 60 s solve


def guided_programs(cells: tuple[tuple[str, str, float, float], ...]):
    """``(label, graph, program, budget)`` for the guided schedule of each cell, cleaned as
    finalize cleans it (deterministic: CP-SAT stops on deterministic time)."""
    from poet_compiler.schedule.cleanup import remove_pointless_work
    from poet_compiler.schedule.linearize import linearize
    from poet_compiler.solve.cover import cover_bound
    from poet_compiler.solve.guided import guided_search
    from poet_compiler.solve.options import SolveOptions
    from poet_compiler.solve.pipeline.context import Context
    from poet_compiler.solve.pipeline.steps import STEPS
    from poet_compiler.solve.warm_start import warm_start_candidates

    for model, device, frac, dx in cells:
        graph, costs = load(model, device, "module")
        ref = reference(graph, costs)
        problem = Problem(graph=graph, costs=costs, ram_budget_bytes=int(ref.peak_bytes * frac),
                          deadline_s=costs.compute_only_s * dx, mode="poet")
        candidates = warm_start_candidates(problem)
        # Outside a meter: the search's wall limit, GUIDED_LIMIT_S (the effort never binds).
        ctx = Context.start(problem, SolveOptions(solver="cpsat", threads=2, effort=1e6), steps=STEPS)
        found = guided_search(ctx, problem, cover_bound(problem), candidates[0][2] if candidates else None,
                              time_limit_s=GUIDED_LIMIT_S, relative_gap=1e-3)
        if found.schedule is not None:
            program = remove_pointless_work(graph, linearize(graph, found.schedule, mode="poet"))
            yield f"{model} {device} {frac:.0%} {dx:g}x guided", graph, program, problem.activation_budget


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--devices", nargs="+", default=["m4", "a72"])
    ap.add_argument("--out", default="bench/results/arena_bench")
    ap.add_argument("--guided", action="store_true",
                    help="also the guided schedules of GUIDED_CELLS, planned against their budget")
    args = ap.parse_args()
    rows = []
    jobs = [(*p, None) for p in programs(args.models, args.devices)]
    if args.guided:
        jobs += list(guided_programs(GUIDED_CELLS))
    for label, graph, program, budget in jobs:
        peak = arena.peak_live_bytes(arena.buffers_of(graph, program))
        row: list[object] = [label, budget / peak if budget else "-"]
        for effort in (0, ARENA_RETRY_EFFORT):
            for settings in VARIANTS.values():
                for key, value in settings.items():
                    setattr(arena, key, value)
                t0 = time.perf_counter()
                planned = arena.plan_arena(graph, program, effort=effort, budget_bytes=budget)
                row += [planned.meta["fragmentation"], time.perf_counter() - t0, planned.meta["arena_order"]]
        rows.append(row)
        print(" ".join(f"{x:.4f}" if isinstance(x, float) else str(x) for x in row), flush=True)
    head = ["program", "budget/peak"] + [f"{what} e{e} {name}" for e in (0, ARENA_RETRY_EFFORT) for name in VARIANTS
                                         for what in ("arena/peak", "s", "method")]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lines.append("| " + " | ".join(f"{x:.4f}" if isinstance(x, float) else str(x) for x in r) + " |")
    summary = []
    free = [r for r in rows if r[1] == "-"]
    budgeted = [r for r in rows if r[1] != "-"]
    for k, (e, name) in enumerate((e, name) for e in (0, ARENA_RETRY_EFFORT) for name in VARIANTS):
        frag = [r[2 + 3 * k] for r in free]
        secs = [r[3 + 3 * k] for r in free]
        line = f"- effort {e}, {name}:"
        if free:
            line += (f" at the peak {sum(f <= 1.0 for f in frag)}/{len(free)}, mean arena/peak "
                     f"{statistics.mean(frag):.4f}, max {max(frag):.4f}; time median {statistics.median(secs):.2f} s, "
                     f"max {max(secs):.2f} s, total {sum(secs):.1f} s")
        if budgeted:
            fits = sum(r[2 + 3 * k] <= r[1] for r in budgeted)
            line += (f"; guided schedules within their budget {fits}/{len(budgeted)}, "
                     f"time {sum(r[3 + 3 * k] for r in budgeted):.1f} s")
        summary.append(line)
    atomic_write_text(Path(args.out).with_suffix(".md"), "\n".join(summary + [""] + lines) + "\n")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
