"""The SGD update applied in integers (docs/int8.md, "Update").

The gradients are those of the summed loss, at exponent E_y (the layer's output gradient),
so the real SGD step on the mean loss is theta -= (lr / B) * G. Written in the parameter's
own integer units, with F = 16 fraction bits:

    weight: u = GW * (lr/B) * s_x / s_W[c] * 2**(16 - E_y)   (LSBs of q_W, Q16)
    bias:   u = Gb * (lr/B) / (s_x * s_W[c]) * 2**(16 - E_y)  (LSBs of q_b, Q16)

that is the real update mapped exactly onto the integer grid (what QAS approximates with
s_W**-2 and s_W**-2 s_x**-2), computed by ``mul_shift`` with a per-channel multiplier and
shift fixed on the host; u is saturated to +-2**23 (128 LSBs). The device's rule: a
weight carries an int8 residual r beside its code q (its value q + r / 2**8 LSBs,
:func:`with_residual`, :func:`split`), so an update below one LSB accumulates instead of
being lost; a bias rounds u to the nearest LSB. Stochastic, nearest and truncating
rounding of the weights stay here for the measurements of bench/int8_host.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from poet_compiler.quant.fixedpoint import (
    GRAD_MAX,
    INT32_MAX,
    as_i64,
    mul_shift,
    quantize_multiplier,
    rshift_round,
    saturate,
)
from poet_compiler.quant.prng import draws

FRACTION_BITS = 16
UPDATE_LIMIT = 1 << 23


class Rounding(Enum):
    """How the Q16 update becomes whole LSBs. The spec's rule is RESIDUAL (weights; biases
    round to the nearest); the others are kept for the measurements of bench/int8_host.py
    (docs/int8.md, "Update")."""

    STOCHASTIC = "stochastic"
    NEAREST = "nearest"        # round half up: an update below half an LSB is lost
    TRUNCATE = "truncate"      # toward zero, TTE's C cast: an update below one LSB is lost
    RESIDUAL = "residual"      # an int8 residual per weight: the weight is q + r / 2**8 LSBs


@dataclass
class UpdateRule:
    """Per-channel (multiplier, shift) pairs of one layer's weight and bias updates."""

    weight_multiplier: np.ndarray
    weight_shift: np.ndarray
    bias_multiplier: np.ndarray
    bias_shift: np.ndarray


def update_rule(weight_scale: np.ndarray, input_scale: float, lr: float, batch: int) -> UpdateRule:
    """The host-side integers of :class:`UpdateRule` (floats end here)."""
    step = lr / batch * (1 << FRACTION_BITS)
    w = [quantize_multiplier(step * input_scale / s) for s in weight_scale]
    b = [quantize_multiplier(step / (input_scale * s)) for s in weight_scale]
    return UpdateRule(
        np.array([m for m, _ in w], np.int64), np.array([s for _, s in w], np.int64),
        np.array([m for m, _ in b], np.int64), np.array([s for _, s in b], np.int64),
    )


def scaled_update(grad: np.ndarray, multiplier: np.ndarray, shift: np.ndarray, e_y: int) -> np.ndarray:
    """u in Q16 LSBs, per element (channel = axis 0), saturated to +-2**23."""
    shape = (-1,) + (1,) * (grad.ndim - 1)
    n = 31 - as_i64(shift).reshape(shape) + e_y
    m = as_i64(multiplier).reshape(shape)
    n_ok = np.clip(n, 1, 62)
    u = mul_shift(np.broadcast_to(as_i64(grad), np.broadcast_shapes(grad.shape, n.shape)), m, n_ok)
    u = np.where(n > 62, 0, u)
    return saturate(u, -UPDATE_LIMIT, UPDATE_LIMIT)


MOMENTUM_BITS = 8     # fraction bits of a momentum buffer (LSBs of its parameter)


def momentum(buf: np.ndarray, u: np.ndarray, mu_q15: int, limit: int) -> np.ndarray:
    """torch.optim.SGD's buffer in parameter LSBs, Q8: buf <- buf * mu (rounded toward zero) +
    round(u / 2**8), saturated to +-limit (int16 for weights, int32 for biases); the step
    applied is buf / 2**8 LSBs. The decay rounds toward zero so that a buffer no longer fed
    reaches 0: rounded to nearest, |buf| <= 5 would be a fixed point at mu = 0.9 and keep
    moving its weight by up to 5/256 LSB every step."""
    p = as_i64(buf) * mu_q15
    decayed = np.sign(p) * (np.abs(p) >> 15)
    return saturate(decayed + rshift_round(u, FRACTION_BITS - MOMENTUM_BITS), -limit, limit)


def apply(param: np.ndarray, u: np.ndarray, *, seed: int, step: int, tensor: int, limit: int,
          rounding: Rounding = Rounding.STOCHASTIC) -> np.ndarray:
    """The new parameter codes: saturate(q - round(u / 2**16), -limit, limit), rounded by
    ``rounding`` (RESIDUAL rounds to nearest here: see :func:`with_residual` for weights)."""
    one = 1 << FRACTION_BITS
    if rounding is Rounding.STOCHASTIC:
        r = as_i64(draws(seed, step, tensor, u.size)).reshape(u.shape) >> (32 - FRACTION_BITS)
        delta = (u + r) >> FRACTION_BITS
    elif rounding is Rounding.TRUNCATE:
        delta = np.sign(u) * (np.abs(u) >> FRACTION_BITS)
    else:
        delta = (u + (one >> 1)) >> FRACTION_BITS
    return saturate(as_i64(param) - delta, -limit, limit)


RESIDUAL_BITS = 8     # fraction bits of a weight's residual (int8): the momentum buffer's too


def with_residual(q: np.ndarray, residual: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The weight after the update in Q8 LSBs, w = q * 2**8 + r - round(u / 2**8): nothing
    of an update is lost down to 2**-9 LSB. :func:`split` makes it (q, r) again."""
    return (as_i64(q) << RESIDUAL_BITS) + as_i64(residual) - rshift_round(u, FRACTION_BITS - RESIDUAL_BITS)


def split(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(q, r) of a Q8 weight: q = sat((w + 128) >> 8, +-127) (nearest, half up), r = w - 256 q
    saturated to int8 ([-128, 127] whenever q did not saturate)."""
    q = saturate((as_i64(w) + (1 << (RESIDUAL_BITS - 1))) >> RESIDUAL_BITS, -GRAD_MAX, GRAD_MAX)
    r = saturate(as_i64(w) - (q << RESIDUAL_BITS), -(1 << (RESIDUAL_BITS - 1)), (1 << (RESIDUAL_BITS - 1)) - 1)
    return q, r


WEIGHT_LIMIT = GRAD_MAX
BIAS_LIMIT = INT32_MAX
UNCLAMPED = GRAD_MAX + UPDATE_LIMIT // (1 << FRACTION_BITS) + 1  # a weight before its channel's rescale
