"""Emitters of the NCHW kernels: convolution, batch norm, pooling (forward and backward).
They read dense tensors (:meth:`~.emitter.Call.dense`) and pass their shapes as constant
structs."""

from __future__ import annotations

from poet_compiler.codegen.emit_c.errors import EmitError
from poet_compiler.codegen.emit_c.layout import Ref
from poet_compiler.codegen.emit_c.ops.emitter import Call, dims, emitter, ints, out_ptr


def _conv_struct(c: Call, x: Ref, w: Ref, y_sizes: tuple[int, ...]) -> str:
    stride, pad, dil = ints(c.arg(3)), ints(c.arg(4)), ints(c.arg(5))
    if c.arg(6):
        raise EmitError(f"{c.label}: transposed convolution has no reference kernel")
    n, cin, h, wd = dims(x)
    cout, _, kh, kw = dims(w)
    _, _, ho, wo = y_sizes
    return c.struct("poet_conv2d_shape", [n, cin, h, wd, cout, ho, wo, kh, kw, *stride, *pad, *dil, int(c.arg(8))])


@emitter("aten.convolution.default")
def _conv(c: Call) -> list[str]:
    x, w, b, y = c.dense(c.ref(0), "input"), c.dense(c.ref(1), "weight"), c.opt(2), c.outs[0]
    assert x is not None and w is not None and y is not None
    s = _conv_struct(c, x, w, y.sizes)
    return [f"poet_conv2d_fwd({s}, {x.ptr()}, {w.ptr()}, {b.ptr() if b else 'NULL'}, {y.ptr()});"]


@emitter("aten.convolution_backward.default")
def _conv_bwd(c: Call) -> list[str]:
    dy, x, w = c.dense(c.ref(0), "output gradient"), c.dense(c.ref(1), "input"), c.dense(c.ref(2), "weight")
    assert dy is not None and x is not None and w is not None
    # convolution_backward's args are shifted by one (bias_sizes at 3): re-pack them
    stride, pad, dil = ints(c.arg(4)), ints(c.arg(5)), ints(c.arg(6))
    if c.arg(7):
        raise EmitError(f"{c.label}: transposed convolution has no reference kernel")
    n, cin, h, wd = dims(x)
    cout, _, kh, kw = dims(w)
    _, _, ho, wo = dy.sizes
    s = c.struct("poet_conv2d_shape", [n, cin, h, wd, cout, ho, wo, kh, kw, *stride, *pad, *dil, int(c.arg(9))])
    mask = list(c.arg(10))
    lines = []
    if mask[0] and c.outs[0] is not None:
        lines.append(f"poet_conv2d_bwd_input({s}, {dy.ptr()}, {w.ptr()}, {c.outs[0].ptr()});")
    if mask[1] and c.outs[1] is not None:
        lines.append(f"poet_conv2d_bwd_weight({s}, {dy.ptr()}, {x.ptr()}, {c.outs[1].ptr()});")
    if len(mask) > 2 and mask[2] and c.outs[2] is not None:
        lines.append(f"poet_conv2d_bwd_bias({s}, {dy.ptr()}, {c.outs[2].ptr()});")
    return lines


def _bn_struct(c: Call, x: Ref, momentum: object, eps: object) -> str:
    if len(x.sizes) not in (2, 3, 4):
        raise EmitError(f"{c.label}: batch norm over a {len(x.sizes)}-d tensor")
    n, ch = x.sizes[0], x.sizes[1]
    hw = 1
    for s in x.sizes[2:]:
        hw *= s
    return c.struct("poet_bn_shape", [n, ch, hw, float(eps), float(momentum or 0.0)])  # type: ignore[arg-type]


@emitter("aten._native_batch_norm_legit_functional.default", "aten.native_batch_norm.default",
         "aten._native_batch_norm_legit.default")
def _bn(c: Call) -> list[str]:
    x = c.dense(c.ref(0), "input")
    assert x is not None
    g, b = c.opt(1), c.opt(2)
    functional = str(c.node.target).startswith("aten._native_batch_norm_legit_functional")
    rm, rv = c.opt(3), c.opt(4)
    if not c.arg(5):
        raise EmitError(f"{c.label}: batch norm in eval mode inside a training step has no reference kernel")
    if (rm is not None or rv is not None) and not functional:
        raise EmitError(f"{c.label}: batch norm that updates its running statistics in place has no reference kernel")
    s = _bn_struct(c, x, c.arg(6), c.arg(7))
    new = (out_ptr(c, 3), out_ptr(c, 4)) if functional else ("NULL", "NULL")
    return [f"poet_batchnorm_fwd_train({s}, {x.ptr()}, {g.ptr() if g else 'NULL'}, {b.ptr() if b else 'NULL'}, "
            f"{out_ptr(c, 0)}, {out_ptr(c, 1)}, {out_ptr(c, 2)}, {rm.ptr() if rm else 'NULL'}, "
            f"{rv.ptr() if rv else 'NULL'}, "
            f"{new[0]}, {new[1]});"]


@emitter("aten.native_batch_norm_backward.default")
def _bn_bwd(c: Call) -> list[str]:
    dy, x = c.dense(c.ref(0), "output gradient"), c.dense(c.ref(1), "input")
    assert dy is not None and x is not None
    g, mean, invstd = c.opt(2), c.opt(5), c.opt(6)
    if not c.arg(7) or mean is None or invstd is None:
        raise EmitError(f"{c.label}: batch norm backward in eval mode has no reference kernel")
    s = _bn_struct(c, x, 0.0, c.arg(8))
    mask = list(c.arg(9))
    outs = [out_ptr(c, e) if mask[e] else "NULL" for e in range(3)]
    return [f"poet_batchnorm_bwd({s}, {dy.ptr()}, {x.ptr()}, {g.ptr() if g else 'NULL'}, {mean.ptr()}, "
            f"{invstd.ptr()}, {outs[0]}, {outs[1]}, {outs[2]});"]


def _pool_struct(c: Call, x: Ref, y_sizes: tuple[int, ...], k: object, stride: object, pad: object,
                 dil: object, ceil: object) -> str:
    n, ch, h, w = dims(x)
    kk = ints(k)
    st = ints(stride) if stride else kk
    if ceil:
        raise EmitError(f"{c.label}: pooling with ceil_mode has no reference kernel")
    return c.struct("poet_pool2d_shape", [n, ch, h, w, y_sizes[2], y_sizes[3], *kk, *st, *ints(pad or 0),
                                          *ints(dil or 1)])


@emitter("aten.max_pool2d_with_indices.default")
def _maxpool(c: Call) -> list[str]:
    x = c.dense(c.ref(0), "input")
    y = c.outs[0]
    assert x is not None and y is not None
    s = _pool_struct(c, x, y.sizes, c.arg(1), c.arg(2), c.arg(3, 0), c.arg(4, 1), c.arg(5, False))
    idx = c.outs[1]
    if idx is None:
        raise EmitError(f"{c.label}: max pooling without its indices output")
    return [f"poet_maxpool2d_fwd({s}, {x.ptr()}, {y.ptr()}, {idx.ptr('int32_t')});"]


@emitter("aten.max_pool2d_with_indices_backward.default")
def _maxpool_bwd(c: Call) -> list[str]:
    dy, x, idx, y = c.dense(c.ref(0), "gradient"), c.dense(c.ref(1), "input"), c.ref(7), c.outs[0]
    assert dy is not None and x is not None and y is not None
    s = _pool_struct(c, x, dy.sizes, c.arg(2), c.arg(3), c.arg(4), c.arg(5), c.arg(6))
    return [f"poet_maxpool2d_bwd({s}, {dy.ptr()}, {idx.ptr('int32_t')}, {y.ptr()});"]


def _avg_check(c: Call, first: int) -> None:
    ceil, include_pad = c.arg(first, False), c.arg(first + 1, True)
    divisor = c.arg(first + 2, None)
    if ceil or not include_pad or divisor is not None:
        raise EmitError(f"{c.label}: average pooling with ceil_mode, count_include_pad=False or a divisor "
                        "override has no reference kernel")


@emitter("aten.avg_pool2d.default")
def _avgpool(c: Call) -> list[str]:
    x, y = c.dense(c.ref(0), "input"), c.outs[0]
    assert x is not None and y is not None
    _avg_check(c, 4)
    s = _pool_struct(c, x, y.sizes, c.arg(1), c.arg(2), c.arg(3, 0), 1, False)
    return [f"poet_avgpool2d_fwd({s}, {x.ptr()}, {y.ptr()});"]


@emitter("aten.avg_pool2d_backward.default")
def _avgpool_bwd(c: Call) -> list[str]:
    dy, x, y = c.dense(c.ref(0), "gradient"), c.dense(c.ref(1), "input"), c.outs[0]
    assert dy is not None and x is not None and y is not None
    _avg_check(c, 5)
    s = _pool_struct(c, x, dy.sizes, c.arg(2), c.arg(3), c.arg(4), 1, False)
    return [f"poet_avgpool2d_bwd({s}, {dy.ptr()}, {y.ptr()});"]
