"""Where eager ``checkpointed()``'s time goes: PyTorch's checkpointing, or the recomputation itself.

Per cell (a model of ``bench/torch_bench.py`` at a RAM budget, compiled as there with the
op-timed profile ``bench/results/torch_profile_<model>.json``), four variants of one
training step, interleaved, the median of ``--repeats`` ratios to plain autograd taken in
the same repetition:

* ``autograd``           the module itself;
* ``checkpointed``       ``Compilation.checkpointed()``, eager;
* ``generated``          the same generated forward with every region called directly
                         (no checkpointing, nothing recomputed);
* ``generated + rerun``  that, with every region run a second time on detached inputs
                         with autograd recording, as a recomputation runs it: the
                         recomputation's work without PyTorch's checkpoint machinery.

``checkpointed`` minus ``generated`` is what the plan's recomputation and PyTorch's
machinery cost on this machine; the predicted factor minus 1 (the simulator's runtime of
the plan over that of plain autograd, from the profile's op table) is what poetc expects
them to cost. ``generated + rerun`` bounds the recomputation's own work from above (it
also re-runs the calls a policy caches and those after the early stop).

    PYTHONPATH=. .venv/bin/python bench/checkpoint_cost.py -o bench/results/checkpoint_cost.md
"""

from __future__ import annotations

import argparse
import copy
import operator
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from torch_bench import compile_cell, load, machine_load, op_table_profile, step_of, write_results  # noqa: E402

VARIANTS = ("autograd", "checkpointed", "generated", "generated + rerun")
RESULTS = Path(__file__).resolve().parent / "results"


def _direct(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return fn(*args)


def _rerun(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    out = fn(*args)
    again = [a.detach().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a for a in args]
    with torch.enable_grad():
        fn(*again)
    return out


def with_regions_called(m: Any, how: Callable[..., Any]) -> Any:
    """``m`` (a fresh ``checkpointed()``) with its regions called by ``how`` instead of
    ``torch.utils.checkpoint.checkpoint``."""
    m._eager.__globals__["_ckpt"] = how
    return m


def cell(name: str, ram: str, repeats: int, effort: float, quick: bool = False) -> dict[str, Any]:
    model = load(name, quick=quick)
    base = copy.deepcopy(model.module)
    cell_mod = copy.deepcopy(base)
    c = compile_cell(name, model, cell_mod, str(op_table_profile(RESULTS, name)), ram, effort)
    m = c.checkpointed()
    sim = m.plan.simulation
    assert sim is not None
    auto = copy.deepcopy(base)
    modules = {"autograd": auto, "checkpointed": m,
               "generated": with_regions_called(c.checkpointed(), _direct),
               "generated + rerun": with_regions_called(c.checkpointed(), _rerun)}
    steps = {v: step_of(model, mod) for v, mod in modules.items()}
    owners = {v: (auto if v == "autograd" else cell_mod) for v in VARIANTS}
    for v in VARIANTS:                     # warm-up
        owners[v].zero_grad(set_to_none=True)
        steps[v]()
    ratios: dict[str, list[float]] = {v: [] for v in VARIANTS}
    ms: list[float] = []
    for _ in range(repeats):
        took: dict[str, float] = {}
        for v in VARIANTS:
            owners[v].zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            steps[v]()
            took[v] = time.perf_counter() - t0
        ms.append(took["autograd"] * 1e3)
        for v in VARIANTS:
            ratios[v].append(took[v] / took["autograd"])
    for mod in modules.values():
        if hasattr(mod, "close"):
            mod.close()
    fx = {n.name: n for n in m._traced.gm.graph.nodes}
    calls = sum(1 for r in m.plan.regions for o in r.recompute if fx[o].target is not operator.getitem)
    return {"model": name, "ram": ram, "regions": len(m.plan.regions), "recomputed_calls": calls,
            "predicted": sim.runtime_s / c.reference.runtime_s, "autograd_ms": statistics.median(ms),
            **{v: statistics.median(ratios[v]) for v in VARIANTS}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["resnet18_cifar", "gpt2_tiny", "unet"])
    ap.add_argument("--ram", nargs="+", default=["30%", "50%", "70%"])
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--effort", type=float, default=5.0, help="poetc's effort per compile, as bench/torch_bench.py")
    ap.add_argument("--out", "-o", type=Path, default=None)
    ap.add_argument("--quick", action="store_true", help="the small U-Net at 50 %%, 3 repeats (a smoke run)")
    args = ap.parse_args(argv)
    if args.quick:
        args.models, args.ram, args.repeats, args.effort = ["unet"], ["50%"], 3, 0.3
    torch.set_num_threads(1)
    start = machine_load()
    rows = []
    for name in args.models:
        for ram in args.ram:
            row = cell(name, ram, args.repeats, args.effort, args.quick)
            rows.append(row)
            print(f"  {name} {ram}: " + ", ".join(f"{v} x{row[v]:.3f}" for v in VARIANTS)
                  + f", predicted x{row['predicted']:.3f}", file=sys.stderr, flush=True)
    lines = ["| model | budget | regions, recomputed calls | autograd ms | predicted × | checkpointed × | "
             "generated × | generated + rerun × | checkpointed over generated / predicted over 1 |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        predicted = r["predicted"] - 1.0
        share = f"{(r['checkpointed'] - r['generated']) / predicted:.1f}" if predicted > 0.005 else "-"
        lines.append(f"| {r['model']} | {r['ram']} | {r['regions']}, {r['recomputed_calls']} | "
                     f"{r['autograd_ms']:.1f} | {r['predicted']:.2f} | {r['checkpointed']:.2f} | "
                     f"{r['generated']:.2f} | {r['generated + rerun']:.2f} | {share} |")
    lines += ["", f"torch {torch.__version__}, 1 thread, {os.cpu_count()} CPUs; medians of {args.repeats} interleaved "
              f"ratios to autograd; machine {start} at the start, {machine_load()} at the end."]
    write_results("\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
