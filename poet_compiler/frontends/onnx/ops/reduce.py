"""Reductions: Reduce* (axes as attribute or, from opset 13/18, as input), ArgMax/ArgMin."""

from __future__ import annotations

import torch

from ..context import NodeContext, Runner, converter

# ReduceSum took its axes as an input from opset 13; the others from opset 18.
_AXES_INPUT_SINCE = {"ReduceSum": 13}


def _axes(ctx: NodeContext) -> list[int]:
    r = ctx.rank(0)
    axes = ctx.int_list("axes", 1, _AXES_INPUT_SINCE.get(ctx.node.op_type, 18), "axes")
    if not axes:
        if axes is not None or ctx.attr("noop_with_empty_axes", 0):
            return [] if ctx.attr("noop_with_empty_axes", 0) else list(range(r))
        return list(range(r))
    return sorted(ctx.axis(a, r) for a in axes)


_REDUCERS = {
    "ReduceMean": lambda x, d, k: torch.mean(x, d, keepdim=k),
    "ReduceSum": lambda x, d, k: torch.sum(x, d, keepdim=k),
    "ReduceMax": lambda x, d, k: torch.amax(x, d, keepdim=k),
    "ReduceMin": lambda x, d, k: torch.amin(x, d, keepdim=k),
    "ReduceProd": lambda x, d, k: _prod(x, d, k),
    "ReduceSumSquare": lambda x, d, k: torch.sum(x * x, d, keepdim=k),
    "ReduceL1": lambda x, d, k: torch.sum(torch.abs(x), d, keepdim=k),
    "ReduceL2": lambda x, d, k: torch.sqrt(torch.sum(x * x, d, keepdim=k)),
    "ReduceLogSumExp": lambda x, d, k: torch.logsumexp(x, d, keepdim=k),
    "ReduceLogSum": lambda x, d, k: torch.log(torch.sum(x, d, keepdim=k)),
}


def _prod(x: torch.Tensor, dims: list[int], keep: bool) -> torch.Tensor:
    for d in sorted(dims, reverse=True):
        x = torch.prod(x, d, keepdim=keep)
    return x


@converter(*_REDUCERS)
def _reduce(ctx: NodeContext) -> Runner:
    dims = _axes(ctx)
    keep = bool(ctx.attr("keepdims", 1))
    fn = _REDUCERS[ctx.node.op_type]
    if not dims:
        return lambda xs: (xs[0],)
    return lambda xs: (fn(xs[0], dims, keep),)


@converter("ArgMax", "ArgMin")
def _arg(ctx: NodeContext) -> Runner:
    axis = ctx.axis(int(ctx.attr("axis", 0)), ctx.rank(0))
    keep = bool(ctx.attr("keepdims", 1))
    if ctx.attr("select_last_index", 0):
        raise ctx.fail("select_last_index=1 is not supported")
    fn = torch.argmax if ctx.node.op_type == "ArgMax" else torch.argmin
    return lambda xs: (fn(xs[0], axis, keep),)
