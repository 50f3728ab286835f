"""Emitters of element-wise ops: activations and their backward, fills and copies, the
four arithmetic ops (tensor or scalar operand)."""

from __future__ import annotations

import torch
import torch.fx

from poet_compiler.codegen.emit_c.errors import EmitError
from poet_compiler.codegen.emit_c.ops.emitter import Call, c_float, emitter, ewise
from poet_compiler.frontends.torch.opinfo import packet_name


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
