"""Delayed power-of-two exponents of activation scales (docs/int8.md, "Delayed scaling").

An activation tensor's scale is s0 * 2**k: s0 fixed at calibration, k an integer that
moves between steps, so every multiplier stays fixed and only shifts change. A model
trained from scratch grows its activations far beyond the ones it was calibrated on
(digits_cnn's logits: about 100x): a static scale either saturates or, with headroom,
wastes the bits the first steps need (BENCHMARKS.md, "int8 on the host").

Each step, the forward kernels record the range of v = requantize(acc) before the zero
point and the clamp. After the step: k += 1 when any v saturated (beyond the fused
activation's upper limit, or below -128 when there is no lower clamp), else k -= 1 when
every v fits half the range, else k stays. Tensors whose scale is not a calibration
choice keep k = 0: the model's input (quantized on the host) and ReLU6 outputs ([0, 6]
by definition). The logits move as any conv output does: a static logit scale
saturates as a model trained from scratch grows its logits, and a saturated logit's
gradient (passed straight through) can drive the whole output into saturation, where
training stops (docs/int8.md, "Ablation"). Max pooling and views share their input's
scale, so they share its exponent.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from poet_compiler.quant.fixedpoint import INT32_MAX, as_i64, rshift_round, saturate
from poet_compiler.quant.qmodel import Add, AvgPool, Conv, MaxPool, QModel, View


def root(model: QModel, tensor: str) -> str:
    """The tensor owning ``tensor``'s scale (through max pooling and views)."""
    node = model.producer(tensor)
    while isinstance(node, MaxPool | View):
        tensor = node.input
        node = model.producer(tensor)
    return tensor


def adaptive(model: QModel, tensor: str) -> bool:
    """Whether the tensor's exponent moves (see the module docstring)."""
    node = model.producer(tensor)
    if tensor == model.input or node is None:
        return False
    if isinstance(node, Conv | Add) and node.activation == "relu6":
        return False
    return isinstance(node, Conv | Add | AvgPool)


def k(model: QModel, tensor: str) -> int:
    return model.act_exponent.get(root(model, tensor), 0)


@dataclass
class Seen:
    """The range of v over a step (min and max: any order, any recomputation)."""

    vmin: int
    vmax: int

    def merge(self, v: np.ndarray) -> None:
        if v.size:
            self.vmin = min(self.vmin, int(v.min()))
            self.vmax = max(self.vmax, int(v.max()))


def next_exponent(k_now: int, seen: Seen, zero_point: int, clamped_below: bool) -> int:
    below = not clamped_below  # no ReLU: the negative side saturates too
    if seen.vmax > 127 - zero_point or (below and seen.vmin < -128 - zero_point):
        return k_now + 1
    half_hi = seen.vmax <= (127 - zero_point) // 2
    half_lo = not below or seen.vmin >= -((zero_point + 128) // 2)
    return k_now - 1 if half_hi and half_lo else k_now


def clamped_below(model: QModel, tensor: str) -> bool:
    node = model.producer(tensor)
    return isinstance(node, Conv | Add) and node.activation != "none"


def rescale_bias(bias: np.ndarray, change: int) -> np.ndarray:
    """A bias at scale s_x s_W[c] when k_x grows by ``change``: rounded (or shifted left,
    saturating, when k_x shrinks)."""
    if change >= 0:
        return rshift_round(bias, change).astype(np.int32)
    return saturate(as_i64(bias) << -change, -INT32_MAX, INT32_MAX).astype(np.int32)


def adapt(model: QModel, seen: dict[str, Seen]) -> None:
    """Move every adaptive exponent by the step's ranges and rescale the biases that read it."""
    change: dict[str, int] = {}
    for tensor, s in seen.items():
        if not adaptive(model, tensor):
            continue
        old = model.act_exponent.get(tensor, 0)
        new = next_exponent(old, s, model.qparams[tensor].zero_point, clamped_below(model, tensor))
        if new != old:
            model.act_exponent[tensor] = new
            change[tensor] = new - old
    for node in model.convs():
        d = change.get(root(model, node.input), 0)
        if d:
            node.bias = rescale_bias(node.bias, d)
            node.bias_momentum = rescale_bias(node.bias_momentum, d)


SHRINK_BELOW = 32  # a channel whose largest |q| is below this after an update doubles its codes


def rescale_channels(node: Conv, new: np.ndarray, fraction_bits: int = 0) -> np.ndarray:
    """Per-channel weight exponents (docs/int8.md, "Weight exponents"): after an update,
    a channel with any |q| > 127 halves its weights (rounded half away from zero), its
    bias and momentum, and k_W[c] += 1; a channel with every |q| < 32 doubles them and
    k_W[c] -= 1. ``new`` holds the updated weights in LSBs with ``fraction_bits`` (8 when
    a residual carries the fraction, whose q is then the nearest code). Returns them
    rescaled, not yet split or saturated."""
    flat = as_i64(new).reshape(new.shape[0], -1)
    half = (1 << fraction_bits) >> 1
    peak = np.abs((flat + half) >> fraction_bits).max(axis=1)
    grow, shrink = peak > 127, peak < SHRINK_BELOW
    flat = np.where(grow[:, None], rshift_round(flat, 1), np.where(shrink[:, None], flat << 1, flat))
    change = grow.astype(np.int64) - shrink.astype(np.int64)
    node.weight_exponent = (node.weight_exponent + change).astype(np.int32)
    node.bias = _per_channel(node.bias, grow, shrink, INT32_MAX).astype(np.int32)
    node.bias_momentum = _per_channel(node.bias_momentum, grow, shrink, INT32_MAX).astype(np.int32)
    node.weight_momentum = _per_channel(node.weight_momentum, grow, shrink, (1 << 15) - 1).astype(np.int16)
    return flat.reshape(new.shape)


def _per_channel(a: np.ndarray, grow: np.ndarray, shrink: np.ndarray, limit: int) -> np.ndarray:
    v = as_i64(a)
    shape = (-1,) + (1,) * (v.ndim - 1)
    g, s = grow.reshape(shape), shrink.reshape(shape)
    return np.where(g, rshift_round(v, 1), np.where(s, saturate(v << 1, -limit, limit), v))
