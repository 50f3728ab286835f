"""One emitter per aten op: the C statements that run it with the reference kernels.

An emitter gets a :class:`Call` (the FX node, the Refs of its tensor arguments and of
its outputs, a place for constant attribute structs) and returns C statements. An op
without an emitter has no reference kernel: :func:`emit_op` raises
:class:`~.errors.EmitError` naming it. Shapes are checked here, at generation time, so
the device never meets a case the kernels do not handle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from poet_compiler.codegen.emit_c.errors import EmitError
from poet_compiler.codegen.emit_c.layout import Ref, fx_val
from poet_compiler.frontends.torch.opinfo import packet_name


@dataclass
class Call:
    """What an emitter needs about one op."""

    node: torch.fx.Node
    refs: dict[str, Ref]
    outs: list[Ref | None]
    sched_id: int
    structs: list[str] = field(default_factory=list)  # static const definitions this op needs

    def ref(self, i: int) -> Ref:
        a = self.node.args[i]
        if not isinstance(a, torch.fx.Node) or a.name not in self.refs:
            raise EmitError(f"{self.label}: argument {i} is not a tensor the device holds")
        return self.refs[a.name]

    def opt(self, i: int) -> Ref | None:
        a = self.node.args[i] if i < len(self.node.args) else None
        return self.ref(i) if isinstance(a, torch.fx.Node) else None

    def arg(self, i: int, default: Any = None) -> Any:
        """Argument ``i`` of the call (positional or by its schema name): FX arguments are untyped."""
        if i < len(self.node.args):
            return self.node.args[i]
        return self.node.kwargs.get(_schema_name(self.node, i), default)

    @property
    def label(self) -> str:
        return f"node {self.sched_id} ({packet_name(self.node.target)})"

    def dense(self, ref: Ref | None, what: str) -> Ref | None:
        """``ref``, checked contiguous (conv, batch norm and pooling read dense NCHW)."""
        if ref is not None and not ref.contiguous():
            raise EmitError(f"{self.label}: {what} is a strided view; the reference kernel needs it contiguous")
        return ref

    def struct(self, ctype: str, fields: list[int | float]) -> str:
        name = f"attr_{self.sched_id}_{len(self.structs)}"
        body = ", ".join(_c_number(v) for v in fields)
        self.structs.append(f"static const {ctype} {name} = {{{body}}};")
        return f"&{name}"


def _schema_name(node: torch.fx.Node, i: int) -> str:
    schema = getattr(node.target, "_schema", None)
    return schema.arguments[i].name if schema is not None and i < len(schema.arguments) else ""


def _c_number(v: int | float) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    return c_float(v)


def c_float(v: float) -> str:
    """A float32 literal that round-trips exactly (9 significant digits)."""
    f = float(torch.tensor(v, dtype=torch.float32).item())
    if f != f or f in (float("inf"), float("-inf")):
        raise EmitError(f"non-finite constant {v}")
    text = f"{f:.9g}"
    if "e" not in text and "." not in text:
        text += ".0"
    return text + "f"


def _ints(v: Any, n: int = 2) -> list[int]:
    if isinstance(v, int):
        return [v] * n
    vals = [int(x) for x in v]
    return vals * n if len(vals) == 1 else vals


def _dims(r: Ref) -> tuple[int, int, int, int]:
    if len(r.sizes) != 4:
        raise EmitError(f"expected an NCHW tensor, got sizes {r.sizes}")
    n, c, h, w = r.sizes
    return n, c, h, w


def _i32_list(vals: tuple[int, ...] | list[int]) -> str:
    return "(const int32_t[]){" + ", ".join(str(v) for v in (list(vals) or [0])) + "}"


def _broadcast_strides(r: Ref, out_sizes: tuple[int, ...]) -> tuple[int, ...]:
    """``r``'s element strides over ``out_sizes`` (right-aligned; stride 0 where it broadcasts)."""
    pad = len(out_sizes) - len(r.sizes)
    if pad < 0:
        raise EmitError(f"cannot broadcast sizes {r.sizes} to {out_sizes}")
    strides = []
    for d, size in enumerate(out_sizes):
        k = d - pad
        if k < 0 or r.sizes[k] == 1:
            strides.append(0)
        elif r.sizes[k] == size:
            strides.append(r.strides[k])
        else:
            raise EmitError(f"cannot broadcast sizes {r.sizes} to {out_sizes}")
    return tuple(strides)


def ewise(code: str, y: Ref, a: Ref | None, b: Ref | None, scalar: float | int = 0.0) -> str:
    """A poet_ewise call writing the contiguous ``y``."""
    if len(y.sizes) > 4:
        raise EmitError(f"element-wise op on a {len(y.sizes)}-d tensor (the kernels handle up to 4)")
    sa = _i32_list(_broadcast_strides(a, y.sizes)) if a is not None else "NULL"
    sb = _i32_list(_broadcast_strides(b, y.sizes)) if b is not None else "NULL"
    return (f"poet_ewise({code}, {len(y.sizes)}, {_i32_list(y.sizes)}, {y.ptr()}, "
            f"{a.ptr() if a else 'NULL'}, {sa}, {b.ptr() if b else 'NULL'}, {sb}, {c_float(float(scalar))});")


Emitter = Callable[[Call], list[str]]
EMITTERS: dict[str, Emitter] = {}


def emitter(*targets: str) -> Callable[[Emitter], Emitter]:
    def deco(fn: Emitter) -> Emitter:
        for t in targets:
            EMITTERS[t] = fn
        return fn
    return deco


def _conv_struct(c: Call, x: Ref, w: Ref, y_sizes: tuple[int, ...]) -> str:
    stride, pad, dil = _ints(c.arg(3)), _ints(c.arg(4)), _ints(c.arg(5))
    if c.arg(6):
        raise EmitError(f"{c.label}: transposed convolution has no reference kernel")
    n, cin, h, wd = _dims(x)
    cout, _, kh, kw = _dims(w)
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
    stride, pad, dil = _ints(c.arg(4)), _ints(c.arg(5)), _ints(c.arg(6))
    if c.arg(7):
        raise EmitError(f"{c.label}: transposed convolution has no reference kernel")
    n, cin, h, wd = _dims(x)
    cout, _, kh, kw = _dims(w)
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


def _out(c: Call, e: int) -> str:
    r = c.outs[e] if e < len(c.outs) else None
    return r.ptr() if r is not None else "NULL"


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
    new = (_out(c, 3), _out(c, 4)) if functional else ("NULL", "NULL")
    return [f"poet_batchnorm_fwd_train({s}, {x.ptr()}, {g.ptr() if g else 'NULL'}, {b.ptr() if b else 'NULL'}, "
            f"{_out(c, 0)}, {_out(c, 1)}, {_out(c, 2)}, {rm.ptr() if rm else 'NULL'}, {rv.ptr() if rv else 'NULL'}, "
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
    outs = [_out(c, e) if mask[e] else "NULL" for e in range(3)]
    return [f"poet_batchnorm_bwd({s}, {dy.ptr()}, {x.ptr()}, {g.ptr() if g else 'NULL'}, {mean.ptr()}, "
            f"{invstd.ptr()}, {outs[0]}, {outs[1]}, {outs[2]});"]


@emitter("aten.relu.default")
def _relu(c: Call) -> list[str]:
    x, y = c.dense(c.ref(0), "input"), c.outs[0]
    assert x is not None and y is not None
    return [f"poet_relu_fwd({y.numel}, {x.ptr()}, {y.ptr()});"]


@emitter("aten.threshold_backward.default")
def _threshold_bwd(c: Call) -> list[str]:
    dy, x, y = c.dense(c.ref(0), "gradient"), c.dense(c.ref(1), "input"), c.outs[0]
    assert dy is not None and x is not None and y is not None
    return [f"poet_threshold_bwd({y.numel}, {dy.ptr()}, {x.ptr()}, {c_float(float(c.arg(2)))}, {y.ptr()});"]


@emitter("aten.hardtanh.default")
def _hardtanh(c: Call) -> list[str]:
    x, y = c.dense(c.ref(0), "input"), c.outs[0]
    assert x is not None and y is not None
    lo, hi = float(c.arg(1, -1.0)), float(c.arg(2, 1.0))
    return [f"poet_hardtanh_fwd({y.numel}, {x.ptr()}, {c_float(lo)}, {c_float(hi)}, {y.ptr()});"]


@emitter("aten.hardtanh_backward.default")
def _hardtanh_bwd(c: Call) -> list[str]:
    dy, x, y = c.dense(c.ref(0), "gradient"), c.dense(c.ref(1), "input"), c.outs[0]
    assert dy is not None and x is not None and y is not None
    lo, hi = float(c.arg(2)), float(c.arg(3))
    return [f"poet_hardtanh_bwd({y.numel}, {dy.ptr()}, {x.ptr()}, {c_float(lo)}, {c_float(hi)}, {y.ptr()});"]


def _pool_struct(c: Call, x: Ref, y_sizes: tuple[int, ...], k: object, stride: object, pad: object,
                 dil: object, ceil: object) -> str:
    n, ch, h, w = _dims(x)
    kk = _ints(k)
    st = _ints(stride) if stride else kk
    if ceil:
        raise EmitError(f"{c.label}: pooling with ceil_mode has no reference kernel")
    return c.struct("poet_pool2d_shape", [n, ch, h, w, y_sizes[2], y_sizes[3], *kk, *st, *_ints(pad or 0),
                                          *_ints(dil or 1)])


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


def _reduce(c: Call, divide: bool) -> list[str]:
    x, y = c.ref(0), c.outs[0]
    assert y is not None
    nd = len(x.sizes)
    if nd > 4:
        raise EmitError(f"{c.label}: reduction over a {nd}-d tensor")
    dims = c.arg(1)
    dims = list(range(nd)) if dims is None or dims == [] else [int(d) % nd for d in dims]
    if c.arg(3, None) is not None:
        raise EmitError(f"{c.label}: reduction with a dtype argument has no reference kernel")
    count = 1
    for d in dims:
        count *= x.sizes[d]
    mask = sum(1 << d for d in dims)
    return [f"poet_reduce_sum({nd}, {_i32_list(x.sizes)}, {x.ptr()}, {_i32_list(x.strides)}, {mask}u, "
            f"{c_float(float(count if divide else 1))}, {y.ptr()});"]


@emitter("aten.mean.dim")
def _mean(c: Call) -> list[str]:
    return _reduce(c, divide=True)


@emitter("aten.sum.dim_IntList")
def _sum(c: Call) -> list[str]:
    return _reduce(c, divide=False)


def _matmul(c: Call, a: Ref, b: Ref, bias: Ref | None, beta: float, alpha: float) -> list[str]:
    y = c.outs[0]
    assert y is not None
    if len(a.sizes) != 2 or len(b.sizes) != 2:
        raise EmitError(f"{c.label}: matrix product of non-2-d operands")
    (m, k), (_, n) = a.sizes, b.sizes
    if bias is not None:
        bs = _broadcast_strides(bias, (m, n))
        cexpr = f"{bias.ptr()}, {bs[0]}, {bs[1]}"
    else:
        cexpr = "NULL, 0, 0"
    return [f"poet_matmul({m}, {k}, {n}, {a.ptr()}, {a.strides[0]}, {a.strides[1]}, {b.ptr()}, {b.strides[0]}, "
            f"{b.strides[1]}, {cexpr}, {c_float(beta)}, {c_float(alpha)}, {y.ptr()});"]


@emitter("aten.mm.default")
def _mm(c: Call) -> list[str]:
    return _matmul(c, c.ref(0), c.ref(1), None, 0.0, 1.0)


@emitter("aten.addmm.default")
def _addmm(c: Call) -> list[str]:
    return _matmul(c, c.ref(1), c.ref(2), c.ref(0), float(c.arg(3, 1)), float(c.arg(4, 1)))


def _rows_cols(c: Call, x: Ref, dim: object) -> tuple[int, int]:
    nd = len(x.sizes)
    if int(dim) % nd != nd - 1:  # type: ignore[call-overload]
        raise EmitError(f"{c.label}: softmax over a dimension other than the last")
    cols = x.sizes[-1]
    return x.numel // max(cols, 1), cols


@emitter("aten._log_softmax.default", "aten._softmax.default")
def _softmax(c: Call) -> list[str]:
    x, y = c.dense(c.ref(0), "input"), c.outs[0]
    assert x is not None and y is not None
    rows, cols = _rows_cols(c, x, c.arg(1))
    fn = "poet_log_softmax_fwd" if "log" in str(c.node.target) else "poet_softmax_fwd"
    return [f"{fn}({rows}, {cols}, {x.ptr()}, {y.ptr()});"]


@emitter("aten._log_softmax_backward_data.default", "aten._softmax_backward_data.default")
def _softmax_bwd(c: Call) -> list[str]:
    dy, out, y = c.dense(c.ref(0), "gradient"), c.dense(c.ref(1), "output"), c.outs[0]
    assert dy is not None and out is not None and y is not None
    rows, cols = _rows_cols(c, out, c.arg(2))
    fn = "poet_log_softmax_bwd" if "log" in str(c.node.target) else "poet_softmax_bwd"
    return [f"{fn}({rows}, {cols}, {dy.ptr()}, {out.ptr()}, {y.ptr()});"]


def _nll_check(c: Call, logp: Ref, weight: Ref | None) -> tuple[int, int]:
    if weight is not None:
        raise EmitError(f"{c.label}: class-weighted NLL loss has no reference kernel")
    if len(logp.sizes) != 2:
        raise EmitError(f"{c.label}: NLL loss over a {len(logp.sizes)}-d input (the kernel takes rows x classes)")
    return logp.sizes[0], logp.sizes[1]


@emitter("aten.nll_loss_forward.default")
def _nll(c: Call) -> list[str]:
    logp, target = c.dense(c.ref(0), "input"), c.ref(1)
    assert logp is not None
    rows, cols = _nll_check(c, logp, c.opt(2))
    return [f"poet_nll_loss_fwd({rows}, {cols}, {logp.ptr()}, {target.ptr('int32_t')}, {int(c.arg(4))}, "
            f"{int(c.arg(3))}, {_out(c, 0)}, {_out(c, 1)});"]


@emitter("aten.nll_loss_backward.default")
def _nll_bwd(c: Call) -> list[str]:
    g, logp, target, tw, y = c.ref(0), c.ref(1), c.ref(2), c.ref(6), c.outs[0]
    assert y is not None
    rows, cols = _nll_check(c, logp, c.opt(3))
    return [f"poet_nll_loss_bwd({rows}, {cols}, {g.ptr()}, {target.ptr('int32_t')}, {int(c.arg(5))}, "
            f"{int(c.arg(4))}, {tw.ptr()}, {y.ptr()});"]


@emitter("aten.ones_like.default", "aten.zeros_like.default")
def _fill_like(c: Call) -> list[str]:
    y = c.outs[0]
    assert y is not None
    return [ewise("POET_EW_FILL", y, None, None, 1.0 if "ones" in str(c.node.target) else 0.0)]


@emitter("aten.clone.default", "aten.copy.default", "aten._to_copy.default")
def _copy(c: Call) -> list[str]:
    y = c.outs[0]
    assert y is not None
    src = c.ref(1) if "aten.copy." in str(c.node.target) else c.ref(0)
    if src.dtype != y.dtype:
        raise EmitError(f"{c.label}: dtype conversion has no reference kernel")
    return [ewise("POET_EW_COPY", y, src, None)]


_BINARY = {"add": "POET_EW_ADD", "sub": "POET_EW_SUB", "mul": "POET_EW_MUL", "div": "POET_EW_DIV"}
_SCALAR = {"add": "POET_EW_ADD_SCALAR", "mul": "POET_EW_MUL_SCALAR", "div": "POET_EW_DIV_SCALAR"}


@emitter(*(f"aten.{op}.{ov}" for op in ("add", "sub", "mul", "div") for ov in ("Tensor", "Scalar")))
def _binary(c: Call) -> list[str]:
    op = packet_name(c.node.target).split(".", 1)[1]
    y = c.outs[0]
    assert y is not None
    if str(c.node.target).endswith(".div.Tensor") and c.node.kwargs.get("rounding_mode"):
        raise EmitError(f"{c.label}: division with a rounding mode has no reference kernel")
    a = c.ref(0)
    other = c.node.args[1]
    alpha = float(c.node.kwargs.get("alpha", c.arg(2, 1) if op in ("add", "sub") else 1))  # type: ignore[arg-type]
    if isinstance(other, torch.fx.Node):
        return [ewise(_BINARY[op], y, a, c.ref(1), alpha)]
    value = float(other) * (alpha if op in ("add", "sub") else 1.0)  # type: ignore[arg-type]
    if op == "sub":
        return [ewise("POET_EW_ADD_SCALAR", y, a, None, -value)]
    return [ewise(_SCALAR[op], y, a, None, value)]


def _update_refs(c: Call, n_state: int) -> tuple[Ref, Ref, list[Ref]]:
    """Parameter, gradient and state of an update op (docs/training.md); the gradient is
    read dense, the parameter and state are the static arrays it overwrites."""
    param, grad = c.dense(c.ref(0), "parameter"), c.dense(c.ref(1), "gradient")
    state = [c.dense(c.ref(2 + k), "optimizer state") for k in range(n_state)]
    assert param is not None and grad is not None
    if param.sizes != grad.sizes:
        raise EmitError(f"{c.label}: gradient sizes {grad.sizes} differ from the parameter's {param.sizes}")
    return param, grad, [s for s in state if s is not None]


@emitter("poet.sgd.default")
def _sgd(c: Call) -> list[str]:
    p, g, _ = _update_refs(c, 0)
    return [f"poet_sgd({p.numel}, {p.ptr()}, {g.ptr()}, {c_float(float(c.arg(2)))}, {c_float(float(c.arg(3)))});"]


@emitter("poet.sgd_momentum.default")
def _sgd_momentum(c: Call) -> list[str]:
    p, g, (buf,) = _update_refs(c, 1)
    attr = c.struct("poet_sgd_attr", [float(c.arg(3)), float(c.arg(4)), float(c.arg(5)), int(bool(c.arg(6)))])
    return [f"poet_sgd_momentum({p.numel}, {p.ptr()}, {g.ptr()}, {buf.ptr()}, {attr});"]


@emitter("poet.adam.default")
def _adam(c: Call) -> list[str]:
    p, g, (m, v, step) = _update_refs(c, 3)
    # lr, betas and weight decay stay doubles: the bias corrections are computed in double.
    doubles = ", ".join(repr(float(c.arg(k))) for k in (5, 6, 7, 9))
    name = f"attr_{c.sched_id}_{len(c.structs)}"
    c.structs.append(f"static const poet_adam_attr {name} = {{{doubles}, {c_float(float(c.arg(8)))}, "
                     f"{int(bool(c.arg(10)))}}};")
    return [f"poet_adam({p.numel}, {p.ptr()}, {g.ptr()}, {m.ptr()}, {v.ptr()}, {step.ptr()}, &{name});"]


def emit_op(call: Call) -> list[str]:
    """C statements for ``call``, or EmitError naming the op that has no kernel."""
    key = str(call.node.target)
    fn = EMITTERS.get(key)
    if fn is None:
        raise EmitError(
            f"no reference kernel for op {key} (node {call.sched_id}, {call.node.name}); "
            f"emit-c supports {len({k.rsplit('.', 1)[0] for k in EMITTERS})} ops: see runtime/c/kernels/README.md"
        )
    val = fx_val(call.node)
    for t in val if isinstance(val, (list, tuple)) else [val]:
        if isinstance(t, torch.Tensor) and t.dtype not in (torch.float32, torch.int64):
            raise EmitError(f"{call.label}: dtype {t.dtype} has no reference kernel (float32 only)")
    return fn(call)
