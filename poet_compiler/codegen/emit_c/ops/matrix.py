"""Emitters of reductions, matrix products, softmax and the NLL loss (forward and backward)."""

from __future__ import annotations

from poet_compiler.codegen.emit_c.errors import EmitError
from poet_compiler.codegen.emit_c.layout import Ref
from poet_compiler.codegen.emit_c.ops.emitter import Call, broadcast_strides, c_float, emitter, i32_list, out_ptr


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
    return [f"poet_reduce_sum({nd}, {i32_list(x.sizes)}, {x.ptr()}, {i32_list(x.strides)}, {mask}u, "
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
        bs = broadcast_strides(bias, (m, n))
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
            f"{int(c.arg(3))}, {out_ptr(c, 0)}, {out_ptr(c, 1)});"]


@emitter("aten.nll_loss_backward.default")
def _nll_bwd(c: Call) -> list[str]:
    g, logp, target, tw, y = c.ref(0), c.ref(1), c.ref(2), c.ref(6), c.outs[0]
    assert y is not None
    rows, cols = _nll_check(c, logp, c.opt(3))
    return [f"poet_nll_loss_bwd({rows}, {cols}, {g.ptr()}, {target.ptr('int32_t')}, {int(c.arg(5))}, "
            f"{int(c.arg(4))}, {tw.ptr()}, {y.ptr()});"]
