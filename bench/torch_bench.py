"""PyTorch execution: a poetc plan run by PyTorch's own machinery, against PyTorch's answers.

Four models (a zoo CNN, a zoo transformer, a U-Net and a ReLU transformer written here,
bench/torch_models.py), each compiled by poetc
at RAM budgets of 30, 50 and 70 % of its checkpoint-all activation peak for a profile of
this machine (``poetc profile --quick``, measured at the start, with every op of the model
timed on it: a per-op table, so that the predicted times are this machine's). Per cell, the variants of
one training step (``loss_fn(model(x), y).backward()``), on one machine in one process:

* ``autograd``      plain PyTorch;
* ``ckpt-blocks``   ``torch.utils.checkpoint`` (non-reentrant) around every block;
* ``torch.compile`` plain ``torch.compile`` (Inductor), the reference of the compiled steps' gradients;
* ``torch-budget``  ``torch.compile`` with ``torch._functorch.config.activation_memory_budget``
                    set (from a grid) to the least measured peak at or above poetc's compiled one;
* ``training_step`` poetc's interpreter (``Compilation.training_step()``);
* ``checkpointed``  ``Compilation.checkpointed()`` in eager mode;
* ``checkpointed, policy everywhere``  the same plan with a selective policy in every
                    region, also those that save no call (which ``checkpointed()`` runs as
                    plain checkpointing): what the policy's dispatch costs;
* ``compiled``      ``torch.compile(checkpointed())``.

Columns: step ms (median of 5 interleaved runs after a warm-up), measured peak (the CPU
allocator's bytes allocated by the step and live at once, gradients left out:
poet_compiler/torch_exec/memtrack.py), the plan's predicted peak (the simulator's), and the
gradients against autograd (max |diff|, and relative: max over parameters of max |diff| /
max |autograd's|, for the compiled steps' table). The allowance on the prediction is one
kernel's scratch, measured on the autograd step.

    .venv/bin/python bench/torch_bench.py -o bench/results/torch.md
    .venv/bin/python bench/torch_bench.py --quick -o /tmp/torch.md      # the U-Net at 50 %, aot_eager
"""

from __future__ import annotations

import argparse
import copy
import functools
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch_models import Model, load

import poet_compiler
from poet_compiler.fileio import atomic_write_text
from poet_compiler.torch_exec.checkpointed_forward import saves_a_call
from poet_compiler.torch_exec.memtrack import measure

VARIANTS = ("autograd", "ckpt-blocks", "torch.compile", "torch-budget", "training_step", "checkpointed",
            "checkpointed, policy everywhere", "compiled")
BUDGET_GRID = (0.0, 0.1, 0.2, 0.35, 0.5, 0.7, 1.0)


# -- the variants -------------------------------------------------------------------------------
def with_block_checkpoints(module: nn.Module, blocks: list[str]) -> nn.Module:
    m = copy.deepcopy(module)
    for path in blocks:
        blk = m.get_submodule(path)
        blk.forward = functools.partial(torch.utils.checkpoint.checkpoint, blk.forward, use_reentrant=False)
    return m


def budget_backend(budget: float, quick: bool) -> Callable[..., Any]:
    """A torch.compile backend that partitions under ``activation_memory_budget = budget``."""
    def backend(gm: Any, example_inputs: Any) -> Any:
        with torch._functorch.config.patch(activation_memory_budget=budget):
            if quick:
                from torch._dynamo.backends.debugging import aot_eager
                return aot_eager(gm, example_inputs)
            from torch._inductor.compile_fx import compile_fx
            return compile_fx(gm, example_inputs)
    return backend


def with_policy_everywhere(m: Any) -> Any:
    """``m`` (a fresh ``checkpointed()``) with a selective policy, recomputing every call, in
    the regions it runs as plain checkpointing: the same recomputation through the policy's
    dispatch mode."""
    from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

    def recompute(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        return CheckpointPolicy.MUST_RECOMPUTE

    def ckpt(fn: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("context_fn", functools.partial(create_selective_checkpoint_contexts, recompute))
        return checkpoint(fn, *args, **kwargs)

    m._eager.__globals__["_ckpt"] = ckpt
    return m


@dataclass
class Run:
    """One variant of one cell: how to run a step, and what it measured."""

    name: str
    module: nn.Module            # whose parameters get the gradients
    fn: Callable[[], Any]
    predicted: int | None = None
    times: list[float] = field(default_factory=list)
    peak: int | None = None
    grad_bitwise: bool | None = None
    grad_diff: float | None = None
    grad_rel: float | None = None     # max over parameters of max |diff| / max |autograd's|
    note: str = ""

    @property
    def ms(self) -> float | None:
        return statistics.median(self.times) * 1e3 if self.times else None


def step_of(model: Model, module: Callable[..., Any]) -> Callable[[], Any]:
    def step() -> None:
        model.loss_fn(module(*model.inputs), model.target).backward()
    return step


def zero(module: nn.Module) -> None:
    module.zero_grad(set_to_none=True)


def grads_of(module: nn.Module) -> list[torch.Tensor | None]:
    return [p.grad for p in module.parameters()]


def first_grads(run: Run, seed: int = 0) -> dict[str, torch.Tensor]:
    zero(run.module)
    torch.manual_seed(seed)
    run.fn()
    out = {n: p.grad.detach().clone() for n, p in run.module.named_parameters() if p.grad is not None}
    zero(run.module)
    return out


def compare(run: Run, ref: dict[str, torch.Tensor], seed: int = 0) -> None:
    got = first_grads(run, seed)
    run.grad_bitwise = got.keys() == ref.keys() and all(torch.equal(got[k], ref[k]) for k in ref)
    run.grad_diff = max(((got[k].double() - ref[k].double()).abs().max().item() for k in ref if k in got),
                        default=float("inf"))
    run.grad_rel = max((relative_diff(got[k], ref[k]) for k in ref if k in got), default=float("inf"))


def relative_diff(got: torch.Tensor, ref: torch.Tensor) -> float:
    """max |got - ref| / max |ref| (0 where both are all zero)."""
    diff = (got.double() - ref.double()).abs().max().item()
    scale = ref.double().abs().max().item()
    return diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))


def measure_peak(run: Run) -> None:
    zero(run.module)
    torch.manual_seed(1)
    _, got = measure(run.fn, lambda: grads_of(run.module), params=list(run.module.parameters()))
    zero(run.module)
    run.peak = got.peak_bytes


def time_interleaved(runs: list[Run], repeats: int) -> None:
    for run in runs:                       # warm-up (and compile, for the compiled ones)
        zero(run.module)
        run.fn()
        zero(run.module)
    for _ in range(repeats):
        for run in runs:
            zero(run.module)
            t0 = time.perf_counter()
            run.fn()
            run.times.append(time.perf_counter() - t0)
    for run in runs:
        zero(run.module)


# -- one model ----------------------------------------------------------------------------------
def op_table_profile(out_dir: Path, model_name: str) -> Path:
    """Where :func:`with_op_table` writes ``model_name``'s profile."""
    return out_dir / f"torch_profile_{model_name.split()[0]}.json"


def compile_cell(name: str, model: Model, module: nn.Module, device: str, ram: str, effort: float) -> Any:
    """poetc's compile of cell ``name`` at ``ram`` (``module``, a copy of the model's, is the
    one trained)."""
    return poet_compiler.compile(module, device=device, ram=ram, example_inputs=model.inputs, target=model.target,
                                 loss_fn=model.loss_fn, name=name, effort=effort, time_limit_s=600, threads=1)


def write_results(text: str, out: Path | None) -> None:
    print(text)
    if out is not None:
        atomic_write_text(out, text)


def with_op_table(device: str, model: Model, out_dir: Path) -> str:
    """``device`` plus a measured per-op table of ``model`` (the ops of its traced step, each
    timed as the step runs it: devices/profiler/fx_timing.py), written beside the results."""
    import json

    from poet_compiler.devices.profile import dumps_profile, load_profile
    from poet_compiler.devices.profiler.fx_timing import traced_op_times
    from poet_compiler.frontends.torch import trace_module

    base = load_profile(device)
    tm = trace_module(copy.deepcopy(model.module), model.inputs, model.target, model.loss_fn, name=model.name)
    table = traced_op_times(tm, base.op_overhead_s)
    data = json.loads(dumps_profile(base))
    data["name"] = f"{base.name}_{model.name.split()[0]}"
    data["op_table"] = {sig: {"compute_s": t, "compute_j": 15.0 * t} for sig, t in sorted(table.items())}
    data["sources"]["op_table"] = {"kind": "measurement", "ref": "bench/torch_bench.py: every op of the traced step "
                                   "timed as the step runs it on this machine (fx_timing.traced_op_times); 15 W"}
    path = op_table_profile(out_dir, model.name)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return str(path)


def bench_model(name: str, *, device: str, budgets: list[str], repeats: int, quick: bool, effort: float,
                log: Callable[[str], None], out_dir: Path | None) -> list[dict[str, Any]]:
    model = load(name, quick)
    torch._dynamo.reset()
    if out_dir is not None:
        device = with_op_table(device, model, out_dir)
        log(f"  {name}: profile with measured op times: {device}")
    base = copy.deepcopy(model.module)
    auto_mod = copy.deepcopy(base)
    auto = Run("autograd", auto_mod, step_of(model, auto_mod))
    zero(auto_mod)
    auto.fn()
    zero(auto_mod)
    ref = first_grads(auto)
    _, plain = measure(auto.fn, lambda: grads_of(auto_mod), params=list(auto_mod.parameters()))
    zero(auto_mod)
    slack = plain.slack_bytes
    blocks_mod = with_block_checkpoints(base, model.blocks)
    blocks = Run("ckpt-blocks", blocks_mod, step_of(model, blocks_mod))
    # PyTorch's budget knob: one compile per grid point, shared by the cells of this model.
    grid: list[tuple[float, Run]] = []
    for b in (BUDGET_GRID if not quick else (0.5,)):
        mod = copy.deepcopy(base)
        compiled = torch.compile(mod, backend=budget_backend(b, quick))
        run = Run("torch-budget", mod, step_of(model, compiled), note=f"budget {b}")
        t0 = time.perf_counter()
        zero(mod)
        run.fn()
        zero(mod)
        measure_peak(run)
        log(f"  {name}: torch.compile activation_memory_budget={b}: peak {run.peak} B "
            f"(compiled in {time.perf_counter() - t0:.0f} s)")
        grid.append((b, run))
    plain_mod = copy.deepcopy(base)
    plain = Run("torch.compile", plain_mod, step_of(model, torch.compile(plain_mod, backend=budget_backend(1.0, quick)
                                                                       if quick else "inductor")))
    zero(plain_mod)
    plain.fn()                             # compile it
    zero(plain_mod)
    measure_peak(plain)
    rows: list[dict[str, Any]] = []
    for ram in budgets:
        cell_mod = copy.deepcopy(base)
        t0 = time.perf_counter()
        c = compile_cell(name, model, cell_mod, device, ram, effort)
        solve_s = time.perf_counter() - t0
        if not c.result.ok:
            rows.append({"model": name, "ram": ram, "status": c.result.status, "message": c.result.message})
            log(f"  {name} {ram}: {c.result.status}")
            continue
        t0 = time.perf_counter()
        m = c.checkpointed()
        plan_s = time.perf_counter() - t0
        plan = m.plan
        sim = plan.simulation
        assert sim is not None
        factor = sim.runtime_s / c.reference.runtime_s
        step = c.training_step()
        interp = Run("training_step", cell_mod, lambda step=step: step(*model.inputs, model.target),
                     predicted=c.result.peak_ram_bytes)
        eager = Run("checkpointed", cell_mod, step_of(model, m), predicted=plan.peak_bytes)
        m_all = with_policy_everywhere(c.checkpointed())
        eager_all = Run("checkpointed, policy everywhere", cell_mod, step_of(model, m_all), predicted=plan.peak_bytes)
        comp_mod = torch.compile(m, backend=budget_backend(1.0, quick)) if quick else torch.compile(m)
        comp = Run("compiled", cell_mod, step_of(model, comp_mod))
        zero(cell_mod)
        comp.fn()                          # compile it
        zero(cell_mod)
        runs = [auto, blocks, interp, eager, eager_all, comp]
        for run in runs:
            measure_peak(run)
        # PyTorch's cell: the grid point with the least measured peak at or above poetc's
        # compiled one (else the largest below it).
        assert comp.peak is not None
        above = [g for g in grid if (g[1].peak or 0) >= comp.peak]
        b, torch_run = min(above, key=lambda g: g[1].peak or 0) if above else max(grid, key=lambda g: g[1].peak or 0)
        cell_torch = Run("torch-budget", torch_run.module, torch_run.fn, peak=torch_run.peak, note=f"budget {b}")
        runs.insert(2, cell_torch)
        runs.insert(2, Run("torch.compile", plain_mod, plain.fn, peak=plain.peak))
        for run in runs:
            run.times = []
        time_interleaved(runs, repeats)
        for run in runs:
            if run is not auto and (run is not blocks or blocks.grad_bitwise is None):
                compare(run, ref)
        auto.grad_bitwise, auto.grad_diff, auto.grad_rel = True, 0.0, 0.0
        auto.predicted = c.reference.peak_bytes
        a_ms = auto.ms
        assert a_ms is not None and eager.ms is not None and comp.ms is not None and cell_torch.ms is not None
        snap = [Run(r.name, r.module, r.fn, predicted=r.predicted, times=list(r.times), peak=r.peak,
                    grad_bitwise=r.grad_bitwise, grad_diff=r.grad_diff, grad_rel=r.grad_rel, note=r.note)
                for r in runs]
        row = {
            "model": name, "ram": ram, "status": c.result.status, "nodes": c.graph.n,
            "budget": c.problem.activation_budget, "schedule_peak": c.result.peak_ram_bytes,
            "plan_peak": plan.peak_bytes, "fits": plan.peak_bytes <= c.problem.activation_budget,
            "regions": len(plan.regions), "recomputes": sim.n_recompute,
            "plain_regions": sum(not saves_a_call(c.torch_plan()[1], r) for r in plan.regions),
            "paged": len(plan.paged), "factor": factor, "slack": slack, "solve_s": solve_s, "plan_s": plan_s,
            "runs": snap, "eager_ok": eager.ms <= 1.05 * a_ms * factor,
            "peak_ok": (eager.peak or 0) <= plan.peak_bytes + slack,
            "compiled_ok": (comp.peak or 0) <= (cell_torch.peak or 0) and comp.ms <= cell_torch.ms,
        }
        rows.append(row)
        log(f"  {name} {ram}: autograd {a_ms:.1f} ms, checkpointed {eager.ms:.1f} ms "
            f"(x{eager.ms / a_ms:.2f}, predicted x{factor:.2f}), peak {eager.peak} / plan {plan.peak_bytes} "
            f"(+{slack} slack), compiled {comp.ms:.1f} ms {comp.peak} B vs torch budget {b}: "
            f"{cell_torch.ms:.1f} ms {cell_torch.peak} B")
        step.close()
        m.close()
        m_all.close()
    return rows


def kib(b: int | None) -> str:
    return "-" if b is None else f"{b / 1024:,.0f}"


def table(rows: list[dict[str, Any]]) -> list[str]:
    out = ["| model | budget | variant | step ms | × autograd | measured peak KiB | predicted peak KiB | gradients |",
           "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if "runs" not in row:
            out.append(f"| {row['model']} | {row['ram']} | {row['status']} | - | - | - | - | - |")
            continue
        a_ms = row["runs"][0].ms
        for run in row["runs"]:
            grads = "bitwise" if run.grad_bitwise else f"max diff {run.grad_diff:.1e}"
            name = run.name + (f" ({run.note})" if run.note else "")
            out.append(f"| {row['model']} | {row['ram']} | {name} | {run.ms:.1f} | {run.ms / a_ms:.2f} | "
                       f"{kib(run.peak)} | {kib(run.predicted)} | {grads} |")
    return out


def summary(rows: list[dict[str, Any]]) -> list[str]:
    out = ["| model | budget | plan / budget KiB | regions (plain), recomputes, paged | checkpointed × (policy "
           "everywhere) ≤ 1.05 × predicted "
           "| measured ≤ plan + slack KiB | compiled vs torch-budget: ms, KiB |",
           "|---|---|---|---|---|---|---|"]
    for row in rows:
        if "runs" not in row:
            out.append(f"| {row['model']} | {row['ram']} | {row['status']} | - | - | - | - |")
            continue
        r = {run.name: run for run in row["runs"]}
        a, e, comp, tb = r["autograd"], r["checkpointed"], r["compiled"], r["torch-budget"]
        everywhere = r["checkpointed, policy everywhere"]
        ok = lambda b: "yes" if b else "**no**"  # noqa: E731
        out.append(
            f"| {row['model']} | {row['ram']} | {kib(row['plan_peak'])} / {kib(row['budget'])}"
            f"{'' if row['fits'] else ' **over**'} | {row['regions']} ({row['plain_regions']}), {row['recomputes']}, "
            f"{row['paged']} | {e.ms / a.ms:.2f} ({everywhere.ms / a.ms:.2f}) ≤ {1.05 * row['factor']:.2f}: "
            f"{ok(row['eager_ok'])} | "
            f"{kib(e.peak)} ≤ {kib(row['plan_peak'])} + {kib(row['slack'])}: {ok(row['peak_ok'])} | "
            f"{comp.ms:.0f} vs {tb.ms:.0f}, {kib(comp.peak)} vs {kib(tb.peak)} ({tb.note}): {ok(row['compiled_ok'])} |")
    return out


def inductor(rows: list[dict[str, Any]]) -> list[str]:
    """The compiled steps against eager autograd: poetc's beside plain ``torch.compile`` and
    PyTorch's budget knob, with the bound max(2 x plain's difference, 1e-5)."""
    out = ["| model | budget | compiled: rel. diff | torch.compile: rel. diff | within max(2x, 1e-5) | "
           "torch-budget: rel. diff | compiled ms, KiB | torch.compile ms, KiB | torch-budget ms, KiB |",
           "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if "runs" not in row:
            continue
        r = {run.name: run for run in row["runs"]}
        comp, plain, tb = r["compiled"], r["torch.compile"], r["torch-budget"]
        assert comp.grad_rel is not None and plain.grad_rel is not None
        bound = max(2 * plain.grad_rel, 1e-5)
        out.append(f"| {row['model']} | {row['ram']} | {comp.grad_rel:.2g} | {plain.grad_rel:.2g} | "
                   f"{'yes' if comp.grad_rel <= bound else '**no**'} | {tb.grad_rel:.2g} ({tb.note}) | "
                   f"{comp.ms:.1f}, {kib(comp.peak)} | {plain.ms:.1f}, {kib(plain.peak)} | "
                   f"{tb.ms:.1f}, {kib(tb.peak)} |")
    return out


def machine_load() -> str:
    try:
        return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "load average unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["resnet18_cifar", "gpt2_tiny", "unet", "relu_transformer"])
    ap.add_argument("--ram", nargs="+", default=["30%", "50%", "70%"])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--effort", type=float, default=5.0, help="poetc's effort per compile (deterministic s)")
    ap.add_argument("--device", default=None, help="a profile (default: this machine, poetc profile --quick)")
    ap.add_argument("--out", "-o", type=Path, default=None)
    ap.add_argument("--quick", action="store_true", help="the U-Net at 50 %%, one timed run, aot_eager for compile")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    torch._dynamo.config.cache_size_limit = 64
    torch._dynamo.config.accumulated_cache_size_limit = 512
    if args.quick:
        args.models, args.ram, args.repeats, args.effort = ["unet"], ["50%"], 1, 0.3
    lines: list[str] = []

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    start_load = machine_load()
    log(f"start: {start_load}")
    import tempfile

    where = args.out.parent if args.out is not None else Path(tempfile.mkdtemp())
    if args.device is None and not args.quick:
        from poet_compiler.devices.profile import write_profile
        from poet_compiler.devices.profiler import profile_host

        device = str(where / "torch_host_profile.json")
        write_profile(profile_host(quick=True, power_w=15.0), device)
        device_label = ("this machine (poetc profile --quick, 15 W) with each model's ops timed on it "
                        "(torch_profile_<model>.json)")
    else:
        device = args.device or "a72"
        device_label = device
    rows: list[dict[str, Any]] = []
    for name in args.models:
        rows += bench_model(name, device=device, budgets=args.ram, repeats=args.repeats, quick=args.quick,
                            effort=args.effort, log=log, out_dir=None if args.quick else where)
    end_load = machine_load()
    log(f"end: {end_load}")
    lines += ["## Targets per cell", ""] + summary(rows) + ["", "## Compiled: gradients against eager autograd", ""]
    lines += inductor(rows) + ["", "## Every variant", ""] + table(rows)
    lines += ["", f"torch {torch.__version__}, 1 thread; profile: {device_label}; medians of {args.repeats} "
              f"interleaved steps after a warm-up; machine {start_load} at the start, {end_load} at the end. "
              "Slack: the largest single-op scratch of the autograd step (memtrack.kernel_slack). "
              f"torch-budget: the grid point of {list(BUDGET_GRID)} with the least measured peak at or above "
              "the compiled checkpointed() one."]
    write_results("\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
