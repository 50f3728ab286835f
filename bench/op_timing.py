"""How well the per-op table predicts a training step: ops timed as the step runs them,
against ops re-run right after they ran.

Per model of ``bench/torch_bench.py``, its traced training step (the joint forward and
backward FX graph, on the model's real parameters and batch):

* ``in step``  ``fx_timing.time_fx_nodes``, what ``poetc profile --model`` and
               ``make bench-torch`` use: each op timed once per run of the whole graph
               (there the median of 5 runs after a warm-up; here one run per round);
* ``re-run``   each op run again, three times, right after the interpreter computed it
               (its inputs just used, its output buffer just freed), the median kept;

summed over the forward (with the loss) and the backward ops, against the measured
step of plain autograd (``loss_fn(model(x), y).backward()``). Interleaved rounds: per
round the step (median of 3), one timed run of each table; medians over rounds, of the
sums and of their ratios to the round's step. One thread.

    PYTHONPATH=. .venv/bin/python bench/op_timing.py -o bench/results/op_timing.md
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.fx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from torch_bench import load, machine_load, step_of, write_results  # noqa: E402

from poet_compiler.devices.profiler.fx_timing import time_fx_nodes  # noqa: E402
from poet_compiler.frontends.torch import trace_module  # noqa: E402
from poet_compiler.frontends.torch.tracing import PHASE  # noqa: E402


def rerun_times(gm: Any, args: Sequence[Any], repeats: int = 3) -> dict[str, float]:
    """Seconds per FX node, each op re-run ``repeats`` times right after it ran (median)."""
    times: dict[str, float] = {}

    class _Rerun(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            result = super().run_node(n)
            if n.op in ("call_function", "call_method", "call_module"):
                samples = []
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    super().run_node(n)
                    samples.append(time.perf_counter() - t0)
                times[n.name] = statistics.median(samples)
            return result

    _Rerun(gm).run(*args)
    return times


def by_phase(gm: Any, times: dict[str, float]) -> dict[str, float]:
    """Milliseconds of forward (and loss) ops and of backward ops."""
    out = {"forward": 0.0, "backward": 0.0}
    for n in gm.graph.nodes:
        if n.name in times:
            phase = (n.meta.get("custom") or {}).get(PHASE)
            out["backward" if phase == "backward" else "forward"] += times[n.name] * 1e3
    return out


def measure(name: str, rounds: int) -> dict[str, Any]:
    """Per round, interleaved: the autograd step (median of 3), the table timed in step (one
    timed run after a warm-up) and re-run; the medians over rounds of each table's sums and
    of their ratios to that round's step."""
    model = load(name, quick=False)
    tm = trace_module(copy.deepcopy(model.module), model.inputs, model.target, model.loss_fn, name=model.name)
    module = copy.deepcopy(model.module)
    step = step_of(model, module)
    module.zero_grad(set_to_none=True)
    step()
    steps: list[float] = []
    sums: dict[str, list[dict[str, float]]] = {"in step": [], "re-run": []}
    ratios: dict[str, list[float]] = {"in step": [], "re-run": []}
    for _ in range(rounds):
        took = []
        for _ in range(3):
            module.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            step()
            took.append(time.perf_counter() - t0)
        step_ms = statistics.median(took) * 1e3
        steps.append(step_ms)
        with torch.no_grad():
            got = {"in step": by_phase(tm.gm, time_fx_nodes(tm.gm, tm.flat_args(), passes=1)),
                   "re-run": by_phase(tm.gm, rerun_times(tm.gm, tm.flat_args()))}
        for how, t in got.items():
            sums[how].append(t)
            ratios[how].append((t["forward"] + t["backward"]) / step_ms)
    out: dict[str, Any] = {"model": name, "step_ms": statistics.median(steps)}
    for how in sums:
        out[how] = {phase: statistics.median(t[phase] for t in sums[how]) for phase in ("forward", "backward")}
        out[how]["ratio"] = statistics.median(ratios[how])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["resnet18_cifar", "gpt2_tiny", "unet"])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--out", "-o", type=Path, default=None)
    ap.add_argument("--quick", action="store_true", help="the U-Net only, 2 rounds (a smoke run)")
    args = ap.parse_args(argv)
    if args.quick:
        args.models, args.rounds = ["unet"], 2
    torch.set_num_threads(1)
    start = machine_load()
    lines = ["| model | autograd step ms | table | forward ms | backward ms | total ms | total / step (median of rounds) |",
             "|---|---|---|---|---|---|---|"]
    for name in args.models:
        r = measure(name, args.rounds)
        for how in ("in step", "re-run"):
            t = r[how]
            total = t["forward"] + t["backward"]
            lines.append(f"| {name} | {r['step_ms']:.1f} | {how} | {t['forward']:.1f} | {t['backward']:.1f} | "
                         f"{total:.1f} | {t['ratio']:.2f} |")
        print(lines[-2] + "\n" + lines[-1], file=sys.stderr, flush=True)
    lines += ["", f"torch {torch.__version__}, 1 thread, {os.cpu_count()} CPUs; {args.rounds} interleaved rounds; "
              f"machine {start} at the start, "
              f"{machine_load()} at the end."]
    write_results("\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
