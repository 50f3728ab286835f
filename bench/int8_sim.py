"""A float simulation of the int8 training step (docs/int8.md) in which each quantization
can be switched on alone: the measuring instrument of bench/int8_ablation.py.

The step is the reference's (poet_compiler/quant/step.py): forward, summed softmax
cross-entropy, backward, SGD on the mean loss; every tensor is a float64 PyTorch tensor of
real values, and a switch replaces one part by its int8 counterpart, computed as the spec
computes it (rounded to the same grid, saturated at the same limits, exponents moved by the
same rules between steps):

- ``act``: activations on their int8 grid s0 * 2**k (asymmetric, clamped by the fused
  activation), k by the spec's delayed rule (``delayed``) or fitted to this step's own
  values (``dynamic``, the ideal a delayed rule approximates);
- ``logits``: the logits on a static int8 grid (calibrated, widened to span ln 2**15 nats
  as a static softmax table needs), or with a
  delayed exponent like any activation (``delayed``); ``block``: the gradient that would
  push a saturated logit further out is dropped;
- ``loss``: the logits' gradient of the integer softmax (Q15 probabilities, int8 at the
  exponent its largest magnitude needs), from ``quant.loss`` itself;
- ``grad``: every convolution's input gradient in int8 at a power-of-two exponent, delayed
  (the spec) or dynamic, with the per-channel rescale R_c of the spec's transposed conv
  when the weights are int8 too;
- ``weight``: ``float``; ``master`` (a float master copy, quantized per channel to int8 for
  the step, as quantization-aware training on a GPU does); ``int8`` (stored int8 with
  per-channel exponents and the spec's grow/shrink rule; the update rounded by ``rounding``);
- ``momentum_q``: the int16 Q8 momentum buffer with the spec's decay (rounded toward zero).

The simulation is not an oracle of the reference (it shares its loss function and its
exponent rule): it attributes the accuracy the int8 step loses to the part that loses it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from poet_compiler.quant import calibrate, exponents
from poet_compiler.quant import loss as qloss
from poet_compiler.quant.exponents import Seen
from poet_compiler.quant.float_graph import FConv, FloatGraph
from poet_compiler.quant.qmodel import AvgPool, Conv, MaxPool, QModel, View

STATIC_LOGIT_SPAN = math.log(2.0 ** 15)  # the span a static logit scale needs for its softmax table


@dataclass(frozen=True)
class Switches:
    act: str = "float"            # float | delayed | dynamic
    logits: str = "float"         # float | static (the previous spec) | delayed (an exponent, as activations: the spec)
    block: bool = False           # a saturated logit receives no gradient pushing it further out
    loss: bool = False
    grad: str = "float"           # float | delayed | dynamic
    weight: str = "float"         # float | master | int8
    rounding: str = "stochastic"  # int8 weights: stochastic | nearest | truncate | residual | residual8 | residual16
    momentum_q: bool = False
    exact_rescale: bool = False   # int8 weights and gradients: the input gradient with exact channel scales, not R_c


def round_half_up(x: torch.Tensor) -> torch.Tensor:
    return torch.floor(x + 0.5)


def round_half_away(x: np.ndarray) -> np.ndarray:
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


@dataclass
class Stats:
    """Per-step diagnostics."""

    loss: float = 0.0
    act_saturated: int = 0        # activation values clamped at the top of their grid
    act_values: int = 0
    logit_saturated: int = 0
    grad_saturated: int = 0       # int8 input-gradient values clamped at +-127
    grad_zero: int = 0            # nonzero float gradient values rounded to 0
    grad_values: int = 0
    act_moves: int = 0            # activation exponents moved after the step
    grad_moves: int = 0
    weight_grows: int = 0         # channel exponents +1 / -1
    weight_shrinks: int = 0
    updated: int = 0              # weights given an update
    changed: int = 0              # of those, those whose stored value changed


class FakeQuant(torch.autograd.Function):
    """y = s * (clamp(round(x / s) + z, lo, hi) - z); gradient masked by the fused activation
    (code > lo for ReLU, lo < code < hi for ReLU6), saturation passed straight through."""

    @staticmethod
    def forward(ctx, x, s, z, lo, hi, act):  # type: ignore[override]
        raw = round_half_up(x / s) + z
        code = torch.clamp(raw, lo, hi)
        if act == "relu":
            mask = code > lo
        elif act == "relu6":
            mask = (code > lo) & (code < hi)
        else:
            mask = torch.ones_like(code, dtype=torch.bool)
        ctx.save_for_backward(mask, raw - code)
        ctx.block = act == "blocked"
        return s * (code - z)

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        mask, over = ctx.saved_tensors
        if ctx.block:  # a saturated value only receives the gradient that brings it back
            mask = mask & ~((over > 0) & (g < 0)) & ~((over < 0) & (g > 0))
        return g * mask, None, None, None, None, None


@dataclass
class GradExponent:
    e: int
    mode: str
    amax: int = 0
    stats: Stats | None = None


class GradQuant(torch.autograd.Function):
    """Identity forward; backward rounds the gradient to int8 at 2**-E (half up, saturated)."""

    @staticmethod
    def forward(ctx, x, holder):  # type: ignore[override]
        ctx.holder = holder
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        h: GradExponent = ctx.holder
        if h.mode == "dynamic":
            peak = float(g.abs().max())
            h.e = 6 - math.floor(math.log2(peak)) if peak > 0 else h.e
        v = round_half_up(g * 2.0 ** h.e)
        h.amax = max(h.amax, int(v.abs().max()))
        if h.stats is not None:
            h.stats.grad_saturated += int((v.abs() > 127).sum())
            h.stats.grad_zero += int(((v == 0) & (g != 0)).sum())
            h.stats.grad_values += v.numel()
        return torch.clamp(v, -127, 127) * 2.0 ** -h.e, None


class SoftmaxCE(torch.autograd.Function):
    """Summed cross-entropy; backward: the float softmax gradient, or the integer one."""

    @staticmethod
    def forward(ctx, z, labels, integer, s_z, z_z, exp_integers):  # type: ignore[override]
        ctx.save_for_backward(z, labels)
        ctx.integer, ctx.s_z, ctx.z_z, ctx.exp_integers = integer, s_z, z_z, exp_integers
        return F.cross_entropy(z, labels, reduction="sum")

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        z, labels = ctx.saved_tensors
        if ctx.integer:
            codes = np.clip(np.floor(z.detach().numpy() / ctx.s_z + 0.5) + ctx.z_z, -128, 127).astype(np.int64)
            q, e = qloss.loss_grad(codes, labels.numpy(), *ctx.exp_integers)
            grad = torch.from_numpy(q.astype(np.float64) * 2.0 ** -e)
        else:
            grad = torch.softmax(z, 1) - F.one_hot(labels, z.shape[1]).to(z.dtype)
        return g * grad, None, None, None, None, None


@dataclass
class Layer:
    """One conv/linear layer's parameters and optimizer state."""

    node: Conv
    w: np.ndarray                 # real weights (float, master)
    b: np.ndarray                 # real bias
    q: np.ndarray                 # int8 mode: codes (float64 holding integers)
    kw: np.ndarray                # int8 mode: per-channel exponents
    s0: np.ndarray                # per-channel base scales
    res: np.ndarray               # residual of the update rounding, in LSBs
    buf_w: np.ndarray
    buf_b: np.ndarray
    grad_r0: np.ndarray           # R0_c of the spec's input gradient
    leaf_w: torch.Tensor | None = None
    leaf_b: torch.Tensor | None = None

    def scale(self) -> np.ndarray:
        return self.s0 * 2.0 ** self.kw


def _layers(model: QModel, graph: FloatGraph, sw: Switches) -> dict[str, Layer]:
    floats = {n.name: n for n in graph.nodes if isinstance(n, FConv)}
    out = {}
    for node in model.convs():
        f = floats[node.name]
        w = f.weight.astype(np.float64)
        out[node.name] = Layer(node, w.copy(), f.bias.astype(np.float64).copy(),
                               node.weight.astype(np.float64).copy(), np.zeros(node.out_channels, np.int64),
                               node.weight_scale.astype(np.float64).copy(), np.zeros_like(w), np.zeros_like(w),
                               np.zeros(node.out_channels), node.grad_rescale.astype(np.float64).copy())
    return out


@dataclass
class Sim:
    model: QModel
    graph: FloatGraph
    sw: Switches
    lr: float
    batch: int
    momentum: float = 0.0
    seed: int = 0
    layers: dict[str, Layer] = field(default_factory=dict)
    act_k: dict[str, int] = field(default_factory=dict)
    grad_e: dict[str, GradExponent] = field(default_factory=dict)
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))

    def __post_init__(self) -> None:
        self.layers = _layers(self.model, self.graph, self.sw)
        self.grad_e = {name: GradExponent(e, self.sw.grad) for name, e in self.model.grad_exponent.items()}
        self.rng = np.random.default_rng(self.seed)
        self.logit_qparams = self.model.qparams[self.model.output]
        if self.sw.logits == "static":  # the static scale was calibrated widened to ln(2**15) nats
            qp = self.logit_qparams
            lo, hi = qp.dequantize(np.array([-128, 127]))
            if hi - lo < STATIC_LOGIT_SPAN:
                mid = 0.5 * (lo + hi)
                self.logit_qparams = calibrate.range_qparams(mid - STATIC_LOGIT_SPAN / 2, mid + STATIC_LOGIT_SPAN / 2)

    # -- forward --------------------------------------------------------------------------
    def _weights(self, layer: Layer) -> tuple[torch.Tensor, torch.Tensor]:
        if self.sw.weight == "int8":
            w = layer.q * layer.scale()[:, None, None, None]
        elif self.sw.weight == "master":
            s = np.maximum(np.abs(layer.w).reshape(len(layer.w), -1).max(axis=1), 1e-12) / 127
            w = round_half_away(layer.w / s[:, None, None, None]) * s[:, None, None, None]
        else:
            w = layer.w
        layer.leaf_w = torch.tensor(w, requires_grad=True)
        layer.leaf_b = torch.tensor(layer.b, requires_grad=True)
        return layer.leaf_w, layer.leaf_b

    def _backward_weight(self, layer: Layer, w: torch.Tensor) -> torch.Tensor | None:
        """The weights the spec's input gradient effectively uses: q[c] * R_c * max s_W / 256."""
        if self.sw.weight != "int8" or self.sw.grad == "float" or self.sw.exact_rescale:
            return None
        top = int(layer.kw.max())
        r = np.maximum(1, round_half_away(layer.grad_r0 / 2.0 ** (top - layer.kw)))
        unit = layer.s0.max() * 2.0 ** top / 256
        return torch.tensor(layer.q * (r * unit)[:, None, None, None])

    def _conv(self, layer: Layer, x: torch.Tensor) -> torch.Tensor:
        n = layer.node
        w, b = self._weights(layer)
        wb = self._backward_weight(layer, w)

        def apply(inp: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
            if n.linear:
                return F.linear(inp.flatten(1), weight.flatten(1), bias)
            t, left, bo, r = n.padding
            return F.conv2d(F.pad(inp, (left, r, t, bo)), weight, bias, n.stride, groups=n.groups)

        if wb is None:
            return apply(x, w, b)
        xd = x.detach()
        through = apply(x, wb, None)
        return apply(xd, w, b) + through - through.detach()

    def _quant_act(self, tensor: str, acc: torch.Tensor, act: str, lo: int, hi: int, stats: Stats) -> torch.Tensor:
        qp = self.logit_qparams if tensor == self.model.output else self.model.qparams[tensor]
        z = qp.zero_point
        if tensor == self.model.output:
            if self.sw.logits == "float":
                return acc
            k = self.act_k.get(tensor, 0)
            act = "blocked" if self.sw.block else act
        elif self.sw.act == "float" or not exponents.adaptive(self.model, tensor):
            if self.sw.act == "float":
                return F.relu(acc) if act == "relu" else (F.relu6(acc) if act == "relu6" else acc)
            k = 0
        else:
            k = self.act_k.get(tensor, 0)
            if self.sw.act == "dynamic":
                for _ in range(40):
                    v = round_half_up(acc.detach() / (qp.scale * 2.0 ** k))
                    nxt = exponents.next_exponent(k, Seen(int(v.min()), int(v.max())), z, act != "none")
                    if nxt == k:
                        break
                    k = nxt
                self.act_k[tensor] = k
        s = qp.scale * 2.0 ** k
        v = round_half_up(acc.detach() / s)
        self.seen.setdefault(tensor, Seen(int(v.min()), int(v.max()))).merge(v.numpy())
        if tensor == self.model.output:
            stats.logit_saturated += int(((v + z > hi) | (v + z < lo)).sum())
        else:
            stats.act_saturated += int((v + z > hi).sum())
            stats.act_values += v.numel()
        return FakeQuant.apply(acc, s, float(z), float(lo), float(hi), act)

    def forward(self, x: torch.Tensor, stats: Stats, train: bool = True) -> torch.Tensor:
        self.seen: dict[str, Seen] = {}
        t = {self.model.input: x}
        for node in self.model.nodes:
            if isinstance(node, Conv):
                inp = t[node.input]
                if train and node.name in self.grad_e and self.sw.grad != "float":
                    holder = self.grad_e[node.name]
                    holder.stats = stats
                    inp = GradQuant.apply(inp, holder)
                acc = self._conv(self.layers[node.name], inp)
                t[node.output] = self._quant_act(node.output, acc, node.activation, node.act_min, node.act_max, stats)
            elif isinstance(node, MaxPool):
                top, left, bo, r = node.padding
                xin = F.pad(t[node.input], (left, r, top, bo), value=-math.inf) if any(node.padding) else t[node.input]
                t[node.output] = F.max_pool2d(xin, node.kernel, node.stride)
            elif isinstance(node, AvgPool):
                acc = F.avg_pool2d(t[node.input], node.kernel, node.stride)
                t[node.output] = self._quant_act(node.output, acc, "none", -128, 127, stats)
            elif isinstance(node, View):
                t[node.output] = t[node.input].flatten(1)
            else:
                raise NotImplementedError(type(node).__name__)
        return t[self.model.output]

    def predict(self, x: torch.Tensor) -> np.ndarray:
        with torch.no_grad():
            return self.forward(x, Stats(), train=False).argmax(1).numpy()

    # -- the step -------------------------------------------------------------------------
    def step(self, x: torch.Tensor, labels: torch.Tensor) -> Stats:
        stats = Stats()
        z = self.forward(x, stats)
        qz = self.logit_qparams
        k = self.act_k.get(self.model.output, 0)
        s_z = qz.scale * 2.0 ** k
        m_e, sh_e = qloss.log2e_multiplier(qz.scale)
        ce = SoftmaxCE.apply(z, labels, self.sw.loss, s_z, qz.zero_point, (m_e, qloss.exp_shift(sh_e, k)))
        ce.backward()
        stats.loss = float(ce) / len(labels)
        for layer in self.layers.values():
            self._update(layer, stats)
        self._move_exponents(stats)
        return stats

    def _move_exponents(self, stats: Stats) -> None:
        if self.sw.act == "delayed":
            for tensor, seen in self.seen.items():
                if tensor == self.model.output or not exponents.adaptive(self.model, tensor):
                    continue
                self._move(tensor, seen, stats)
        if self.sw.logits == "delayed":
            self._move(self.model.output, self.seen[self.model.output], stats)
        if self.sw.grad == "delayed":
            for h in self.grad_e.values():
                if h.amax > 0:
                    new = h.e + 7 - int(h.amax).bit_length()
                    stats.grad_moves += int(new != h.e)
                    h.e = new
                h.amax = 0

    def _move(self, tensor: str, seen: Seen, stats: Stats) -> None:
        old = self.act_k.get(tensor, 0)
        new = exponents.next_exponent(old, seen, self.model.qparams[tensor].zero_point,
                                      exponents.clamped_below(self.model, tensor))
        stats.act_moves += int(new != old)
        self.act_k[tensor] = new

    def _update(self, layer: Layer, stats: Stats) -> None:
        assert layer.leaf_w is not None and layer.leaf_b is not None
        gw = layer.leaf_w.grad.numpy()
        gb = layer.leaf_b.grad.numpy()
        step = self.lr / self.batch
        layer.buf_b = self.momentum * layer.buf_b + gb
        layer.b = layer.b - step * layer.buf_b
        if self.sw.weight != "int8":
            layer.buf_w = self.momentum * layer.buf_w + gw
            new = layer.w - step * layer.buf_w
            stats.updated += new.size
            stats.changed += int(np.count_nonzero(new != layer.w))
            layer.w = new
            return
        s = layer.scale()[:, None, None, None]
        u = np.clip(step * gw / s, -128, 128)                     # LSBs
        if self.sw.momentum_q:
            mu = math.floor(self.momentum * 2 ** 15 + 0.5)
            buf8 = layer.buf_w * 256
            buf8 = np.clip(np.trunc(buf8 * mu / 2 ** 15) + round_half_away(u * 256), -32767, 32767)
            layer.buf_w = buf8 / 256
        else:
            layer.buf_w = self.momentum * layer.buf_w + u
        before = layer.q.copy()
        new = layer.q - self._round(layer, layer.buf_w)
        stats.updated += new.size
        self._rescale_channels(layer, new, stats)
        stats.changed += int(np.count_nonzero(layer.q != before))

    def _round(self, layer: Layer, step: np.ndarray) -> np.ndarray:
        """Whole LSBs to subtract. The residual modes keep the weight's true value q + res
        (|res| <= 1/2, stored at 8 or 16 fraction bits, or exactly)."""
        mode = self.sw.rounding
        if mode == "stochastic":
            return np.floor(step + self.rng.random(step.shape))
        if mode == "nearest":
            return np.floor(step + 0.5)
        if mode == "truncate":
            return np.trunc(step)
        t = step - layer.res
        delta = np.floor(t + 0.5)
        res = delta - t
        if mode == "residual8":
            res = np.clip(round_half_away(res * 256), -128, 127) / 256
        elif mode == "residual16":
            res = np.clip(round_half_away(res * 65536), -32768, 32767) / 65536
        layer.res = res
        return delta

    def _rescale_channels(self, layer: Layer, new: np.ndarray, stats: Stats) -> None:
        """The spec's channel rule: halve a channel with any |q| > 127, double one with all
        |q| below the shrink limit; a residual follows its weight."""
        shape = new.shape
        codes = new.reshape(len(new), -1)
        peak = np.abs(codes).max(axis=1)
        grow = peak > 127
        shrink = peak < exponents.SHRINK_BELOW
        factor = np.where(grow, 0.5, np.where(shrink, 2.0, 1.0))[:, None]
        if self.sw.rounding.startswith("res"):
            value = (codes + layer.res.reshape(codes.shape)) * factor
            q = round_half_away(value)
            layer.res = (value - q).reshape(shape)
        else:
            q = round_half_away(codes * factor)
        layer.q = np.clip(q, -127, 127).reshape(shape)
        layer.kw = layer.kw + grow.astype(np.int64) - shrink.astype(np.int64)
        layer.buf_w = layer.buf_w * factor.reshape((-1,) + (1,) * (len(shape) - 1))
        stats.weight_grows += int(grow.sum())
        stats.weight_shrinks += int(shrink.sum())
