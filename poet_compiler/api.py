"""The Python API: ``poet_compiler.compile(...)`` is ``poetc compile`` from a notebook.

One call walks the whole pipeline — frontend -> graph -> costs -> solve -> schedule —
and returns a :class:`Compilation` holding every intermediate value, so a user can
inspect the graph, the costs, the Program and the simulator's figures, then write the
bytecode and the report with :meth:`Compilation.save`.

``model`` may be the user's own ``nn.Module`` (with ``example_inputs``, ``target`` and
``loss_fn``, in PyTorch's conventions); :meth:`Compilation.training_step` then returns a
callable that trains that very module by the schedule, a drop-in for ``loss.backward()``.

Everything that can be checked without the model (names, budgets given in absolute
units, the device profile) is checked before the trace, which takes seconds.
"""

from __future__ import annotations

import dataclasses
import gc
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from poet_compiler.compilation import Compilation
from poet_compiler.devices.costs import CostTable
from poet_compiler.errors import PoetError
from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.progress import live_status, report, stage
from poet_compiler.solve.budgets import (
    reference,
    resolve_deadline,
    resolve_ram,
)
from poet_compiler.solve.options import DEFAULT_MEMORY_LIMIT, effort_note, effort_units, time_limit_and_effort
from poet_compiler.solve.problem import MODES, Problem
from poet_compiler.solve.ram import counted_ram, fixed_ram
from poet_compiler.solve.strategies import SolveOptions, get_strategy, run_strategy
from poet_compiler.solvers.memory import peak_rss
from poet_compiler.units import parse_duration, parse_memory_limit, parse_relative, parse_size

if TYPE_CHECKING:
    from torch import nn

    from poet_compiler.devices.profile import DeviceProfile
    from poet_compiler.frontends.torch.optimizer import OptimizerSpec
    from poet_compiler.frontends.torch.traced import TracedModel

#: The least a solve gets of ``--time-limit`` when tracing took the rest (seconds).
MIN_SOLVE_S = 1.0
#: Seconds per node held back from the solve for what follows it in the command: encoding
#: the bytecode (with its validation pass), writing both files and leaving the process.
#: Measured 0.35 s on gpt2_large (1,567 nodes: encode 0.24 s), which took
#: ``poetc compile --time-limit 20`` to 21.0-21.1 s of wall time without it.
WRITE_S_PER_NODE = 3e-4

def load_costs(graph: TrainingGraph, device: str | DeviceProfile | None) -> CostTable:
    """Costs of ``graph`` on ``device`` (a profile, its name or path; None: explicit costs only)."""
    from poet_compiler.devices.cost_model import costs_for
    from poet_compiler.devices.profile import DeviceProfile, load_profile

    profile = device if isinstance(device, DeviceProfile) or device is None else load_profile(device)
    return costs_for(graph, profile)


def check_options(*, mode: str, strategy: str, solver: str, formulation: str, gap: float | None,
                  time_limit_s: float, threads: int) -> None:
    """Raise PoetError for an unknown name or an out-of-range solver option."""
    if mode not in MODES:
        raise PoetError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    get_strategy(strategy)
    from poet_compiler.solvers import SOLVERS

    if solver not in SOLVERS:
        raise PoetError(f"unknown solver {solver!r}; known: {', '.join(SOLVERS)}")
    if gap is not None and not 0.0 <= gap < 1.0:
        raise PoetError(f"gap {gap!r} is not a relative gap in [0, 1) (e.g. 0.001 for 0.1%)")
    from poet_compiler.solve.formulation import FORMULATIONS

    if formulation not in FORMULATIONS:
        raise PoetError(f"unknown formulation {formulation!r}; known: {', '.join(FORMULATIONS)}")
    if not time_limit_s > 0:
        raise PoetError(f"time limit must be positive, got {time_limit_s!r} s")
    if threads < 1:
        raise PoetError(f"threads must be >= 1, got {threads}")


def precheck_budgets(ram: str | int | None, deadline: str | float | None) -> None:
    """Parse the budgets that do not depend on the model (``256k``, ``120ms``), so bad
    text is refused before the trace; relative ones (``50%``, ``1.5x``) are resolved
    against the model's checkpoint-all figures later."""
    if ram is not None and not (isinstance(ram, str) and parse_relative(ram, "%") is not None):
        parse_size(ram, "RAM budget")
    if deadline is not None and not (isinstance(deadline, str) and parse_relative(deadline, "x") is not None):
        parse_duration(deadline, "deadline")


def _is_module(model: object) -> bool:
    """True for a torch ``nn.Module``, without importing torch for the other kinds."""
    import sys

    torch_nn = sys.modules.get("torch.nn")
    return torch_nn is not None and isinstance(model, torch_nn.Module)


def trace_user_module(model: nn.Module, example_inputs: Any, target: Any, loss_fn: Any, *,
                      name: str | None, granularity: str, optimizer: OptimizerSpec | None = None,
                      train: str | None = None) -> TracedModel:
    """Trace the user's module (the torch frontend's ``trace_module``) after checking the
    arguments a PyTorch user is most likely to forget."""
    import torch

    from poet_compiler.errors import FrontendError
    from poet_compiler.frontends.torch import trace_module

    label = name or type(model).__name__
    if example_inputs is None or target is None or loss_fn is None:
        missing = [
            k for k, v in (("example_inputs", example_inputs), ("target", target), ("loss_fn", loss_fn)) if v is None
        ]
        raise FrontendError(f"{label}: compiling an nn.Module needs {', '.join(missing)} "
                            "(e.g. example_inputs=(x,), target=y, loss_fn=torch.nn.functional.cross_entropy)")
    if not callable(loss_fn):
        raise FrontendError(f"{label}: loss_fn must be callable (output, target) -> scalar loss")
    inputs = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    return trace_module(model, inputs, target, loss_fn, name=label, granularity=granularity, optimizer=optimizer,
                        train=train)


def resolve_graph(
    model: str | TrainingGraph,
    granularity: str = "op",
    batch: int | None = None,
    *,
    onnx_loss: str | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    optimizer: OptimizerSpec | None = None,
    train: str | None = None,
) -> TrainingGraph:
    if isinstance(model, TrainingGraph):
        return model
    from poet_compiler.frontends import load_graph

    return load_graph(str(model), granularity=granularity, batch=batch, input_shapes=input_shapes, onnx_loss=onnx_loss,
                      optimizer=optimizer, train=train)


def _optimizer_spec(optimizer: Any) -> OptimizerSpec | None:
    """The ``optimizer`` argument read into a spec (torch imported only when one is given)."""
    if optimizer is None:
        return None
    from poet_compiler.frontends.torch.optimizer import as_optimizer

    return as_optimizer(optimizer)


def compile(  # noqa: A001 - the product's verb
    model: str | TrainingGraph | nn.Module,
    device: str | None = "m4",
    ram: str | int | None = None,
    deadline: str | float | None = None,
    *,
    mode: str = "poet",
    strategy: str = "optimal",
    solver: str = "auto",
    formulation: str = "fast",
    time_limit_s: float | None = None,
    threads: int = 2,
    gap: float | None = None,
    effort: float | str | None = None,
    activations_only: bool = False,
    granularity: str = "op",
    batch: int | None = None,
    progress: bool = False,
    onnx_loss: str | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    example_inputs: Any = None,
    target: Any = None,
    loss_fn: Any = None,
    name: str | None = None,
    memory_limit: str | int | None = None,
    started: float | None = None,
    optimizer: Any = None,
    train: str | None = None,
) -> Compilation:
    """Compile ``model`` (zoo name, .json, .onnx, a TrainingGraph or an nn.Module) for ``device``.

    An ``nn.Module`` is traced with ``example_inputs`` (a tensor or a tuple of them),
    ``target`` and ``loss_fn(output, target) -> scalar`` (e.g. ``F.cross_entropy``), in
    the mode it is in (call ``model.train()`` first); ``name`` labels it in reports
    (default: its class name). Use :meth:`Compilation.training_step` to train it.

    ``ram``: bytes, ``"256k"`` or ``"50%"`` (default: the device's RAM): what the step gets
    on the device, its arena and everything it keeps beside it (parameters, gradients,
    optimizer state, batch, outputs, the device runtime's reserve: ``Compilation.ram_split``);
    ``"50%"`` is those fixed bytes plus half of checkpoint-all's activation peak.
    ``activations_only``: the budget is the arena's alone (POET's convention, for comparisons
    with the paper and its peers). ``deadline``: seconds, ``"120ms"`` or ``"1.5x"`` the compute-only
    step time (default: none). ``onnx_loss`` (cross_entropy | mse | sum) and
    ``input_shapes`` (input name -> shape) configure the ONNX frontend. ``gap``: stop
    once the schedule is proven within this relative gap of optimal (default: 0.001 on
    graphs above 40 nodes, 0 on smaller ones). ``memory_limit``: poetc's memory (itself
    and its solver processes) at which a solver process is stopped, its latest solution
    kept: ``"4G"``, bytes, or ``"none"`` (default: 3.6 GiB). ``started``: the
    ``time.perf_counter()`` instant the time limit counts from (default: the call; ``poetc
    compile`` passes its process's start). ``optimizer``: a ``torch.optim`` SGD/Adam/AdamW
    instance (read for its class and hyper-parameters) or a spec (``"sgd:lr=0.05,momentum=0.9"``,
    ``"adam:lr=1e-3"``): the update becomes part of the step (docs/training.md). ``train``: comma-separated
    parameter-name globs (``"classifier.*,*.bias"``); the others are frozen. ``effort`` (strategy "optimal"): the work
    the solve may spend, a preset (quick | default | thorough) or deterministic seconds
    (default: 0.3 per second of ``time_limit_s`` where it is given, else the ``default``
    preset); the same input, flags, version and ``threads`` then give the same schedule,
    unless ``time_limit_s`` (the wall cap of the whole call, default 600 s) stopped it
    first (``report()["stopped_by"] == "time"``). Returns a :class:`Compilation`; an
    infeasible budget is a Result with status ``infeasible`` and a message giving the
    smallest budget that works.

    (Over 80 lines because of this docstring, one entry per option of ``poetc compile``;
    the body is the pipeline's steps in order.)
    """
    # Refuse bad names, budgets and profiles before the (possibly slow) trace.
    stated_limit_s = time_limit_s
    time_limit_s, effort = time_limit_and_effort(time_limit_s, effort)
    check_options(mode=mode, strategy=strategy, solver=solver, formulation=formulation, gap=gap,
                  time_limit_s=time_limit_s, threads=threads)
    if effort is not None:
        effort_units(effort, time_limit_s)     # a bad --effort is refused before the trace
    precheck_budgets(ram, deadline)
    memory_limit_bytes = parse_memory_limit(memory_limit, DEFAULT_MEMORY_LIMIT)
    _check_onnx_options(model, onnx_loss, input_shapes)
    profile = _profile_for(model, device)
    opt_spec = _optimizer_spec(optimizer)
    t_start = time.perf_counter()
    origin = t_start if started is None else min(started, t_start)
    with live_status(progress):
        trace = TraceOptions(granularity, batch, onnx_loss, input_shapes, opt_spec, train)
        traced, retrace, graph = _load(model, trace, example_inputs, target, loss_fn, name)
        t_traced = time.perf_counter()
        stage(f"costing {graph.n} nodes")
        costs = load_costs(graph, profile)
        stage("simulating checkpoint-all")
        ref = reference(graph, costs)
        counted = counted_ram(graph, costs, activations_only)
        problem = Problem(
            graph=graph,
            costs=costs,
            ram_budget_bytes=resolve_ram(ram, ref, costs, counted.total),
            deadline_s=resolve_deadline(deadline, ref, costs),
            mode=mode,  # type: ignore[arg-type]
            fixed=counted,
        )
        t_costed = time.perf_counter()
        # --time-limit bounds the whole compile: the command's start (importing torch),
        # tracing and costing count (2-4 s on ResNet-18-CIFAR at op level, which took the
        # command to 63 s at 60 s), so the solve gets what is left, and never less than
        # MIN_SOLVE_S for its heuristics. Writing the schedule afterwards counts as well.
        solve_limit = max(time_limit_s - (t_costed - origin) - WRITE_S_PER_NODE * graph.n,
                          min(time_limit_s, MIN_SOLVE_S))
        opts = SolveOptions(solver=solver, formulation=formulation, time_limit_s=solve_limit,
                            stated_limit_s=time_limit_s, effort=effort,
                            threads=threads, progress=progress, gap_limit=gap,
                            memory_limit_bytes=memory_limit_bytes)
        stage("solving" if strategy == "optimal" else f"solving ({strategy})")
        result = run_strategy(strategy, problem, opts)
        # Time outside the solve, reported beside its stage_s (tracing counts too).
        compile_s = time.perf_counter() - origin
        notes = result.notes.set(startup_s=round(t_start - origin, 3) if started is not None else None,
                                 trace_s=round(t_traced - t_start, 3), costing_s=round(t_costed - t_traced, 3),
                                 compile_s=round(compile_s, 3), peak_rss_mb=peak_rss(),
                                 time_limit_s=time_limit_s, time_limit_given=stated_limit_s is not None)
        note = effort_note(notes.stopped_by, notes.effort, compile_s, time_limit_s, stated_limit_s is not None)
        result = dataclasses.replace(result, notes=notes if note is None else notes.set(effort_note=note))
        stage(result.status)
        report("schedule", result.energy_j if result.ok else None, result.lower_bound_j, "J")
    label = str(model) if isinstance(model, str) else graph.name
    return Compilation(model=label, device=costs.device, graph=graph, costs=costs,
                       problem=problem, reference=ref, result=result,
                       granularity=granularity, batch=batch, onnx_loss=onnx_loss,
                       input_shapes={k: list(v) for k, v in input_shapes.items()} if input_shapes else None,
                       optimizer=opt_spec.describe() if opt_spec is not None else None, train=train,
                       ram=fixed_ram(graph, costs), activations_only=activations_only,
                       _traced=traced, _retrace=retrace)


Retrace = Callable[[], "TracedModel"]


@dataclass(frozen=True)
class TraceOptions:
    """How a model is traced into its graph: ``granularity`` (op | module | layer), a zoo
    model's ``batch``, the ONNX frontend's ``onnx_loss`` and ``input_shapes``, the
    ``optimizer`` whose update joins the step (parsed) and the ``train`` globs of the
    trained parameters (docs/training.md)."""

    granularity: str = "op"
    batch: int | None = None
    onnx_loss: str | None = None
    input_shapes: Mapping[str, Sequence[int]] | None = None
    optimizer: OptimizerSpec | None = None
    train: str | None = None


def _load(model: Any, trace: TraceOptions, example_inputs: Any, target: Any, loss_fn: Any,
          name: str | None) -> tuple[TracedModel | None, Retrace | None, TrainingGraph]:
    """The graph of ``model``, with the TracedModel behind an nn.Module, or for a zoo
    model the means to trace it again (see :class:`Compilation`)."""
    granularity, batch, optimizer, train = trace.granularity, trace.batch, trace.optimizer, trace.train
    onnx_loss, input_shapes = trace.onnx_loss, trace.input_shapes
    if _is_module(model):
        if batch is not None:
            raise PoetError(
                "batch applies to zoo models; an nn.Module's batch is the first dimension of example_inputs"
            )
        stage(f"tracing {name or type(model).__name__}")
        traced = trace_user_module(model, example_inputs, target, loss_fn, name=name, granularity=granularity,
                                   optimizer=optimizer, train=train)
        return traced, None, traced.graph
    if example_inputs is not None or target is not None or loss_fn is not None:
        raise PoetError("example_inputs, target and loss_fn apply to an nn.Module; "
                        f"{type(model).__name__} {str(model)[:60]!r} brings its own")
    if isinstance(model, str) and not (onnx_loss or input_shapes) and _is_zoo(model):
        from poet_compiler.frontends import trace_zoo

        stage(f"tracing {model}")
        graph = trace_zoo(model, granularity=granularity, batch=batch, optimizer=optimizer, train=train).graph
        gc.collect()  # the fx graph holds cycles: free the module's weights before the solve
        return None, lambda: _retrace_zoo(model, granularity, batch, graph, optimizer, train), graph
    stage(f"loading {model if isinstance(model, str) else 'graph'}")
    if isinstance(model, TrainingGraph) and (optimizer is not None or train is not None):
        raise PoetError("optimizer and train apply to traced models (zoo, .onnx, nn.Module), not a TrainingGraph")
    return None, None, resolve_graph(model, granularity, batch, onnx_loss=onnx_loss, input_shapes=input_shapes,
                                     optimizer=optimizer, train=train)


def _retrace_zoo(name: str, granularity: str, batch: int | None, graph: TrainingGraph,
                 optimizer: OptimizerSpec | None = None, train: str | None = None) -> TracedModel:
    """Zoo model ``name`` traced again; refused if its graph is not the compiled one."""
    from poet_compiler.frontends import trace_zoo
    from poet_compiler.graph.io import graph_to_dict

    traced = trace_zoo(name, granularity=granularity, batch=batch, optimizer=optimizer, train=train)
    if graph_to_dict(traced.graph) != graph_to_dict(graph):
        raise PoetError(f"{name}: traced again, the zoo model gives another graph than the one compiled")
    return traced


def _check_onnx_options(model: object, onnx_loss: str | None,
                        input_shapes: Mapping[str, Sequence[int]] | None) -> None:
    """``onnx_loss``/``input_shapes`` configure the ONNX frontend only: refuse them
    elsewhere now, before the device check and the trace (the frontend's own rule)."""
    from poet_compiler.frontends import _check_onnx_options as check

    check(model if isinstance(model, str) else type(model).__name__, input_shapes, onnx_loss)


def _is_zoo(name: str) -> bool:
    from poet_compiler.frontends import zoo_names

    return name in zoo_names()


def _profile_for(model: object, device: str | None) -> DeviceProfile | None:
    """Load the device profile up front (a typo or broken file is reported at once).

    Without a device only a poet-graph/1 file (or TrainingGraph) can carry explicit
    costs; a traced model never does, so say so now rather than after the trace.
    """
    from poet_compiler.devices.profile import load_profile
    from poet_compiler.frontends import check_model_file

    if isinstance(model, str):
        check_model_file(model)   # before "no device": a missing file is what is wrong
    if device is not None:
        return load_profile(device)
    explicit = isinstance(model, TrainingGraph) or (isinstance(model, str) and Path(model).suffix.lower() == ".json")
    if not explicit:
        raise PoetError(f"no device given for {str(model)[:60] if isinstance(model, str) else type(model).__name__}: "
                        "a traced model has no costs of its own; name a device profile (--device m4, or device='m4')")
    return None
