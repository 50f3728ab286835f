"""Convolution and linear layers, forward and backward (docs/int8.md, "Conv / linear").

Shapes are NCHW, weights OIHW (I = in channels per group). A linear layer is a 1x1
convolution over a [B, K, 1, 1] view. All sums are exact in int64 here and reduced to
int32 by ``wrap32``: the C kernels accumulate in int32 with wrap-around, which gives the
same bits in any loop order.

- forward: acc = bias + sum W * (x - z_x)  (padding contributes 0), then
  y = clamp(requantize(acc, M_c, shift_c + k_x - k_y) + z_y, act_min, act_max);
- input gradient: g~ = g * R_c (int16), acc = sum W * g~ (the transposed convolution),
  g_x = sat127(mul_shift(acc, M_g, 31 - shift_g - max k_W + E_y - E_x));
- weight gradient: GW = sum_{b,p} g * (x - z_x), bias gradient Gb = sum_{b,p} g (int32).
"""

from __future__ import annotations

import numpy as np

from poet_compiler.quant.fixedpoint import (
    GRAD_MAX,
    as_i64,
    clamp_shift,
    mul_shift,
    requantize,
    rshift_round,
    saturate,
    wrap32,
)
from poet_compiler.quant.qmodel import Conv


def output_size(size: int, kernel: int, stride: int, pad_lo: int, pad_hi: int) -> int:
    return (size + pad_lo + pad_hi - kernel) // stride + 1


def im2col(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int],
           padding: tuple[int, int, int, int]) -> np.ndarray:
    """[B, C, H, W] int64 (zero-point already subtracted) -> [B, C, kh*kw, Ho*Wo], zeros at padding."""
    b, c, h, w = x.shape
    kh, kw = kernel
    sh, sw = stride
    pt, pl, pb, pr = padding
    ho, wo = output_size(h, kh, sh, pt, pb), output_size(w, kw, sw, pl, pr)
    xp = np.zeros((b, c, h + pt + pb, w + pl + pr), dtype=np.int64)
    xp[:, :, pt:pt + h, pl:pl + w] = x
    cols = np.empty((b, c, kh * kw, ho * wo), dtype=np.int64)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i * kw + j] = xp[:, :, i:i + sh * ho:sh, j:j + sw * wo:sw].reshape(b, c, -1)
    return cols


def col2im(cols: np.ndarray, shape: tuple[int, int, int, int], kernel: tuple[int, int],
           stride: tuple[int, int], padding: tuple[int, int, int, int]) -> np.ndarray:
    """The adjoint of :func:`im2col`: [B, C, kh*kw, Ho*Wo] summed back into [B, C, H, W]."""
    b, c, h, w = shape
    kh, kw = kernel
    sh, sw = stride
    pt, pl, pb, pr = padding
    ho, wo = output_size(h, kh, sh, pt, pb), output_size(w, kw, sw, pl, pr)
    xp = np.zeros((b, c, h + pt + pb, w + pl + pr), dtype=np.int64)
    for i in range(kh):
        for j in range(kw):
            xp[:, :, i:i + sh * ho:sh, j:j + sw * wo:sw] += cols[:, :, i * kw + j].reshape(b, c, ho, wo)
    return xp[:, :, pt:pt + h, pl:pl + w]


def _as_map(x: np.ndarray, node: Conv) -> np.ndarray:
    return x.reshape(x.shape[0], -1, 1, 1) if node.linear else x


def _grouped(cols: np.ndarray, groups: int) -> np.ndarray:
    b, c, k, p = cols.shape
    return cols.reshape(b, groups, (c // groups) * k, p)


def _weight_matrix(node: Conv) -> np.ndarray:
    co = node.out_channels
    return as_i64(node.weight).reshape(node.groups, co // node.groups, -1)


def forward(node: Conv, x: np.ndarray, z_x: int, z_y: int, shift_offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(y int8, v int32): the layer's output and v = requantize(acc) before the zero point
    and the clamp (its range drives the delayed activation exponents). ``shift_offset`` =
    k_x - k_y, the activation exponents' part of the output shift."""
    xm = _as_map(x, node)
    cols = _grouped(im2col(as_i64(xm) - z_x, node.kernel, node.stride, node.padding), node.groups)
    acc = np.matmul(_weight_matrix(node)[None], cols)          # [B, G, Co/G, P]
    b, p = acc.shape[0], acc.shape[-1]
    acc = wrap32(acc.reshape(b, node.out_channels, p) + as_i64(node.bias)[None, :, None])
    mult = as_i64(node.out_multiplier)[None, :, None]
    shift = (as_i64(node.out_shift) + as_i64(node.weight_exponent))[None, :, None] + shift_offset
    v = requantize(acc, mult, shift)
    y = saturate(v + z_y, node.act_min, node.act_max)
    ho = output_size(xm.shape[2], node.kernel[0], node.stride[0], node.padding[0], node.padding[2])
    out_shape = (b, node.out_channels) if node.linear else (b, node.out_channels, ho, p // ho)
    return y.reshape(out_shape).astype(np.int8), v.reshape(out_shape)


def activation_mask(activation: str, act_min: int, act_max: int, y: np.ndarray) -> np.ndarray:
    """Where the fused activation passes the gradient: y > act_min (= z_y) for ReLU and
    ReLU6, and y < act_max (= q(6)) for ReLU6; int8 saturation itself is passed straight
    through (a saturated logit must still learn to come down)."""
    yi = as_i64(y)
    if activation == "none":
        return np.ones(yi.shape, dtype=bool)
    if activation == "relu":
        return yi > act_min
    return (yi > act_min) & (yi < act_max)


def masked_grad(node: Conv, g_y: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The gradient at the accumulator: g_y where the activation passes it, else 0."""
    return np.where(activation_mask(node.activation, node.act_min, node.act_max, y), as_i64(g_y), 0)


def grad_rescale(node: Conv) -> np.ndarray:
    """R_c = max(1, round(R0_c / 2**(max k_W - k_W[c]))): 256 s_W[c] / max s_W, in [1, 256]."""
    top = int(node.weight_exponent.max())
    return np.maximum(1, rshift_round(as_i64(node.grad_rescale), top - as_i64(node.weight_exponent)))


def input_grad(node: Conv, g: np.ndarray, in_shape: tuple[int, ...], e_y: int, e_x: int) -> tuple[np.ndarray, int]:
    """(g_x int8, amax): the input gradient at exponent ``e_x`` and max |v| before saturation.

    ``g`` is the masked output gradient (int8 values) at exponent ``e_y``."""
    b = g.shape[0]
    co = node.out_channels
    top = int(node.weight_exponent.max())
    rescale = grad_rescale(node)
    gt = as_i64(g).reshape(b, co, -1) * rescale[None, :, None]   # int16 range
    gt = gt.reshape(b, node.groups, co // node.groups, -1)
    wt = np.swapaxes(_weight_matrix(node), 1, 2)                  # [G, Kg, Co/G]
    cols = np.matmul(wt[None], gt)                                # [B, G, Kg, P]
    map_shape = (b, in_shape[0], 1, 1) if node.linear else (b, *in_shape)
    cols = cols.reshape(b, map_shape[1], node.kernel[0] * node.kernel[1], -1)
    acc = wrap32(col2im(cols, map_shape, node.kernel, node.stride, node.padding))
    n = 31 - node.grad_shift - top + e_y - e_x
    v = mul_shift(acc, node.grad_multiplier, clamp_shift(n)) if n <= 62 else np.zeros_like(acc)
    amax = int(min(int(np.max(np.abs(v), initial=0)), (1 << 31) - 1))
    g_x = saturate(v, -GRAD_MAX, GRAD_MAX).astype(np.int8)
    return g_x.reshape((b, *in_shape)), amax


def weight_grad(node: Conv, g: np.ndarray, x: np.ndarray, z_x: int) -> tuple[np.ndarray, np.ndarray]:
    """(GW int32 [Co, Ci/G, kh, kw], Gb int32 [Co]) from the masked output gradient ``g``."""
    xm = _as_map(x, node)
    cols = _grouped(im2col(as_i64(xm) - z_x, node.kernel, node.stride, node.padding), node.groups)
    b = g.shape[0]
    co = node.out_channels
    gg = as_i64(g).reshape(b, node.groups, co // node.groups, -1)
    gw = np.einsum("bgop,bgkp->gok", gg, cols)
    gb = as_i64(g).reshape(b, co, -1).sum(axis=(0, 2))
    return wrap32(gw).reshape(node.weight.shape).astype(np.int32), wrap32(gb).astype(np.int32)
