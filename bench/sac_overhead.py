"""What PyTorch's selective checkpointing costs beyond its ops, per region and per ATen call.

A chain of k ``torch.sin`` on a 16 x 16 tensor, forward and backward, one thread, in four
variants: plain autograd; ``checkpoint(..., use_reentrant=False)``; and the same with a
selective policy (``create_selective_checkpoint_contexts``) that saves every op, or
recomputes every op. Each figure is the median of 5 batches of 200 steps after a warm-up,
in microseconds per step. ``poet_compiler/torch_exec/plan_search.py`` prices a plan's regions
from it (``REGION_OVERHEAD_S``, ``REGION_CALL_OVERHEAD_S``; docs/pytorch.md).

    .venv/bin/python bench/sac_overhead.py
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

VARIANTS = ("plain", "checkpoint", "selective, save all", "selective, recompute all")


def chain(x: torch.Tensor, k: int) -> torch.Tensor:
    for _ in range(k):
        x = torch.sin(x)
    return x


def context_fn(save: bool) -> Callable[[], Any]:
    policy = CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.MUST_RECOMPUTE

    def decide(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        return policy
    return functools.partial(create_selective_checkpoint_contexts, decide)


def step(variant: str, k: int, x0: torch.Tensor) -> None:
    x = x0.detach().requires_grad_()
    if variant == "plain":
        y = chain(x, k)
    elif variant == "checkpoint":
        y = checkpoint(chain, x, k, use_reentrant=False)
    else:
        y = checkpoint(chain, x, k, use_reentrant=False, context_fn=context_fn(variant.endswith("save all")))
    y.sum().backward()


def median_us(variant: str, k: int, reps: int) -> float:
    x0 = torch.randn(16, 16)
    for _ in range(20):
        step(variant, k, x0)
    batches = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps):
            step(variant, k, x0)
        batches.append((time.perf_counter() - t) / reps * 1e6)
    return statistics.median(batches)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default="1,4,16,64", help="chain lengths k, comma-separated")
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print("| k | " + " | ".join(f"{v} us" for v in VARIANTS) + " |")
    print("|---" * (len(VARIANTS) + 1) + "|")
    for k in (int(s) for s in args.ops.split(",")):
        row = [median_us(v, k, args.reps) for v in VARIANTS]
        print(f"| {k} | " + " | ".join(f"{t:.0f}" for t in row) + " |", flush=True)


if __name__ == "__main__":
    main()
