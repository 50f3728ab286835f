"""Elementwise ops: arithmetic, comparisons, logic and activations (numpy broadcasting,
which torch shares)."""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce

import torch
import torch.nn.functional as F

from ..context import NodeContext, Runner, converter
from ..dtypes import torch_dtype


def _unary(fn: Callable[[torch.Tensor], torch.Tensor]) -> Runner:
    return lambda xs: (fn(xs[0]),)


def _binary(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Runner:
    return lambda xs: (fn(xs[0], xs[1]),)


_UNARY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "Relu": torch.relu,
    "Sigmoid": torch.sigmoid,
    "Tanh": torch.tanh,
    "Erf": torch.erf,
    "Exp": torch.exp,
    "Log": torch.log,
    "Sqrt": torch.sqrt,
    "Reciprocal": torch.reciprocal,
    "Neg": torch.neg,
    "Abs": torch.abs,
    "Floor": torch.floor,
    "Ceil": torch.ceil,
    "Round": torch.round,
    "Sign": torch.sign,
    "Sin": torch.sin,
    "Cos": torch.cos,
    "Tan": torch.tan,
    "Not": torch.logical_not,
    "Softsign": F.softsign,
    "Mish": F.mish,
    "HardSwish": F.hardswish,
    "IsNaN": torch.isnan,
}

_BINARY: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "Add": torch.add,
    "Sub": torch.sub,
    "Mul": torch.mul,
    "Equal": torch.eq,
    "Less": torch.lt,
    "LessOrEqual": torch.le,
    "Greater": torch.gt,
    "GreaterOrEqual": torch.ge,
    "And": torch.logical_and,
    "Or": torch.logical_or,
    "Xor": torch.logical_xor,
    "BitShift": torch.bitwise_left_shift,
}


@converter(*_UNARY)
def _conv_unary(ctx: NodeContext) -> Runner:
    return _unary(_UNARY[ctx.node.op_type])


@converter(*_BINARY)
def _conv_binary(ctx: NodeContext) -> Runner:
    if ctx.node.op_type == "BitShift" and ctx.attr("direction") == "RIGHT":
        return _binary(torch.bitwise_right_shift)
    return _binary(_BINARY[ctx.node.op_type])


@converter("Div")
def _div(ctx: NodeContext) -> Runner:
    if ctx.dtype(0).is_floating_point:
        return _binary(torch.div)
    # ONNX integer division truncates toward zero, like C.
    return _binary(lambda a, b: torch.div(a, b, rounding_mode="trunc"))


@converter("Mod")
def _mod(ctx: NodeContext) -> Runner:
    return _binary(torch.fmod if ctx.attr("fmod", 0) else torch.remainder)


@converter("Pow")
def _pow(ctx: NodeContext) -> Runner:
    if ctx.is_const(1) and ctx.const(1, "exponent").numel() == 1:
        # A scalar exponent stays a Python number: torch.pow(x, 2.0) is one aten op
        # with no extra tensor input, as PyTorch code writes it.
        exponent = ctx.consts[1]
        assert exponent is not None  # is_const(1)
        e = float(exponent.reshape(-1)[0].item())
        e_num: float | int = int(e) if e.is_integer() else e
        return _unary(lambda x: torch.pow(x, e_num))
    return _binary(lambda a, b: torch.pow(a, b).to(a.dtype))


@converter("Identity")
def _identity(ctx: NodeContext) -> Runner:
    return lambda xs: (xs[0],)


@converter("Cast")
def _cast(ctx: NodeContext) -> Runner:
    dt = torch_dtype(int(ctx.attr("to")), ctx.where)
    return _unary(lambda x: x.to(dt))


@converter("CastLike")
def _cast_like(ctx: NodeContext) -> Runner:
    dt = ctx.dtype(1)
    ctx.static_inputs.add(1)
    return _unary(lambda x: x.to(dt))


@converter("Where")
def _where(ctx: NodeContext) -> Runner:
    return lambda xs: (torch.where(xs[0], xs[1], xs[2]),)


def _variadic(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Runner:
    return lambda xs: (reduce(fn, [x for x in xs if x is not None]),)


@converter("Max")
def _max(ctx: NodeContext) -> Runner:
    return _variadic(torch.maximum)


@converter("Min")
def _min(ctx: NodeContext) -> Runner:
    return _variadic(torch.minimum)


@converter("Sum")
def _sum(ctx: NodeContext) -> Runner:
    return _variadic(torch.add)


@converter("Mean")
def _mean(ctx: NodeContext) -> Runner:
    n = sum(1 for i in range(ctx.n_inputs) if ctx.has_input(i))
    return lambda xs: (reduce(torch.add, [x for x in xs if x is not None]) / n,)


@converter("Clip")
def _clip(ctx: NodeContext) -> Runner:
    if ctx.opset < 11:
        lo, hi = ctx.attr("min"), ctx.attr("max")
    else:
        lo = ctx.scalar(1, "min")
        hi = ctx.scalar(2, "max")
    if lo == 0.0 and hi == 6.0:
        return _unary(F.relu6)  # ReLU6, as nn.ReLU6 writes it (one hardtanh op)
    if lo is not None and hi is not None:
        return _unary(lambda x: torch.clamp(x, lo, hi))
    if lo is not None:
        return _unary(lambda x: torch.clamp_min(x, lo))
    if hi is not None:
        return _unary(lambda x: torch.clamp_max(x, hi))
    return lambda xs: (xs[0],)


@converter("LeakyRelu")
def _leaky(ctx: NodeContext) -> Runner:
    alpha = float(ctx.attr("alpha", 0.01))
    return _unary(lambda x: F.leaky_relu(x, alpha))


@converter("Elu")
def _elu(ctx: NodeContext) -> Runner:
    alpha = float(ctx.attr("alpha", 1.0))
    return _unary(lambda x: F.elu(x, alpha))


@converter("Selu")
def _selu(ctx: NodeContext) -> Runner:
    alpha, gamma = (
        float(ctx.attr("alpha", 1.67326319217681884765625)),
        float(ctx.attr("gamma", 1.05070102214813232421875)),
    )
    return _unary(lambda x: gamma * torch.where(x > 0, x, alpha * (torch.exp(x) - 1)))


@converter("Softplus")
def _softplus(ctx: NodeContext) -> Runner:
    return _unary(F.softplus)


@converter("HardSigmoid")
def _hardsigmoid(ctx: NodeContext) -> Runner:
    alpha, beta = float(ctx.attr("alpha", 0.2)), float(ctx.attr("beta", 0.5))
    if abs(alpha - 1 / 6) < 1e-7 and beta == 0.5:
        return _unary(F.hardsigmoid)
    return _unary(lambda x: torch.clamp(alpha * x + beta, 0.0, 1.0))


@converter("PRelu")
def _prelu(ctx: NodeContext) -> Runner:
    return _binary(lambda x, s: torch.where(x >= 0, x, x * s))


@converter("Gelu")
def _gelu(ctx: NodeContext) -> Runner:
    approx = ctx.attr("approximate", "none")
    if approx not in ("none", "tanh"):
        raise ctx.fail(f"approximate='{approx}' is not one of none, tanh")
    return _unary(lambda x: F.gelu(x, approximate=approx))
