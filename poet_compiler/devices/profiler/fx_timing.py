"""The per-op table: every FX node of a traced training step timed as the step runs it, on
its real arguments; a scheduling node's time the sum of its FX nodes', the median kept per
op signature."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

from poet_compiler.errors import ProfileError
from poet_compiler.graph.ir import TrainingGraph


def time_fx_nodes(gm: Any, args: Sequence[Any], passes: int = 5) -> dict[str, float]:
    """Seconds per FX node (call_function/call_method/call_module): the median over
    ``passes`` runs of the whole graph, after one warm-up run.

    Each op is timed once per run, where the step runs it: its inputs computed earlier in
    the run, the caches as the ops before it left them, and only its call (not the
    interpreter's fetch of its arguments): the conditions the step pays it under. Summed
    over a step, these times and those of each op re-run right after itself agree with
    the measured autograd step to within this 2-vCPU VM's run-to-run noise
    (bench/results/op_timing.md: 0.97-1.09x and 0.97-1.04x on the models of
    ``make bench-torch``, interleaved).
    """
    import torch.fx

    samples: dict[str, list[float]] = {}

    class _Timer(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            if n.op not in ("call_function", "call_method", "call_module"):
                return super().run_node(n)
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            t0 = time.perf_counter()
            result = getattr(self, n.op)(n.target, args, kwargs)
            samples.setdefault(n.name, []).append(time.perf_counter() - t0)
            return result

    for _ in range(passes + 1):
        _Timer(gm).run(*args)
    return {name: statistics.median(times[1:]) for name, times in samples.items()}


def op_table_from_times(
    graph: TrainingGraph, node_fx: Sequence[Sequence[str]], fx_times: dict[str, float], overhead_s: float
) -> dict[str, float]:
    """Median seconds per op signature: a node's time is the sum of its FX nodes' times."""
    per_sig: dict[str, list[float]] = {}
    for node, names in zip(graph.nodes, node_fx):
        sig = node.extra.get("signature")
        if not isinstance(sig, str):
            continue
        t = sum(fx_times.get(name, 0.0) for name in names)
        per_sig.setdefault(sig, []).append(max(t, overhead_s))
    return {sig: statistics.median(v) for sig, v in sorted(per_sig.items())}


def trace_for_profiling(model: str) -> Any:
    """The TracedModel of ``model`` (a zoo name or .onnx file), traced before any
    measurement so that a wrong name costs no benchmark time."""
    from poet_compiler.frontends import load_model

    traced = load_model(model)
    if traced is None:
        raise ProfileError(f"--model {model!r}: not a traceable model (a graph file has no kernels to time)")
    return traced


def traced_op_times(traced: Any, overhead_s: float) -> dict[str, float]:
    """Time every op signature of a traced training step: its joint FX graph is run on
    the model's real parameters, buffers and example batch (``TracedModel.flat_args``),
    and each scheduling node's time is the sum of its FX nodes' (``node_fx``)."""
    import torch

    with torch.no_grad():
        fx_times = time_fx_nodes(traced.gm, traced.flat_args())
    return op_table_from_times(traced.graph, traced.node_fx, fx_times, overhead_s)
