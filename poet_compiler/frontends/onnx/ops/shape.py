"""Data-movement and shape ops: constants, Shape arithmetic, reshapes, indexing.

Shape-driven patterns (Shape -> Gather -> Concat -> Reshape, ConstantOfShape, Range...)
resolve at conversion time: their inputs are constants or static shapes, so the frontend
folds them and the runners below receive plain Python ints.
"""

from __future__ import annotations

import math

import torch

from ..context import NodeContext, Runner, converter
from ..dtypes import torch_dtype


@converter("Constant")
def _constant(ctx: NodeContext) -> Runner:
    a = ctx.attrs
    if "value" in a:
        v = a["value"]
    elif "value_float" in a:
        v = torch.tensor(float(a["value_float"]), dtype=torch.float32)
    elif "value_floats" in a:
        v = torch.tensor([float(x) for x in a["value_floats"]], dtype=torch.float32)
    elif "value_int" in a:
        v = torch.tensor(int(a["value_int"]), dtype=torch.int64)
    elif "value_ints" in a:
        v = torch.tensor([int(x) for x in a["value_ints"]], dtype=torch.int64)
    else:
        raise ctx.fail(f"constant kind {sorted(a)} is not supported")
    return lambda xs: (v.clone(),)


@converter("Shape", shape_only=True)
def _shape(ctx: NodeContext) -> Runner:
    shape = ctx.shape(0)
    r = len(shape)
    start = int(ctx.attr("start", 0))
    end = int(ctx.attr("end", r))
    start, end = (start + r if start < 0 else start), (end + r if end < 0 else end)
    dims = list(shape[max(0, min(start, r)) : max(0, min(end, r))])
    ctx.static_inputs.add(0)
    return lambda xs: (torch.tensor(dims, dtype=torch.int64),)


@converter("Size", shape_only=True)
def _size(ctx: NodeContext) -> Runner:
    n = math.prod(ctx.shape(0))
    ctx.static_inputs.add(0)
    return lambda xs: (torch.tensor(n, dtype=torch.int64),)


@converter("ConstantOfShape")
def _constant_of_shape(ctx: NodeContext) -> Runner:
    shape = ctx.ints(0, "shape")
    v = ctx.attr("value")
    value = v.reshape(-1)[0] if v is not None else torch.tensor(0.0)
    return lambda xs: (torch.full(shape, value.item(), dtype=value.dtype),)


@converter("Range")
def _range(ctx: NodeContext) -> Runner:
    vals = [ctx.const(i, w) for i, w in enumerate(("start", "limit", "delta"))]
    dt = vals[0].dtype
    start, limit, delta = (v.item() for v in vals)
    return lambda xs: (torch.arange(start, limit, delta, dtype=dt),)


def _reshape_target(ctx: NodeContext, shape: tuple[int, ...], spec: list[int], allowzero: bool) -> tuple[int, ...]:
    out = [shape[i] if (d == 0 and not allowzero) else d for i, d in enumerate(spec)]
    if out.count(-1) > 1:
        raise ctx.fail(f"shape {spec} has more than one -1")
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        out[out.index(-1)] = math.prod(shape) // known if known else 0
    if math.prod(out) != math.prod(shape):
        raise ctx.fail(f"cannot reshape {list(shape)} to {spec}")
    return tuple(out)


@converter("Reshape")
def _reshape(ctx: NodeContext) -> Runner:
    spec = [int(v) for v in ctx.attr("shape")] if ctx.opset < 5 else ctx.ints(1, "shape")
    target = _reshape_target(ctx, ctx.shape(0), spec, bool(ctx.attr("allowzero", 0)))
    return lambda xs: (xs[0].reshape(target),)


@converter("Flatten")
def _flatten(ctx: NodeContext) -> Runner:
    shape = ctx.shape(0)
    axis = int(ctx.attr("axis", 1))
    axis = axis + len(shape) if axis < 0 else axis
    target = (math.prod(shape[:axis]), math.prod(shape[axis:]))
    if axis == 1 and len(shape) >= 2:
        return lambda xs: (torch.flatten(xs[0], 1),)
    return lambda xs: (xs[0].reshape(target),)


@converter("Transpose")
def _transpose(ctx: NodeContext) -> Runner:
    r = ctx.rank(0)
    perm = [int(p) for p in ctx.attr("perm", list(reversed(range(r))))]
    return lambda xs: (xs[0].permute(perm),)


@converter("Concat")
def _concat(ctx: NodeContext) -> Runner:
    axis = ctx.axis(int(ctx.attr("axis")), ctx.rank(0))
    return lambda xs: (torch.cat([x for x in xs if x is not None], axis),)


@converter("Split")
def _split(ctx: NodeContext) -> Runner:
    shape = ctx.shape(0)
    axis = ctx.axis(int(ctx.attr("axis", 0)), len(shape))
    n_out = len(ctx.node.output)
    sizes = ctx.int_list("split", 1, 13, "split")
    if sizes is None:
        n = int(ctx.attr("num_outputs", n_out))
        chunk = math.ceil(shape[axis] / n)
        sizes = [chunk] * (shape[axis] // chunk) + ([shape[axis] % chunk] if shape[axis] % chunk else [])
    if sum(sizes) != shape[axis] or len(sizes) != n_out:
        raise ctx.fail(f"split sizes {sizes} do not match dimension {shape[axis]} and {n_out} outputs")
    return lambda xs: tuple(torch.split(xs[0], sizes, axis))


def _clamp_slice(start: int, end: int, step: int, dim: int) -> tuple[int, int]:
    """ONNX Slice bounds for one axis, normalized and clamped as the spec says."""
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        return max(0, min(start, dim)), max(0, min(end, dim))
    return max(-1, min(start, dim - 1)), max(-1, min(end, dim - 1))


@converter("Slice")
def _slice(ctx: NodeContext) -> Runner:
    shape = ctx.shape(0)
    r = len(shape)
    if ctx.opset < 10:
        starts, ends = [int(v) for v in ctx.attr("starts")], [int(v) for v in ctx.attr("ends")]
        axes = [int(v) for v in ctx.attr("axes", range(len(starts)))]
        steps = [1] * len(starts)
    else:
        starts, ends = ctx.ints(1, "starts"), ctx.ints(2, "ends")
        axes = ctx.ints(3, "axes") if ctx.has_input(3) else list(range(len(starts)))
        steps = ctx.ints(4, "steps") if ctx.has_input(4) else [1] * len(starts)
    index: list[slice] = [slice(None)] * r
    flips: list[int] = []
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = ctx.axis(a, r)
        if st == 0:
            raise ctx.fail("slice step 0")
        lo, hi = _clamp_slice(s, e, st, shape[a])
        if st > 0:
            index[a] = slice(lo, max(lo, hi), st)
        else:
            # torch has no negative steps: flip the axis; index i there is dim-1-i here.
            n = shape[a]
            flips.append(a)
            fs, fe = n - 1 - lo, n - 1 - hi
            index[a] = slice(fs, max(fs, fe), -st)
    idx = tuple(index)
    if flips:
        return lambda xs: (torch.flip(xs[0], flips)[idx],)
    return lambda xs: (xs[0][idx],)


@converter("Gather")
def _gather(ctx: NodeContext) -> Runner:
    shape = ctx.shape(0)
    axis = ctx.axis(int(ctx.attr("axis", 0)), len(shape))
    if ctx.is_const(1):
        # Runners never capture tensors (the module is traced with fake tensors): a
        # scalar or contiguous constant index becomes select/narrow with Python ints,
        # any other constant index tensor stays a run-time input (a buffer).
        const_idx = ctx.consts[1]
        assert const_idx is not None  # is_const(1)
        idx = const_idx.to(torch.int64)
        idx = torch.where(idx < 0, idx + shape[axis], idx)
        vals = [int(v) for v in idx.reshape(-1).tolist()]
        out_shape = tuple(shape[:axis]) + tuple(idx.shape) + tuple(shape[axis + 1 :])
        if idx.dim() == 0:
            ctx.static_inputs.add(1)
            i = vals[0]
            return lambda xs: (xs[0].select(axis, i),)
        if vals and vals == list(range(vals[0], vals[0] + len(vals))):
            ctx.static_inputs.add(1)
            start, n = vals[0], len(vals)
            return lambda xs: (xs[0].narrow(axis, start, n).reshape(out_shape),)
        size = shape[axis]
        return lambda xs: (
            torch.index_select(xs[0], axis, torch.remainder(xs[1].reshape(-1).to(torch.int64), size)).reshape(
                out_shape
            ),
        )
    if axis == 0 and len(shape) == 2:
        # nn.Embedding exports as Gather(weight, ids): F.embedding is aten.embedding.
        # Run-time indices are taken to be non-negative, as embedding ids are.
        return lambda xs: (torch.nn.functional.embedding(xs[1].to(torch.int64), xs[0]),)
    idx_shape = ctx.shape(1)
    out_shape = tuple(shape[:axis]) + tuple(idx_shape) + tuple(shape[axis + 1 :])
    return lambda xs: (torch.index_select(xs[0], axis, xs[1].reshape(-1).to(torch.int64)).reshape(out_shape),)


@converter("GatherElements")
def _gather_elements(ctx: NodeContext) -> Runner:
    axis = ctx.axis(int(ctx.attr("axis", 0)), ctx.rank(0))
    return lambda xs: (torch.gather(xs[0], axis, xs[1].to(torch.int64)),)


@converter("Unsqueeze")
def _unsqueeze(ctx: NodeContext) -> Runner:
    axes = ctx.int_list("axes", 1, 13, "axes")
    if axes is None:
        raise ctx.fail("axes are missing")
    out_rank = ctx.rank(0) + len(axes)
    norm = sorted(a + out_rank if a < 0 else a for a in axes)

    def run(xs):  # noqa: ANN001, ANN202
        x = xs[0]
        for a in norm:
            x = torch.unsqueeze(x, a)
        return (x,)

    return run


@converter("Squeeze")
def _squeeze(ctx: NodeContext) -> Runner:
    shape = ctx.shape(0)
    axes = ctx.int_list("axes", 1, 13, "axes")
    if axes is None:
        dims = [i for i, d in enumerate(shape) if d == 1]
    else:
        dims = sorted(ctx.axis(a, len(shape)) for a in axes)
        if any(shape[d] != 1 for d in dims):
            raise ctx.fail(f"cannot squeeze axes {axes} of shape {list(shape)}")
    return lambda xs: (torch.squeeze(xs[0], dims) if dims else xs[0],)


@converter("Expand")
def _expand(ctx: NodeContext) -> Runner:
    spec = ctx.ints(1, "shape")
    target = torch.broadcast_shapes(tuple(ctx.shape(0)), tuple(spec))
    return lambda xs: (xs[0].expand(target),)


@converter("Tile")
def _tile(ctx: NodeContext) -> Runner:
    reps = ctx.ints(1, "repeats")
    return lambda xs: (xs[0].repeat(reps),)


@converter("Trilu")
def _trilu(ctx: NodeContext) -> Runner:
    k = int(ctx.scalar(1, "k", 0.0) or 0)
    fn = torch.triu if int(ctx.attr("upper", 1)) else torch.tril
    return lambda xs: (fn(xs[0], k),)


@converter("Pad")
def _pad(ctx: NodeContext) -> Runner:
    r = ctx.rank(0)
    mode = ctx.attr("mode", "constant")
    if ctx.opset < 11:
        pads, value, axes = [int(p) for p in ctx.attr("pads")], float(ctx.attr("value", 0.0)), list(range(r))
    else:
        pads = ctx.ints(1, "pads")
        value = ctx.scalar(2, "constant_value", 0.0) or 0.0
        axes = [ctx.axis(a, r) for a in ctx.ints(3, "axes")] if ctx.has_input(3) else list(range(r))
    n = len(axes)
    full = [0] * (2 * r)
    for j, a in enumerate(axes):
        full[a], full[r + a] = pads[j], pads[n + j]
    explicit: list[int] = []
    for d in reversed(range(r)):
        explicit += [full[d], full[r + d]]
    torch_mode = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}.get(mode)
    if torch_mode is None:
        raise ctx.fail(f"pad mode '{mode}' is not supported")
    # torch pads non-constant modes only on trailing (spatial) dims; trim leading zeros.
    while torch_mode != "constant" and explicit and explicit[-2:] == [0, 0]:
        explicit = explicit[:-2]
    if torch_mode == "constant":
        return lambda xs: (torch.nn.functional.pad(xs[0], explicit, value=value),)
    return lambda xs: (torch.nn.functional.pad(xs[0], explicit, mode=torch_mode),)


@converter("Einsum")
def _einsum(ctx: NodeContext) -> Runner:
    eq = str(ctx.attr("equation"))
    return lambda xs: (torch.einsum(eq, *[x for x in xs if x is not None]),)


@converter("CumSum")
def _cumsum(ctx: NodeContext) -> Runner:
    r = ctx.rank(0)
    axis = ctx.axis(int(ctx.scalar(1, "axis") or 0), r)
    excl, rev = bool(ctx.attr("exclusive", 0)), bool(ctx.attr("reverse", 0))

    def run(xs):  # noqa: ANN001, ANN202
        x = torch.flip(xs[0], [axis]) if rev else xs[0]
        y = torch.cumsum(x, axis)
        if excl:
            y = y - x
        return (torch.flip(y, [axis]) if rev else y,)

    return run


@converter("EyeLike")
def _eye_like(ctx: NodeContext) -> Runner:
    rows, cols = ctx.shape(0)
    k = int(ctx.attr("k", 0))
    dt = torch_dtype(int(ctx.attr("dtype")), ctx.where) if "dtype" in ctx.attrs else ctx.dtype(0)
    ctx.static_inputs.add(0)
    return lambda xs: (torch.ones(rows, cols, dtype=dt).triu(k).tril(k),)
