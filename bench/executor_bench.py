"""Executor benchmark: wall time of the scheduled step vs plain autograd on CPU .

For each model: compile in mode poet on a device at a RAM budget (default 50 % of the
checkpoint-all peak), then time, in the same process and interleaved, plain
``loss.backward()`` and the scheduled step (paging to a real page file), and put the
measured ratio next to the overhead the cost model predicts (simulated runtime of the
schedule / runtime of checkpoint-all). Also checks gradients are bitwise equal and
records measured vs simulated peak. Prints a Markdown table (BENCHMARKS.md, "PyTorch executor").

    .venv/bin/python bench/executor_bench.py --models kws_dscnn cifar_cnn_tiny gpt2_tiny vgg16_cifar resnet18_cifar \
        --ram 50% --repeats 3 --out bench/results/executor.md
    .venv/bin/python bench/executor_bench.py --quick     # kws_dscnn alone, one timed run
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

import poet_compiler.api as api
from poet_compiler.codegen.executor import ScheduledStep
from poet_compiler.codegen.verification import autograd_step
from poet_compiler.fileio import atomic_write_text
from poet_compiler.frontends import trace_zoo
from poet_compiler.schedule.simulate import simulate

SMALL = ("mlp", "cifar_cnn_tiny", "kws_dscnn", "resnet18_cifar", "bert_tiny", "gpt2_tiny")
HEADER = ("| model | gran. | batch | nodes | budget | status | recomp | paged KiB | autograd ms | scheduled ms "
          "| measured x | predicted x | bitwise | peak meas/sim |")


def bench_one(name: str, *, device: str, ram: str, batch: int | None, granularity: str, repeats: int,
              time_limit_s: float) -> str:
    tm = trace_zoo(name, granularity=granularity, batch=batch)
    c = api.compile(tm.graph, device, ram, mode="poet", time_limit_s=time_limit_s, threads=1)
    head = f"| {name} | {granularity} | {batch or 'default'} | {tm.graph.n} | {ram} | {c.result.status}"
    if not c.result.ok:
        return head + " | - | - | - | - | - | - | - | - |"
    sim = simulate(c.graph, c.costs, c.program)
    predicted = sim.runtime_s / c.reference.runtime_s
    auto_t: list[float] = []
    sched_t: list[float] = []
    with ScheduledStep(tm, c.program) as step:
        autograd_step(tm)  # warm-up both paths (allocator, kernels, page file)
        step.run()
        for _ in range(repeats):
            ref_loss, ref_grads, _, wall = autograd_step(tm)
            auto_t.append(wall)
            t0 = time.perf_counter()
            loss, grads = step.run()
            sched_t.append(time.perf_counter() - t0)
        stats = step.last
    assert stats is not None
    bitwise = torch.equal(loss, ref_loss) and all(torch.equal(grads[k], ref_grads[k]) for k in ref_grads)
    a, s = statistics.median(auto_t), statistics.median(sched_t)
    return (head + f" | {sim.n_recompute} | {sim.page_out_bytes / 1024:.0f} | {a * 1e3:.1f} | {s * 1e3:.1f} "
            f"| {s / a:.2f} | {predicted:.2f} | {'yes' if bitwise else 'NO'} "
            f"| {stats.peak_bytes / sim.peak_bytes:.4f} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(SMALL))
    ap.add_argument("--device", default="m4")
    ap.add_argument("--ram", default="50%")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--granularity", default="op", choices=("op", "module", "layer", "auto"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--out", "-o", type=Path, default=None, help="also write the table to this .md file")
    ap.add_argument("--quick", action="store_true", help="the smallest cell: kws_dscnn, one timed run, 5 s limit")
    args = ap.parse_args(argv)
    if args.quick:
        args.models, args.repeats, args.time_limit = ["kws_dscnn"], 1, 5.0
    lines = [HEADER, "|" + "---|" * HEADER.count(" | ") + "---|"]
    print("\n".join(lines), flush=True)
    for name in args.models:
        row = bench_one(name, device=args.device, ram=args.ram, batch=args.batch, granularity=args.granularity,
                        repeats=args.repeats, time_limit_s=args.time_limit)
        print(row, flush=True)
        lines.append(row)
    lines.append("")
    lines.append(f"torch {torch.__version__}, {torch.get_num_threads()} threads; medians of {args.repeats} "
                 f"interleaved runs after one warm-up; measured x = scheduled / autograd wall time; "
                 f"predicted x = simulated runtime of the schedule / checkpoint-all runtime on {args.device}.")
    if args.out is not None:
        atomic_write_text(args.out, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
