"""The float model before quantization: the ops int8 training supports, with float
parameters, and its execution in PyTorch for calibration (host only).

An importer (:mod:`~poet_compiler.quant.onnx_import`) builds a :class:`FloatGraph`;
:func:`run` executes it with autograd on the example batch and records what calibration
needs: every tensor's range and the largest input gradient each layer sends back.
A QDQ model also brings :class:`Fixed` integers (int8 weights, int32 biases, activation
QParams) that quantization keeps as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from poet_compiler.quant.qmodel import QParams


@dataclass
class FConv:
    name: str
    input: str
    output: str
    weight: np.ndarray                  # float32 OIHW (a linear layer: [out, in, 1, 1])
    bias: np.ndarray
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)
    groups: int = 1
    linear: bool = False
    act: str = "none"                   # none | relu | relu6
    param_names: tuple[str, str] = ("", "")


@dataclass
class FPool:
    name: str
    input: str
    output: str
    kind: str                           # max | avg
    kernel: tuple[int, int] = (1, 1)
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)
    global_pool: bool = False


@dataclass
class FAdd:
    name: str
    inputs: tuple[str, str]
    output: str
    act: str = "none"


@dataclass
class FView:
    name: str
    input: str
    output: str


FNode = FConv | FPool | FAdd | FView


@dataclass
class Fixed:
    """Integers read from a QDQ file: kept bit for bit by quantization."""

    qparams: dict[str, QParams] = field(default_factory=dict)
    weights: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # layer -> (int8, scales)
    biases: dict[str, np.ndarray] = field(default_factory=dict)                       # layer -> int32


@dataclass
class FloatGraph:
    nodes: list[FNode]
    input: str
    output: str
    input_shape: tuple[int, ...]        # per sample
    fixed: Fixed = field(default_factory=Fixed)


@dataclass
class Calibration:
    ranges: dict[str, tuple[float, float]]   # tensor -> (min, max)
    shapes: dict[str, tuple[int, ...]]       # tensor -> per-sample shape
    input_grad_amax: dict[str, float]        # layer -> max |dL_sum/dx| of its input gradient


def _act(y: torch.Tensor, act: str) -> torch.Tensor:
    if act == "relu":
        return F.relu(y)
    if act == "relu6":
        return F.relu6(y)
    return y


def _pad(x: torch.Tensor, padding: tuple[int, int, int, int], value: float) -> torch.Tensor:
    t, left, b, r = padding
    return F.pad(x, (left, r, t, b), value=value) if any(padding) else x


def _pool(node: FPool, x: torch.Tensor) -> torch.Tensor:
    if node.global_pool:
        return x.mean(dim=(2, 3), keepdim=True)
    if node.kind == "max":
        return F.max_pool2d(_pad(x, node.padding, float("-inf")), node.kernel, node.stride)
    if any(node.padding):  # count only valid positions, as the int8 kernel does
        ones = _pad(torch.ones_like(x[:1, :1]), node.padding, 0.0)
        total = F.avg_pool2d(_pad(x, node.padding, 0.0), node.kernel, node.stride, divisor_override=1)
        return total / F.avg_pool2d(ones, node.kernel, node.stride, divisor_override=1)
    return F.avg_pool2d(x, node.kernel, node.stride)


def _conv(node: FConv, x: torch.Tensor) -> torch.Tensor:
    w, b = torch.from_numpy(node.weight), torch.from_numpy(node.bias)
    if node.linear:
        return _act(F.linear(x.flatten(1), w.flatten(1), b), node.act)
    return _act(F.conv2d(_pad(x, node.padding, 0.0), w, b, node.stride, groups=node.groups), node.act)


def run(graph: FloatGraph, x: np.ndarray, labels: np.ndarray) -> Calibration:
    """Forward and backward (summed cross-entropy) on a batch, in float32."""
    t: dict[str, torch.Tensor] = {graph.input: torch.from_numpy(np.ascontiguousarray(x, np.float32))}
    taps: dict[str, torch.Tensor] = {}
    for node in graph.nodes:
        if isinstance(node, FConv):
            tap = t[node.input].detach().clone().requires_grad_(True) if node.input == graph.input \
                else t[node.input] * 1.0
            tap.retain_grad()
            taps[node.name] = tap
            t[node.output] = _conv(node, tap)
        elif isinstance(node, FPool):
            t[node.output] = _pool(node, t[node.input])
        elif isinstance(node, FAdd):
            t[node.output] = _act(t[node.inputs[0]] + t[node.inputs[1]], node.act)
        else:
            t[node.output] = t[node.input].flatten(1)
    F.cross_entropy(t[graph.output], torch.from_numpy(np.asarray(labels, np.int64)), reduction="sum").backward()
    ranges = {k: (float(v.min()), float(v.max())) for k, v in t.items()}
    shapes = {k: tuple(v.shape[1:]) for k, v in t.items()}
    amax = {k: float(v.grad.abs().max()) if v.grad is not None else 0.0 for k, v in taps.items()}
    return Calibration(ranges, shapes, amax)
