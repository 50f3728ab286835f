"""Softmax cross-entropy on int8 logits, in integers (docs/int8.md, "Loss").

The logits are int8 with a static scale s_z, so a difference m - z_j from the row's
maximum takes one of 256 values: exp(-s_z * d) is a 256-entry table of Q15 integers,
computed on the host when the scales are fixed and stored with the model. Per sample:
e_j = T[m - z_j], S = sum e_j, P_j = round(e_j * 2**15 / S) (Q15 probability),
G_j = P_j - 2**15 [j == label]: the gradient of the summed loss in Q15. The int8 gradient
takes the exponent its largest magnitude needs (this step's data: the B x classes int32
values are few). The loss is ln S - ln e_label in Q16 nats, by an integer log2 (bit by
bit squaring) times ln 2; the step reports the batch mean, rounded.
"""

from __future__ import annotations

import numpy as np

from poet_compiler.quant.fixedpoint import GRAD_MAX, as_i64, nbits, rshift_round, saturate

Q15 = 1 << 15
LN2_Q16 = 45426  # round(ln 2 * 2**16)
LOG2_FRACTION_BITS = 16


def exp_table(logit_scale: float) -> np.ndarray:
    """T[d] = round(2**15 * exp(-s_z * d)), d = 0..255 (int32, T[0] = 32768). Host only."""
    d = np.arange(256, dtype=np.float64)
    return np.floor(Q15 * np.exp(-logit_scale * d) + 0.5).astype(np.int32)


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


def _rows(logits: np.ndarray, table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    z = as_i64(logits)
    e = as_i64(table)[z.max(axis=1, keepdims=True) - z]
    return e, e.sum(axis=1)


def loss_q16(logits: np.ndarray, labels: np.ndarray, table: np.ndarray) -> int:
    """The batch's mean cross-entropy in Q16 nats: round(sum_b L_b / B), half away from zero."""
    e, s = _rows(logits, table)
    total = 0
    for b, t in enumerate(labels):
        diff = log2_q16(int(s[b])) - log2_q16(max(int(e[b, int(t)]), 1))
        total += (diff * LN2_Q16 + (1 << 15)) >> 16
    n = len(labels)
    return (total + n // 2) // n


def loss_grad(logits: np.ndarray, labels: np.ndarray, table: np.ndarray) -> tuple[np.ndarray, int]:
    """(g int8 [B, classes], exponent E): dL_sum/dz = g * 2**-E."""
    e, s = _rows(logits, table)
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

