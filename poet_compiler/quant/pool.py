"""Max and average pooling, forward and backward (docs/int8.md, "Pooling").

Max pooling works on the int8 codes directly (the scale is positive, so the largest code
is the largest value) and keeps the input's QParams; its gradient goes to the first
maximal position of each window in row-major order (PyTorch's choice), summed over
overlapping windows in int32 and saturated to int8.

Average pooling sums (x - z_x) over the valid positions of a window, divides by their
count (rounded half away from zero), and requantizes by s_x / s_y (shift + k_x - k_y). Its backward is exact
and needs no dynamic exponent: with k = floor(log2(count)),
g_x = round(g_y * 2**k / count) at exponent E_y + k, so |g_x| <= |g_y|.
"""

from __future__ import annotations

import numpy as np

from poet_compiler.quant.conv import output_size
from poet_compiler.quant.fixedpoint import GRAD_MAX, as_i64, requantize, saturate
from poet_compiler.quant.qmodel import AvgPool, MaxPool


def _windows(shape: tuple[int, ...], kernel: tuple[int, int], stride: tuple[int, int],
             padding: tuple[int, int, int, int]) -> tuple[int, int, list[tuple[int, int]]]:
    _, _, h, w = shape
    ho = output_size(h, kernel[0], stride[0], padding[0], padding[2])
    wo = output_size(w, kernel[1], stride[1], padding[1], padding[3])
    return ho, wo, [(i, j) for i in range(kernel[0]) for j in range(kernel[1])]


def _tap(x: np.ndarray, i: int, j: int, ho: int, wo: int, stride: tuple[int, int],
         padding: tuple[int, int, int, int], fill: int) -> tuple[np.ndarray, np.ndarray]:
    """The window element (i, j) of every output position, and where it is not padding."""
    b, c, h, w = x.shape
    rows = np.arange(ho) * stride[0] + i - padding[0]
    cols = np.arange(wo) * stride[1] + j - padding[1]
    valid = ((rows >= 0) & (rows < h))[:, None] & ((cols >= 0) & (cols < w))[None, :]
    r, q = np.clip(rows, 0, h - 1), np.clip(cols, 0, w - 1)
    vals = x[:, :, r[:, None], q[None, :]]
    return np.where(valid, vals, fill), valid


def maxpool_forward(node: MaxPool, x: np.ndarray) -> np.ndarray:
    ho, wo, taps = _windows(x.shape, node.kernel, node.stride, node.padding)
    out = np.full((x.shape[0], x.shape[1], ho, wo), -129, dtype=np.int64)
    for i, j in taps:
        vals, _ = _tap(as_i64(x), i, j, ho, wo, node.stride, node.padding, -129)
        out = np.maximum(out, vals)
    return out.astype(np.int8)


def maxpool_backward(node: MaxPool, g_y: np.ndarray, x: np.ndarray) -> np.ndarray:
    xi = as_i64(x)
    ho, wo, taps = _windows(x.shape, node.kernel, node.stride, node.padding)
    best = as_i64(maxpool_forward(node, x))
    taken = np.zeros(best.shape, dtype=bool)
    b, c, h, w = x.shape
    gx = np.zeros((b, c, h, w), dtype=np.int64)
    for i, j in taps:
        vals, valid = _tap(xi, i, j, ho, wo, node.stride, node.padding, -129)
        first = (vals == best) & ~taken & valid[None, None]
        taken |= first
        rows = np.arange(ho) * node.stride[0] + i - node.padding[0]
        cols = np.arange(wo) * node.stride[1] + j - node.padding[1]
        contrib = np.where(first, as_i64(g_y), 0)
        for oi, r in enumerate(rows):
            if 0 <= r < h:
                ok = (cols >= 0) & (cols < w)
                gx[:, :, r, cols[ok]] += contrib[:, :, oi, ok]  # non-overlapping columns within one row
    return saturate(gx, -GRAD_MAX, GRAD_MAX).astype(np.int8)


def _counts(node: AvgPool, shape: tuple[int, ...]) -> np.ndarray:
    ho, wo, taps = _windows(shape, node.kernel, node.stride, node.padding)
    count = np.zeros((ho, wo), dtype=np.int64)
    for i, j in taps:
        _, valid = _tap(np.zeros((1, 1, shape[2], shape[3]), np.int64), i, j, ho, wo, node.stride, node.padding, 0)
        count += valid
    return count


def round_div(a: np.ndarray, d: np.ndarray) -> np.ndarray:
    """a / d rounded half away from zero (d > 0): (|a| + d // 2) // d with a's sign."""
    a, d = as_i64(a), as_i64(d)
    return np.sign(a) * ((np.abs(a) + d // 2) // d)


def avgpool_forward(node: AvgPool, x: np.ndarray, z_x: int, z_y: int,
                    shift_offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(y int8, v before zero point and clamp); ``shift_offset`` = k_x - k_y."""
    ho, wo, taps = _windows(x.shape, node.kernel, node.stride, node.padding)
    total = np.zeros((x.shape[0], x.shape[1], ho, wo), dtype=np.int64)
    for i, j in taps:
        vals, _ = _tap(as_i64(x) - z_x, i, j, ho, wo, node.stride, node.padding, 0)
        total += vals
    mean = round_div(total, _counts(node, x.shape)[None, None])
    v = requantize(mean, node.multiplier, node.shift + shift_offset)
    return saturate(v + z_y, -128, 127).astype(np.int8), v


def avgpool_grad_shift(node: AvgPool, shape: tuple[int, ...]) -> int:
    """k = floor(log2(max count)): the exponent the input gradient gains (E_x = E_y + k)."""
    return int(_counts(node, shape).max()).bit_length() - 1


def avgpool_backward(node: AvgPool, g_y: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Each input position receives round(g_y * 2**k / count) of every window holding it."""
    k = avgpool_grad_shift(node, shape)
    ho, wo, taps = _windows(shape, node.kernel, node.stride, node.padding)
    share = round_div(as_i64(g_y) << k, _counts(node, shape)[None, None])
    b, c, h, w = shape
    gx = np.zeros((b, c, h, w), dtype=np.int64)
    for i, j in taps:
        rows = np.arange(ho) * node.stride[0] + i - node.padding[0]
        cols = np.arange(wo) * node.stride[1] + j - node.padding[1]
        for oi, r in enumerate(rows):
            if 0 <= r < h:
                ok = (cols >= 0) & (cols < w)
                gx[:, :, r, cols[ok]] += share[:, :, oi, ok]
    return saturate(gx, -GRAD_MAX, GRAD_MAX).astype(np.int8)
