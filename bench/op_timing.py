"""How well the per-op table predicts a training step: ops timed as the step runs them,
against ops re-run right after they ran.

Per model of ``bench/torch_bench.py``, its traced training step (the joint forward and
backward FX graph, on the model's real parameters and batch):

* ``in step``  ``fx_timing.time_fx_nodes``, what ``poetc profile --model`` and
               ``make bench-torch`` use: each op timed once per run of the whole graph,
               median of 5 runs after a warm-up;
* ``re-run``   each op run again, three times, right after the interpreter computed it
               (its inputs just used, its output buffer just freed), the median kept;

summed over the forward (with the loss) and the backward ops, against the measured
step of plain autograd (``loss_fn(model(x), y).backward()``, median of 9 after a warm-up),
timed between the two. One thread.

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


def measure(name: str, repeats: int) -> dict[str, Any]:
    model = load(name, quick=False)
    tm = trace_module(copy.deepcopy(model.module), model.inputs, model.target, model.loss_fn, name=model.name)
    module = copy.deepcopy(model.module)
    step = step_of(model, module)
    for _ in range(2):
        module.zero_grad(set_to_none=True)
        step()
    with torch.no_grad():
        in_step = by_phase(tm.gm, time_fx_nodes(tm.gm, tm.flat_args()))
    took = []
    for _ in range(repeats):
        module.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        step()
        took.append(time.perf_counter() - t0)
    with torch.no_grad():
        rerun = by_phase(tm.gm, rerun_times(tm.gm, tm.flat_args()))
    return {"model": name, "step_ms": statistics.median(took) * 1e3, "in step": in_step, "re-run": rerun}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["resnet18_cifar", "gpt2_tiny", "unet"])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--out", "-o", type=Path, default=None)
    ap.add_argument("--quick", action="store_true", help="the U-Net only, 3 repeats (a smoke run)")
    args = ap.parse_args(argv)
    if args.quick:
        args.models, args.repeats = ["unet"], 3
    torch.set_num_threads(1)
    start = machine_load()
    lines = ["| model | autograd step ms | table | forward ms | backward ms | total ms | total / step |",
             "|---|---|---|---|---|---|---|"]
    for name in args.models:
        r = measure(name, args.repeats)
        for how in ("in step", "re-run"):
            t = r[how]
            total = t["forward"] + t["backward"]
            lines.append(f"| {name} | {r['step_ms']:.1f} | {how} | {t['forward']:.1f} | {t['backward']:.1f} | "
                         f"{total:.1f} | {total / r['step_ms']:.2f} |")
        print(lines[-2] + "\n" + lines[-1], file=sys.stderr, flush=True)
    lines += ["", f"torch {torch.__version__}, 1 thread, {os.cpu_count()} CPUs; machine {start} at the start, "
              f"{machine_load()} at the end."]
    write_results("\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
