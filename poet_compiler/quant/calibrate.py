"""Scales and integers of a :class:`~poet_compiler.quant.qmodel.QModel` (docs/int8.md,
"Where the scales come from"). Host only: floats end here.

- Activations: per tensor, asymmetric, from the example batch's range (0 always inside);
  a ReLU output's range starts at 0, a ReLU6 output's is [0, 6]; max pooling and views
  keep their input's QParams. A QDQ file's QParams are kept as they are.
- Weights: per output channel, symmetric, s_W[c] = max |W[c]| / 127; biases
  round(b / (s_x s_W[c])). A QDQ file's int8 weights and int32 biases are kept.
- Backward: R_c = max(1, round(256 s_W[c] / max s_W)); the initial delayed gradient
  exponents from the float gradients of the summed loss on the example batch.
- Softmax: the integers of exp(-s_z0 * d) (:func:`~poet_compiler.quant.loss.log2e_multiplier`).

``headroom_bits`` widens every calibrated activation range by 2**bits (measured in
BENCHMARKS.md "int8 on the host"; the delayed exponents make it unnecessary).
"""

from __future__ import annotations

import math

import numpy as np

from poet_compiler.quant import loss, pool
from poet_compiler.quant.fixedpoint import INT32_MAX, quantize_multiplier
from poet_compiler.quant.float_graph import Calibration, FAdd, FConv, FloatGraph, FPool, FView, run
from poet_compiler.quant.onnx_import import QuantError
from poet_compiler.quant.qmodel import LEFT_SHIFT_ADD, Add, AvgPool, Conv, MaxPool, Node, QModel, QParams, View
from poet_compiler.quant.step import GRAD_TARGET_BITS


def range_qparams(lo: float, hi: float) -> QParams:
    """Asymmetric int8 over [min(lo, 0), max(hi, 0)] (TFLite's choice of zero point)."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    if hi - lo <= 0.0:
        hi = lo + 1e-8
    scale = (hi - lo) / 255.0
    zp = int(np.clip(math.floor(-128.0 - lo / scale + 0.5), -128, 127))
    return QParams(scale, zp)


def _multiplier(real: float, what: str) -> tuple[int, int]:
    m, s = quantize_multiplier(real)
    if s > 30:
        raise QuantError(f"{what}: the scale ratio {real:.3g} is too large for an int8 requantization")
    return m, s


def _act_limits(act: str, qp: QParams) -> tuple[int, int]:
    if act == "none":
        return -128, 127
    hi = 127 if act == "relu" else min(127, qp.zero_point + math.floor(6.0 / qp.scale + 0.5))
    return qp.zero_point, hi


class _Builder:
    def __init__(self, graph: FloatGraph, cal: Calibration, headroom_bits: int) -> None:
        self.graph, self.cal, self.headroom = graph, cal, 2.0 ** headroom_bits
        self.qp: dict[str, QParams] = {}

    def activation(self, tensor: str, act: str = "none") -> QParams:
        if tensor in self.graph.fixed.qparams:
            return self.graph.fixed.qparams[tensor]
        lo, hi = self.cal.ranges[tensor]
        if act == "relu6":
            return range_qparams(0.0, 6.0)
        lo, hi = (0.0 if act == "relu" else lo * self.headroom), hi * self.headroom
        return range_qparams(lo, hi)

    def conv(self, f: FConv) -> Conv:
        s_x = self.qp[f.input]
        qy = self.qp[f.output] = self.activation(f.output, f.act)
        if f.name in self.graph.fixed.weights:
            q_w, s_w = self.graph.fixed.weights[f.name]
        else:
            peak = np.abs(f.weight).reshape(f.weight.shape[0], -1).max(axis=1).astype(np.float64)
            s_w = np.maximum(peak, 1e-12) / 127
            q_w = np.clip(np.floor(np.abs(f.weight) / s_w.reshape(-1, 1, 1, 1) + 0.5) * np.sign(f.weight), -127, 127)
        if f.name in self.graph.fixed.biases:
            q_b = self.graph.fixed.biases[f.name]
        else:
            raw = f.bias.astype(np.float64) / (s_x.scale * s_w)
            q_b = np.clip(np.sign(raw) * np.floor(np.abs(raw) + 0.5), -INT32_MAX, INT32_MAX)
        pairs = [_multiplier(s_x.scale * s / qy.scale, f"layer {f.name}") for s in s_w]
        gm, gs = quantize_multiplier(float(s_w.max()) / 256.0)
        lo, hi = _act_limits(f.act, qy)
        return Conv(f.name, f.input, f.output, q_w.astype(np.int8), q_b.astype(np.int32), s_w, f.stride, f.padding,
                    f.groups, f.linear, f.act, lo, hi, np.array([m for m, _ in pairs], np.int32),
                    np.array([s for _, s in pairs], np.int32),
                    np.maximum(1, np.floor(256.0 * s_w / s_w.max() + 0.5)).astype(np.int16), gm, gs)

    def pool(self, f: FPool) -> MaxPool | AvgPool:
        shape = self.cal.shapes[f.input]
        kernel, stride = ((shape[1], shape[2]), (1, 1)) if f.global_pool else (f.kernel, f.stride)
        if f.kind == "max":
            self.qp[f.output] = self.graph.fixed.qparams.get(f.output, self.qp[f.input])
            return MaxPool(f.name, f.input, f.output, kernel, stride, f.padding)
        qy = self.qp[f.output] = self.activation(f.output)
        m, s = _multiplier(self.qp[f.input].scale / qy.scale, f"layer {f.name}")
        return AvgPool(f.name, f.input, f.output, kernel, stride, f.padding, m, s)

    def add(self, f: FAdd) -> Add:
        qa, qb = self.qp[f.inputs[0]], self.qp[f.inputs[1]]
        qy = self.qp[f.output] = self.activation(f.output, f.act)
        twice = 2.0 * max(qa.scale, qb.scale)
        ma, sa = _multiplier(qa.scale / twice, f"layer {f.name}")
        mb, sb = _multiplier(qb.scale / twice, f"layer {f.name}")
        mo, so = _multiplier(twice / ((1 << LEFT_SHIFT_ADD) * qy.scale), f"layer {f.name}")
        lo, hi = _act_limits(f.act, qy)
        return Add(f.name, f.inputs, f.output, (ma, mb), (sa, sb), mo, so, f.act, lo, hi)


def _initial_exponent(amax: float) -> int:
    """E with amax * 2**E in [2**(T-1), 2**T): what the delayed rule converges to."""
    if amax <= 0.0:
        return GRAD_TARGET_BITS
    return GRAD_TARGET_BITS - 1 - math.floor(math.log2(amax))


def quantize(graph: FloatGraph, x: np.ndarray, labels: np.ndarray, *, headroom_bits: int = 0) -> QModel:
    """The int8 model of ``graph``, calibrated on the example batch (x float, labels int)."""
    cal = run(graph, x, labels)
    b = _Builder(graph, cal, headroom_bits)
    b.qp[graph.input] = graph.fixed.qparams.get(graph.input) or range_qparams(*cal.ranges[graph.input])
    nodes: list[Node] = []
    for f in graph.nodes:
        if isinstance(f, FConv):
            nodes.append(b.conv(f))
        elif isinstance(f, FPool):
            nodes.append(b.pool(f))
        elif isinstance(f, FAdd):
            nodes.append(b.add(f))
        elif isinstance(f, FView):
            b.qp[f.output] = b.qp[f.input]
            nodes.append(View(f.name, f.input, f.output, cal.shapes[f.output]))
    shapes = dict(cal.shapes)
    exps = {n.name: _initial_exponent(cal.input_grad_amax[n.name]) for n in nodes
            if isinstance(n, Conv) and n.input != graph.input}
    m_e, sh_e = loss.log2e_multiplier(b.qp[graph.output].scale)
    model = QModel(nodes, graph.input, graph.output, b.qp, shapes, exps, {}, m_e, sh_e)
    for n in nodes:
        if isinstance(n, AvgPool) and pool.avgpool_grad_shift(n, (1, *shapes[n.input])) > 30:
            raise QuantError(f"layer {n.name}: the pooling window is too large")
    return model


def set_trainable(model: QModel, train: list[str] | None, param_names: dict[str, tuple[str, str]]) -> None:
    """Freeze every parameter whose name matches none of the glob patterns ``train``."""
    from fnmatch import fnmatchcase

    if train is None:
        return
    for node in model.convs():
        w, b = param_names.get(node.name, ("", ""))
        node.train_weight = any(fnmatchcase(w, p) for p in train)
        node.train_bias = any(fnmatchcase(b, p) for p in train)
