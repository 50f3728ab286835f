"""Residual add and the sum of gradients of a tensor read twice (docs/int8.md, "Add").

Forward add is TFLite's / CMSIS-NN's int8 add: each input's (q - z) shifted left by 20,
requantized to a common scale, summed in int32, requantized to the output, clamped to the
fused activation. Its backward hands the output gradient (masked by that clamp) to both
inputs unchanged: same codes, same exponent.

A tensor read by two nodes receives two gradients, at exponents E1 and E2. Their sum is
taken at E = min(E1, E2) (the finer one rounded, half away from zero), in int32; when its
largest magnitude needs more than 7 bits, the exponent drops by the excess and the sum is
rounded again. The exponent is chosen from the data of this step: the device makes one
pass for the maximum and one to write, both over int8 inputs, with no scratch.
"""

from __future__ import annotations

import numpy as np

from poet_compiler.quant.conv import activation_mask
from poet_compiler.quant.fixedpoint import GRAD_MAX, as_i64, nbits, requantize, rshift_round, saturate, wrap32
from poet_compiler.quant.qmodel import LEFT_SHIFT_ADD, Add


def add_forward(node: Add, a: np.ndarray, b: np.ndarray, z: tuple[int, int, int],
                k: tuple[int, int, int] = (0, 0, 0)) -> tuple[np.ndarray, np.ndarray]:
    """(y int8, v before zero point and clamp). ``z`` and ``k``: zero points and activation
    exponents of (a, b, y); the common scale is 2 max(s_a0, s_b0) 2**max(k_a, k_b)."""
    top = max(k[0], k[1])
    sa = requantize(wrap32((as_i64(a) - z[0]) << LEFT_SHIFT_ADD), node.in_multiplier[0], node.in_shift[0] + k[0] - top)
    sb = requantize(wrap32((as_i64(b) - z[1]) << LEFT_SHIFT_ADD), node.in_multiplier[1], node.in_shift[1] + k[1] - top)
    v = requantize(wrap32(sa + sb), node.out_multiplier, node.out_shift + top - k[2])
    return saturate(v + z[2], node.act_min, node.act_max).astype(np.int8), v


def add_backward(node: Add, g_y: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The gradient both inputs receive (exponent unchanged)."""
    return np.where(activation_mask(node.activation, node.act_min, node.act_max, y), as_i64(g_y), 0).astype(np.int8)


def grad_sum(grads: list[tuple[np.ndarray, int]]) -> tuple[np.ndarray, int]:
    """(sum int8, exponent) of gradients given as (int8 codes, exponent)."""
    e = min(exp for _, exp in grads)
    total = np.zeros(grads[0][0].shape, dtype=np.int64)
    for g, exp in grads:
        total += rshift_round(as_i64(g), exp - e)
    amax = int(np.max(np.abs(total), initial=0))
    drop = max(0, int(nbits(amax)) - 7)
    return saturate(rshift_round(total, drop), -GRAD_MAX, GRAD_MAX).astype(np.int8), e - drop
