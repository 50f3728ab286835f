"""Softmax cross-entropy on int8 logits, in integers (docs/int8.md, "Loss").

The logits are int8 at the scale s_z0 * 2**k, k moving between steps as every conv
output's does, so exp(-s_z * d) for a difference d = m - z_j from the row's maximum is
computed, not looked up by d: t = d * s_z * log2(e) in Q8 (one multiply and shift by
host integers for s_z0 * log2(e), the shift taking k), then exp(-s_z d) = 2**-t =
POW2[t mod 256] / 2**(t >> 8) with POW2 a fixed table of 2**(-j/256) in Q15. Per sample:
e_j = that Q15 value, S = sum e_j, P_j = round(e_j * 2**15 / S) (Q15 probability),
G_j = P_j - 2**15 [j == label]: the gradient of the summed loss in Q15. The int8 gradient
takes the exponent its largest magnitude needs (this step's data: the B x classes int32
values are few). The loss is ln S - ln e_label in Q16 nats, by an integer log2 (bit by
bit squaring) times ln 2; the step reports the batch mean, rounded.
"""

from __future__ import annotations

import math

import numpy as np

from poet_compiler.quant.fixedpoint import (
    GRAD_MAX,
    INT32_MAX,
    as_i64,
    mul_shift,
    nbits,
    quantize_multiplier,
    rshift_round,
    saturate,
)

Q15 = 1 << 15
LN2_Q16 = 45426  # round(ln 2 * 2**16)
LOG2_FRACTION_BITS = 16
EXP_FRACTION_BITS = 8  # t = d * s_z * log2(e) in Q8: POW2 has 2**8 entries
EXP_ZERO_BITS = 15     # 2**-t below 2**-15 (a Q15 value that rounds to 0) is 0

# POW2[j] = round(2**15 * 2**(-j/256)), j = 0..255: the Q15 mantissas of 2**-t (uint16 on the device)
POW2 = np.floor(Q15 * 2.0 ** (-np.arange(1 << EXP_FRACTION_BITS) / (1 << EXP_FRACTION_BITS)) + 0.5).astype(np.int64)


def log2e_multiplier(logit_scale: float) -> tuple[int, int]:
    """(M_e, sh_e) = quantize_multiplier(s_z0 * log2(e)): host integers of the loss."""
    return quantize_multiplier(logit_scale * math.log2(math.e))


def exp_shift(sh_e: int, k: int) -> int:
    """mul_shift's n for t = d * s_z0 * 2**k * log2(e) * 2**8 = mul_shift(d, M_e, n)."""
    return 31 - EXP_FRACTION_BITS - sh_e - k


def exp_q15(d: np.ndarray, m_e: int, n: int) -> np.ndarray:
    """round(2**15 * exp(-s_z * d)) for d in [0, 255]: 2**-t with t in Q8, from POW2 and a
    rounding right shift; 0 when the integer part of t exceeds 15. n < 1 (a logit step of
    more than 2**22 nats) makes every d > 0 give 0; n > 62 gives t = 0."""
    d = as_i64(d)
    if n < 1:
        t = np.where(d == 0, 0, INT32_MAX)
    elif n > 62:
        t = np.zeros_like(d)
    else:
        t = np.minimum(mul_shift(d, m_e, n), INT32_MAX)
    whole, frac = t >> EXP_FRACTION_BITS, t & ((1 << EXP_FRACTION_BITS) - 1)
    return np.where(whole > EXP_ZERO_BITS, 0, rshift_round(POW2[frac], np.minimum(whole, EXP_ZERO_BITS)))


def log2_q16(v: int) -> int:
    """log2(v) in Q16 for an integer v >= 1: the integer part from the bit length, then 16
    fraction bits by squaring a Q30 mantissa (each square truncated)."""
    if v < 1:
        raise ValueError("log2 of a value < 1")
    n = int(nbits(v)) - 1
    m = v << (30 - n) if n <= 30 else v >> (n - 30)
    frac = 0
    for _ in range(LOG2_FRACTION_BITS):
        m = (m * m) >> 30
        frac <<= 1
        if m >= (1 << 31):
            m >>= 1
            frac |= 1
    return (n << LOG2_FRACTION_BITS) + frac


def _rows(logits: np.ndarray, m_e: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    z = as_i64(logits)
    e = exp_q15(z.max(axis=1, keepdims=True) - z, m_e, n)
    return e, e.sum(axis=1)


def loss_q16(logits: np.ndarray, labels: np.ndarray, m_e: int, n: int) -> int:
    """The batch's mean cross-entropy in Q16 nats: round(sum_b L_b / B), half away from zero.
    ``m_e``, ``n``: the exponential's multiplier and shift (:func:`exp_shift`)."""
    e, s = _rows(logits, m_e, n)
    total = 0
    for b, t in enumerate(labels):
        diff = log2_q16(int(s[b])) - log2_q16(max(int(e[b, int(t)]), 1))
        total += (diff * LN2_Q16 + (1 << 15)) >> 16
    n = len(labels)
    return (total + n // 2) // n


def loss_grad(logits: np.ndarray, labels: np.ndarray, m_e: int, n: int) -> tuple[np.ndarray, int]:
    """(g int8 [B, classes], exponent E): dL_sum/dz = g * 2**-E."""
    e, s = _rows(logits, m_e, n)
    p = (e * Q15 + (s[:, None] >> 1)) // s[:, None]
    g = p.copy()
    g[np.arange(len(labels)), as_i64(labels)] -= Q15
    r = max(0, int(nbits(int(np.abs(g).max(initial=0)))) - 7)
    return saturate(rshift_round(g, r), -GRAD_MAX, GRAD_MAX).astype(np.int8), 15 - r


def loss_float(loss: int) -> float:
    """A Q16 loss as a float, for reports."""
    return loss / 65536.0


def predictions(logits: np.ndarray) -> np.ndarray:
    """argmax of each row, the first on ties (as the device computes accuracy)."""
    return np.argmax(as_i64(logits), axis=1)

