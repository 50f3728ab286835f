"""Layer ops: convolutions, matrix products, normalizations, pooling, softmax, dropout.

Where PyTorch has a fused functional for the pattern (F.linear for Gemm with a
transposed weight, F.batch_norm, F.layer_norm, F.relu6...), the runner uses it, so that
the traced training graph has the same aten ops as the PyTorch model the ONNX file came
from.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..context import INTERNAL_DOMAIN, NodeContext, Runner, converter

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
_MAXPOOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVGPOOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


def _spatial_pads(ctx: NodeContext, kernel: list[int], strides: list[int], dilations: list[int]) -> list[int]:
    """ONNX ``pads`` [b1..bn, e1..en], resolving auto_pad against the static input shape."""
    n = len(kernel)
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = [int(p) for p in ctx.attr("pads", [0] * (2 * n))]
        return pads
    if auto == "VALID":
        return [0] * (2 * n)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise ctx.fail(f"auto_pad='{auto}' is not supported")
    size = ctx.shape(0)[2:]
    begin, end = [], []
    for d in range(n):
        out = math.ceil(size[d] / strides[d])
        total = max(0, (out - 1) * strides[d] + (kernel[d] - 1) * dilations[d] + 1 - size[d])
        small, big = total // 2, total - total // 2
        begin.append(small if auto == "SAME_UPPER" else big)
        end.append(big if auto == "SAME_UPPER" else small)
    return begin + end


def _symmetric(pads: list[int]) -> tuple[list[int], list[int] | None]:
    """(padding for torch, explicit F.pad list or None when the padding is symmetric)."""
    n = len(pads) // 2
    begin, end = pads[:n], pads[n:]
    if begin == end:
        return begin, None
    return [0] * n, _explicit(pads)


def _explicit(pads: list[int]) -> list[int]:
    """ONNX pads [b1..bn, e1..en] as an F.pad list (last dimension first)."""
    n = len(pads) // 2
    out: list[int] = []
    for d in reversed(range(n)):
        out += [pads[d], pads[n + d]]
    return out


def _conv_attrs(ctx: NodeContext, w_shape: tuple[int, ...], n: int) -> tuple[list[int], list[int], list[int], int]:
    """kernel_shape, strides, dilations and group of a Conv/ConvTranspose, with ONNX defaults."""
    kernel = [int(k) for k in ctx.attr("kernel_shape", w_shape[2:])]
    strides = [int(s) for s in ctx.attr("strides", [1] * n)]
    dil = [int(d) for d in ctx.attr("dilations", [1] * n)]
    return kernel, strides, dil, int(ctx.attr("group", 1))


@converter("Conv")
def _conv(ctx: NodeContext) -> Runner:
    w_shape = ctx.shape(1)
    n = len(w_shape) - 2
    if n not in _CONV:
        raise ctx.fail(f"{n}-D convolution is not supported")
    kernel, strides, dil, group = _conv_attrs(ctx, w_shape, n)
    padding, explicit = _symmetric(_spatial_pads(ctx, kernel, strides, dil))
    fn = _CONV[n]

    def run(xs):  # noqa: ANN001, ANN202
        x = xs[0] if explicit is None else F.pad(xs[0], explicit)
        return (fn(x, xs[1], xs[2] if len(xs) > 2 else None, strides, padding, dil, group),)

    return run


@converter("ConvTranspose")
def _conv_transpose(ctx: NodeContext) -> Runner:
    w_shape = ctx.shape(1)
    n = len(w_shape) - 2
    if n not in _CONV_T:
        raise ctx.fail(f"{n}-D transposed convolution is not supported")
    kernel, strides, dil, group = _conv_attrs(ctx, w_shape, n)
    out_pad = [int(p) for p in ctx.attr("output_padding", [0] * n)]
    size = ctx.shape(0)[2:]
    full = [(size[d] - 1) * strides[d] + (kernel[d] - 1) * dil[d] + 1 + out_pad[d] for d in range(n)]
    if "output_shape" in ctx.attrs:
        want = [int(v) for v in ctx.attr("output_shape")][-n:]
        total = [full[d] - want[d] for d in range(n)]
        upper = ctx.attr("auto_pad", "NOTSET") != "SAME_LOWER"
        begin = [t // 2 if upper else t - t // 2 for t in total]
        pads = begin + [total[d] - begin[d] for d in range(n)]
    elif ctx.attr("auto_pad", "NOTSET") in ("SAME_UPPER", "SAME_LOWER"):
        total = [full[d] - size[d] * strides[d] for d in range(n)]
        upper = ctx.attr("auto_pad") == "SAME_UPPER"
        begin = [t // 2 if upper else t - t // 2 for t in total]
        pads = begin + [total[d] - begin[d] for d in range(n)]
    else:
        pads = [int(p) for p in ctx.attr("pads", [0] * (2 * n))]
    begin, end = pads[:n], pads[n:]
    fn = _CONV_T[n]
    if begin == end:
        return lambda xs: (fn(xs[0], xs[1], xs[2] if len(xs) > 2 else None, strides, begin, out_pad, group, dil),)
    # Asymmetric padding: compute unpadded, then crop each side.
    crop = tuple([slice(None), slice(None)] + [slice(begin[d], full[d] - end[d]) for d in range(n)])
    return lambda xs: (fn(xs[0], xs[1], xs[2] if len(xs) > 2 else None, strides, 0, out_pad, group, dil)[crop],)


@converter("MatMul")
def _matmul(ctx: NodeContext) -> Runner:
    return lambda xs: (torch.matmul(xs[0], xs[1]),)


@converter(f"{INTERNAL_DOMAIN}::Linear")
def _fused_linear(ctx: NodeContext) -> Runner:
    """MatMul(X, W^T) [+ bias] recognised by the fusion pass (fuse.py): W is [out, in]."""
    has_b = ctx.has_input(2)
    return lambda xs: (F.linear(xs[0], xs[1], xs[2] if has_b else None),)


@converter("Gemm")
def _gemm(ctx: NodeContext) -> Runner:
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    ta, tb = int(ctx.attr("transA", 0)), int(ctx.attr("transB", 0))
    has_c = ctx.has_input(2)
    if not ta and tb and alpha == 1.0 and beta == 1.0 and (not has_c or len(ctx.shape(2)) <= 1):
        # nn.Linear exports as Gemm(transB=1): map it back to F.linear (aten.linear).
        return lambda xs: (F.linear(xs[0], xs[1], xs[2] if has_c else None),)

    def run(xs):  # noqa: ANN001, ANN202
        a = xs[0].t() if ta else xs[0]
        b = xs[1].t() if tb else xs[1]
        y = torch.matmul(a, b)
        if alpha != 1.0:
            y = y * alpha
        if has_c:
            y = y + (xs[2] * beta if beta != 1.0 else xs[2])
        return (y,)

    return run


def _bn_training(ctx: NodeContext) -> bool:
    if ctx.opset >= 14:
        return bool(ctx.attr("training_mode", 0))
    # Before opset 14, a node in training mode lists its extra outputs.
    return any(o != "" for o in ctx.node.output[1:])


@converter("BatchNormalization")
def _batch_norm(ctx: NodeContext) -> Runner:
    eps = float(ctx.attr("epsilon", 1e-5))
    momentum = float(ctx.attr("momentum", 0.9))
    ctx.freeze(3, 4)  # running mean/var are statistics, not trainable parameters
    if not _bn_training(ctx):
        return lambda xs: (F.batch_norm(xs[0], xs[3], xs[4], xs[1], xs[2], False, 0.0, eps),)
    rank = ctx.rank(0)
    dims = [0] + list(range(2, rank))
    want_stats = any(ctx.used[1:3]) if len(ctx.used) > 1 else False
    n_out = len(ctx.node.output)
    if any(ctx.used[3:]):
        raise ctx.fail("the saved_mean/saved_var outputs are not supported")

    def run(xs):  # noqa: ANN001, ANN202
        # Batch statistics, no running buffers passed: the op stays pure (no in-place
        # update), and the running-statistics outputs are computed explicitly below.
        y = F.batch_norm(xs[0], None, None, xs[1], xs[2], True, 0.0, eps)
        outs: list[torch.Tensor | None] = [y] + [None] * (n_out - 1)
        if want_stats:
            x = xs[0].detach()
            mean = x.mean(dims)
            var = x.var(dims, unbiased=False)
            outs[1] = xs[3] * momentum + mean * (1 - momentum)
            if n_out > 2:
                outs[2] = xs[4] * momentum + var * (1 - momentum)
        return outs

    return run


@converter("LayerNormalization")
def _layer_norm(ctx: NodeContext) -> Runner:
    if any(ctx.used[1:]):
        raise ctx.fail("the Mean/InvStdDev outputs are not supported")
    shape = ctx.shape(0)
    axis = ctx.axis(int(ctx.attr("axis", -1)), len(shape))
    eps = float(ctx.attr("epsilon", 1e-5))
    norm_shape = tuple(shape[axis:])
    has_b = ctx.has_input(2)
    if ctx.shape(1) == norm_shape and (not has_b or ctx.shape(2) == norm_shape):
        return lambda xs: (F.layer_norm(xs[0], norm_shape, xs[1], xs[2] if has_b else None, eps),)

    def run(xs):  # noqa: ANN001, ANN202  (scale/bias merely broadcastable)
        y = F.layer_norm(xs[0], norm_shape, None, None, eps) * xs[1]
        return (y + xs[2] if has_b else y,)

    return run


@converter("InstanceNormalization")
def _instance_norm(ctx: NodeContext) -> Runner:
    eps = float(ctx.attr("epsilon", 1e-5))
    return lambda xs: (F.instance_norm(xs[0], weight=xs[1], bias=xs[2], eps=eps),)


def _pool_params(ctx: NodeContext) -> tuple[list[int], list[int], list[int], list[int], bool]:
    kernel = [int(k) for k in ctx.attr("kernel_shape")]
    n = len(kernel)
    strides = [int(s) for s in ctx.attr("strides", [1] * n)]
    dil = [int(d) for d in ctx.attr("dilations", [1] * n)]
    pads = _spatial_pads(ctx, kernel, strides, dil)
    return kernel, strides, dil, pads, bool(ctx.attr("ceil_mode", 0))


@converter("MaxPool")
def _max_pool(ctx: NodeContext) -> Runner:
    if len(ctx.used) > 1 and ctx.used[1]:
        raise ctx.fail("the Indices output is not supported")
    kernel, strides, dil, pads, ceil = _pool_params(ctx)
    n = len(kernel)
    padding, explicit = _symmetric(pads)
    if explicit is None and any(2 * p > k for p, k in zip(padding, kernel)):
        # torch caps implicit padding at half the kernel; pad explicitly with -inf.
        padding, explicit = [0] * n, _explicit(pads)
    fn = _MAXPOOL[n]

    def run(xs):  # noqa: ANN001, ANN202
        x = xs[0] if explicit is None else F.pad(xs[0], explicit, value=float("-inf"))
        return (fn(x, kernel, strides, padding, dil, ceil_mode=ceil),)

    return run


@converter("AveragePool")
def _avg_pool(ctx: NodeContext) -> Runner:
    kernel, strides, dil, pads, ceil = _pool_params(ctx)
    if any(d != 1 for d in dil):
        raise ctx.fail("dilated average pooling is not supported")
    n = len(kernel)
    include = bool(ctx.attr("count_include_pad", 0))
    padding, explicit = _symmetric(pads)
    if explicit is not None and not include:
        raise ctx.fail("asymmetric padding with count_include_pad=0 is not supported")
    fn = _AVGPOOL[n]

    def run(xs):  # noqa: ANN001, ANN202
        x = xs[0] if explicit is None else F.pad(xs[0], explicit)
        return (fn(x, kernel, strides, padding, ceil_mode=ceil, count_include_pad=include),)

    return run


@converter("GlobalAveragePool")
def _global_avg(ctx: NodeContext) -> Runner:
    rank = ctx.rank(0)
    if rank == 4:  # nn.AdaptiveAvgPool2d(1) (aten._adaptive_avg_pool2d)
        return lambda xs: (F.adaptive_avg_pool2d(xs[0], 1),)
    dims = list(range(2, rank))
    return lambda xs: (xs[0].mean(dims, keepdim=True),)


@converter("GlobalMaxPool")
def _global_max(ctx: NodeContext) -> Runner:
    dims = list(range(2, ctx.rank(0)))
    return lambda xs: (torch.amax(xs[0], dims, keepdim=True),)


def _softmax_like(ctx: NodeContext, fn) -> Runner:  # noqa: ANN001
    shape = ctx.shape(0)
    default = -1 if ctx.opset >= 13 else 1
    axis = ctx.axis(int(ctx.attr("axis", default)), len(shape))
    if ctx.opset >= 13 or axis == len(shape) - 1:
        return lambda xs: (fn(xs[0], axis),)
    # Before opset 13 the input is coerced to 2-D at ``axis``.
    rows = math.prod(shape[:axis])
    return lambda xs: (fn(xs[0].reshape(rows, -1), 1).reshape(shape),)


@converter("Softmax")
def _softmax(ctx: NodeContext) -> Runner:
    return _softmax_like(ctx, torch.softmax)


@converter("LogSoftmax")
def _log_softmax(ctx: NodeContext) -> Runner:
    return _softmax_like(ctx, torch.log_softmax)


@converter("Dropout")
def _dropout(ctx: NodeContext) -> Runner:
    if ctx.opset < 12:
        ratio, training = float(ctx.attr("ratio", 0.5)), False
    else:
        ratio = ctx.scalar(1, "ratio", 0.5)
        training = bool(ctx.scalar(2, "training_mode", 0.0))
    want_mask = len(ctx.used) > 1 and ctx.used[1]
    if not training or ratio == 0.0:
        if want_mask:
            return lambda xs: (xs[0], torch.ones_like(xs[0], dtype=torch.bool))
        return lambda xs: (xs[0],)
    if want_mask:
        raise ctx.fail("the mask output of a training-mode Dropout is not supported")
    return lambda xs: (F.dropout(xs[0], ratio, True),)
