"""Random ops under a schedule: gradients at every budget, and the cost of replaying a draw.

    PYTHONPATH=. .venv/bin/python bench/random_ops.py -o bench/results/random_ops      # this tree
    .venv/bin/python bench/random_ops.py --code /tmp/main --parts grads -o /tmp/before   # another checkout

Models: the dropout MLP of tests/api/dropoutmodels.py (three ``Dropout(0.1)``, batch 64)
and Hugging Face GPT-2, BERT, DistilBERT from small ``transformers`` configs with their
default dropout 0.1, train mode (tests/api/hfmodels.py); device ``a72``, effort 1, one thread.

Parts (``--parts``):

- ``grads``: at each budget, one step of ``training_step()`` and one of eager
  ``checkpointed()`` under ``torch.manual_seed(1)``: the max |diff| of their gradients
  against the same step at 100 % and against eager autograd, and how many times the
  schedule recomputes a random op. ``--code DIR`` imports ``poet_compiler`` from DIR (a
  ``git archive`` of another revision: the "before" column).
- ``route``: what replaying costs the optimizer. Per budget, the schedule's energy and
  predicted time with poetc's model (a random op may be recomputed while its 5,056-byte
  stashed state is kept: frontends/torch/rng.py) against the model that keeps every
  random op's output instead (random nodes pinned: never recomputed, never paged), on the
  same graph and budget; and, on this machine, the time to stash and restore a generator
  state against one draw of each model's largest mask.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BUDGETS = ("100%", "90%", "75%", "50%")
MODELS = ("mlp", "gpt2", "bert", "distilbert")


def _load(rel: str) -> Any:
    """A helper module of this tree by path (its package may be another checkout's)."""
    spec = importlib.util.spec_from_file_location(Path(rel).stem, ROOT / rel)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def build(name: str) -> tuple[Any, Any, Any, Any]:
    import torch.nn.functional as F

    if name == "mlp":
        model, x, y = _load("tests/api/dropoutmodels.py").mlp_case()
        return model, x, y, F.cross_entropy
    return _load("tests/api/hfmodels.py").build(name)


def _grads(module: Any, step: Any) -> dict[str, Any]:
    import torch

    module.zero_grad(set_to_none=True)
    torch.manual_seed(1)
    step()
    out = {n: p.grad.detach().clone() for n, p in module.named_parameters() if p.grad is not None}
    module.zero_grad(set_to_none=True)
    return out


def _diff(a: dict[str, Any], b: dict[str, Any]) -> float:
    if a.keys() != b.keys():
        return float("inf")
    return max((float((a[k].double() - b[k].double()).abs().max()) for k in a), default=0.0)


def _compile(name: str, model: Any, x: Any, y: Any, loss_fn: Any, ram: str | int) -> Any:
    import poet_compiler

    return poet_compiler.compile(model, device="a72", ram=ram, example_inputs=(x,), target=y, loss_fn=loss_fn,
                                 name=name, effort=1.0, time_limit_s=600, threads=1)


def _random_recomputes(c: Any) -> int:
    """COMPUTEs of dropout masks (op label ``aten.bernoulli``) beyond their first; attention's
    own dropout (``dropout_p`` > 0) draws inside its kernel and is not counted."""
    nodes = {nd.id for nd in c.graph.nodes if nd.op == "aten.bernoulli"}
    computes = sum(1 for ins in c.program.instructions if ins.op.name == "COMPUTE" and ins.node in nodes)
    return computes - len(nodes)


def _budget_grads(c: Any, model: Any, x: Any, y: Any, loss_fn: Any) -> dict[str, dict[str, Any]]:
    """One seeded step of ``training_step()`` and of eager ``checkpointed()``: their gradients."""
    step = c.training_step()
    got = {"step": _grads(model, lambda: step(x, y))}
    step.close()
    m = c.checkpointed(allow_over_budget=True)   # a plan above the budget too: the bits are what is measured
    got["ckpt"] = _grads(model, lambda: loss_fn(m(x), y).backward())
    m.close()
    return got


def grads_part(names: list[str], budgets: list[str], log: Any) -> list[str]:
    rows = ["| model | budget | status | masks recomputed | training_step vs 100 % | checkpointed vs 100 % "
            "| training_step vs autograd | checkpointed vs autograd |", "|---|---|---|---|---|---|---|---|"]
    for name in names:
        model, x, y, loss_fn = build(name)
        twin = copy.deepcopy(model)
        auto = _grads(twin, functools.partial(_backward, twin, x, y, loss_fn))
        at_full: dict[str, dict[str, Any]] = {}
        for ram in budgets:
            c = _compile(name, model, x, y, loss_fn, ram)
            if c.program is None:
                rows.append(f"| {name} | {ram} | {c.result.status} | - | - | - | - | - |")
                continue
            got = _budget_grads(c, model, x, y, loss_fn)
            if ram == "100%":
                at_full = got
            full = at_full or {k: {} for k in got}
            rows.append(f"| {name} | {ram} | {c.result.status} | {_random_recomputes(c)} | "
                        f"{_diff(got['step'], full['step']):.2g} | {_diff(got['ckpt'], full['ckpt']):.2g} | "
                        f"{_diff(got['step'], auto):.2g} | {_diff(got['ckpt'], auto):.2g} |")
            log(rows[-1])
    return rows


def _backward(module: Any, x: Any, y: Any, loss_fn: Any) -> None:
    loss_fn(module(x), y).backward()


def _keeping_outputs(graph: Any) -> Any:
    """``graph`` with every random op pinned: its output kept, never recomputed or paged."""
    from poet_compiler.graph.ir import RNG_STATE_OP

    randoms = {nd.id for nd in graph.nodes if any(graph.nodes[j].op == RNG_STATE_OP for j in nd.inputs)}
    nodes = tuple(dataclasses.replace(nd, pinned=True) if nd.id in randoms else nd for nd in graph.nodes)
    return dataclasses.replace(graph, nodes=nodes, name=f"{graph.name} (outputs kept)")


def _us(fn: Any, repeats: int = 200) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t0) / repeats * 1e6


def route_part(names: list[str], budgets: list[str], log: Any) -> list[str]:
    import torch

    import poet_compiler

    rows = ["| model | budget | stashed state: status, energy mJ, time ms, masks recomputed "
            "| outputs kept: status, energy mJ, time ms | largest mask | draw µs | stash + restore µs |",
            "|---|---|---|---|---|---|---|"]
    state = torch.get_rng_state()
    restore_us = _us(lambda: torch.set_rng_state(torch.get_rng_state())) + _us(lambda: torch.set_rng_state(state))
    for name in names:
        model, x, y, loss_fn = build(name)
        for ram in budgets:
            c = _compile(name, model, x, y, loss_fn, ram)
            kept = poet_compiler.compile(_keeping_outputs(c.graph), device="a72", ram=c.result.ram_budget_bytes,
                                         effort=1.0, time_limit_s=600, threads=1)
            mask = max((nd.output_bytes for nd in c.graph.nodes if nd.op == "aten.bernoulli"), default=0)
            template = torch.empty(mask // 4)
            draw_us = _us(lambda t=template: torch.ops.aten.bernoulli.p(t, 0.9), 50)

            def cell(r: Any, recomputes: str = "") -> str:
                if r.program is None:
                    return r.status
                return f"{r.status}, {r.energy_j * 1e3:.2f}, {r.runtime_s * 1e3:.2f}{recomputes}"

            rows.append(f"| {name} | {ram} | {cell(c.result, f', {_random_recomputes(c)}' if c.program else '')} | "
                        f"{cell(kept.result)} | {mask:,} B | {draw_us:.0f} | {restore_us:.1f} |")
            log(rows[-1])
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--ram", nargs="+", default=list(BUDGETS))
    ap.add_argument("--parts", nargs="+", default=["grads", "route"], choices=["grads", "route"])
    ap.add_argument("--code", type=Path, default=None, help="import poet_compiler from this checkout")
    ap.add_argument("--out", "-o", type=Path, default=None, help="write OUT.md")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(args.code or ROOT))
    import torch

    import poet_compiler

    torch.set_num_threads(1)

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    load0 = os.getloadavg()
    lines = [f"poet_compiler from {Path(poet_compiler.__file__).parent.parent}, torch {torch.__version__}, "
             "1 thread", ""]
    if "grads" in args.parts:
        lines += ["## Gradients (max |diff|, seed 1)", ""] + grads_part(args.models, args.ram, log) + [""]
    if "route" in args.parts:
        lines += ["## Stashed state or kept output", ""] + route_part(args.models, args.ram, log) + [""]
    lines.append(f"load average {load0[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end (2 cores, shared)")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        from poet_compiler.fileio import atomic_write_text

        atomic_write_text(args.out.with_suffix(".md"), text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
