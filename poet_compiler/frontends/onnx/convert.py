"""ONNX graph -> executable torch module.

Conversion walks the (topologically ordered) ONNX nodes once, running each converted
node on the example batch. That dry run gives every value its exact static shape, and
lets nodes whose inputs are all constants (Constant, Shape of a static tensor, the
integer arithmetic exporters emit around Reshape/Expand/Range...) fold into constants.
What is left are *steps*: runners over run-time tensors, executed in order by
:class:`OnnxModule.forward` — pure torch ops, traceable by make_fx.

Initializers: float tensors of rank >= 1 read at run time become trainable
``nn.Parameter`` s, except where every reader declares them non-trainable (BatchNorm
running statistics); everything else (integer tensors, rank-0 float scalars that the
exporters emit for Clip bounds or attention scales, folded constants) becomes a buffer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import onnx
import torch
from torch import nn

from poet_compiler.errors import FrontendError

from .context import CONVERTERS, SHAPE_ONLY, NodeContext, Runner, op_key
from .dtypes import FLOAT_TYPES, tensor_from_proto


@dataclass(frozen=True)
class Step:
    """One run-time ONNX node."""

    name: str
    op_type: str
    runner: Runner
    #: ONNX value names, one per node input ("" where the runner gets None).
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


class OnnxModule(nn.Module):
    """The converted model: forward(*inputs) -> the model's primary float output."""

    def __init__(
        self,
        steps: Sequence[Step],
        input_names: Sequence[str],
        output_name: str,
        params: dict[str, torch.Tensor],
        buffers: dict[str, tuple[torch.Tensor, bool]],
    ) -> None:
        super().__init__()
        self._steps = tuple(steps)
        self.input_names = tuple(input_names)
        self.output_name = output_name
        #: ONNX value name -> module attribute holding it (parameters and buffers).
        self.attr_of: dict[str, str] = {}
        used: set[str] = set()
        for onnx_name, t in params.items():
            attr = _attr_name(onnx_name, used)
            self.register_parameter(attr, nn.Parameter(t.clone(), requires_grad=True))
            self.attr_of[onnx_name] = attr
        for onnx_name, (t, persistent) in buffers.items():
            attr = _attr_name(onnx_name, used)
            self.register_buffer(attr, t.clone(), persistent=persistent)
            self.attr_of[onnx_name] = attr

    @property
    def steps(self) -> tuple[Step, ...]:
        return self._steps

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        if len(inputs) != len(self.input_names):
            raise TypeError(
                f"expected {len(self.input_names)} inputs ({', '.join(self.input_names)}), got {len(inputs)}"
            )
        env: dict[str, torch.Tensor] = dict(zip(self.input_names, inputs))
        for onnx_name, attr in self.attr_of.items():
            env[onnx_name] = getattr(self, attr)
        for step in self._steps:
            outs = step.runner([env[n] if n else None for n in step.inputs])
            for name, value in zip(step.outputs, outs):
                if name and value is not None:
                    env[name] = value
        return env[self.output_name]


def _attr_name(onnx_name: str, used: set[str]) -> str:
    """A valid, unique attribute name for an ONNX value name (which may hold dots)."""
    base = re.sub(r"\W", "_", onnx_name) or "t"
    if base[0].isdigit():
        base = "t_" + base
    name, k = base, 1
    while name in used:
        k += 1
        name = f"{base}_{k}"
    used.add(name)
    return name


@dataclass
class Converted:
    module: OnnxModule
    #: Dry-run value of the primary output on the example inputs.
    output: torch.Tensor


def convert_graph(
    graph: onnx.GraphProto,
    opset: int,
    example_inputs: dict[str, torch.Tensor],
    output_name: str,
    where: str,
) -> Converted:
    """Convert ``graph`` given concrete example inputs (name -> tensor)."""
    init_names = {i.name for i in graph.initializer}
    consts: dict[str, torch.Tensor] = {}
    candidates: dict[str, torch.Tensor] = {}  # trainable-parameter candidates
    for init in graph.initializer:
        t = tensor_from_proto(init, f"{where}: initializer '{init.name}'")
        if init.data_type in FLOAT_TYPES and len(init.dims) >= 1:
            candidates[init.name] = t
        else:
            consts[init.name] = t
    run = _Run(opset, output_name, where, consts, candidates, example_inputs, graph)
    with torch.no_grad():
        for node in graph.node:
            run.node(node)
    values = run.values
    if output_name not in values:
        raise FrontendError(f"{where}: output '{output_name}' is never computed")
    steps = _live_steps(run.steps, output_name)
    runtime_uses: dict[str, int] = {}  # value name -> readers at run time
    for s in steps:
        for n in s.inputs:
            if n:
                runtime_uses[n] = runtime_uses.get(n, 0) + 1
    if output_name in consts and output_name not in candidates:
        raise FrontendError(f"{where}: output '{output_name}' is a constant; it depends on no input or parameter")
    params = {n: t for n, t in candidates.items() if n in run.trainable_uses and n in runtime_uses}
    buffers: dict[str, tuple[torch.Tensor, bool]] = {}
    for n in sorted(runtime_uses, key=_order(graph, init_names)):
        if n in params or n in example_inputs:
            continue
        value = candidates.get(n, consts.get(n))
        if value is None:
            continue  # produced by a run-time step
        buffers[n] = (value, n in init_names)
    if output_name in candidates and output_name not in params:
        params[output_name] = candidates[output_name]
    module = OnnxModule(steps, list(example_inputs), output_name, params, buffers)
    return Converted(module=module, output=values[output_name])


class _Run:
    """The graph run on the example inputs, node by node: every value, the constants
    folded (``consts`` grows), the run-time steps, and the parameter candidates some
    step reads in a slot that is not frozen (``trainable_uses``)."""

    def __init__(self, opset: int, output_name: str, where: str, consts: dict[str, torch.Tensor],
                 candidates: dict[str, torch.Tensor], example_inputs: dict[str, torch.Tensor],
                 graph: onnx.GraphProto) -> None:
        self.opset, self.output_name, self.where = opset, output_name, where
        self.consts, self.candidates = consts, candidates
        self.values: dict[str, torch.Tensor] = {**consts, **candidates, **example_inputs}
        self.consumers: dict[str, int] = {}
        for node in graph.node:
            for n in node.input:
                self.consumers[n] = self.consumers.get(n, 0) + 1
        self.steps: list[Step] = []
        self.trainable_uses: set[str] = set()

    def node(self, node: onnx.NodeProto) -> None:
        values, consts, where = self.values, self.consts, self.where
        ins = list(node.input)
        ctx = NodeContext(
            node=node,
            opset=self.opset,
            shapes=[tuple(values[n].shape) if n else None for n in ins],
            dtypes=[values[n].dtype if n else None for n in ins],
            consts=[consts.get(n) if n else None for n in ins],
            used=[bool(o) and (self.consumers.get(o, 0) > 0 or o == self.output_name) for o in node.output],
        )
        for n in ins:
            if n and n not in values:
                raise FrontendError(f"{where}: {ctx.where} reads '{n}', which nothing produces")
        runner = CONVERTERS[op_key(node)](ctx)
        run_ins = tuple("" if (not n or i in ctx.static_inputs) else n for i, n in enumerate(ins))
        try:
            outs = list(runner([values[n] if n else None for n in run_ins]))
        except (RuntimeError, ValueError, IndexError, TypeError) as exc:
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise FrontendError(f"{where}: {ctx.where} failed on the example inputs: {msg}") from None
        foldable = node.op_type in SHAPE_ONLY or all(not n or n in consts for n in run_ins)
        for o, v in zip(node.output, outs):
            if o and v is not None:
                values[o] = v
                if foldable:
                    consts[o] = v
        for o, u in zip(node.output, ctx.used):
            if o and u and o not in values:
                raise FrontendError(f"{where}: {ctx.where} does not produce output '{o}'")
        if not foldable:
            self.steps.append(Step(node.name or node.output[0], node.op_type, runner, run_ins, tuple(node.output)))
            for i, n in enumerate(run_ins):
                if n in self.candidates and i not in ctx.frozen_inputs:
                    self.trainable_uses.add(n)


def _live_steps(steps: list[Step], output_name: str) -> list[Step]:
    """Drop steps whose outputs do not reach the primary output (dead exporter outputs,
    BatchNorm running-statistics branches...)."""
    needed = {output_name}
    live: list[Step] = []
    for s in reversed(steps):
        if any(o in needed for o in s.outputs):
            live.append(s)
            needed.update(n for n in s.inputs if n)
    live.reverse()
    return live


def _order(graph: onnx.GraphProto, init_names: set[str]):  # noqa: ANN202
    """Deterministic buffer order: initializers in file order, then folded constants in
    the order the nodes produce them."""
    pos: dict[str, int] = {}
    for i, init in enumerate(graph.initializer):
        pos.setdefault(init.name, i)
    base = len(pos)
    for j, node in enumerate(graph.node):
        for o in node.output:
            pos.setdefault(o, base + j)
    return lambda n: (pos.get(n, 1 << 30), n)
