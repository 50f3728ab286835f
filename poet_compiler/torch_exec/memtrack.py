"""Peak memory of a training step, measured from the CPU allocator.

:func:`measure` runs a callable under ``torch.profiler`` with ``profile_memory=True``: the
c10 CPU allocator then reports every allocation and free, eager ops, the autograd
engine's buffers and ``torch.compile``'s generated code alike (Inductor allocates through
the same allocator). The figure is the peak of the bytes allocated since the call began
and still live: the step's own memory, with the parameters, buffers and the batch, which
existed before, left out. The parameters' gradients are left out too (they are not
activations): the buffer each gradient arrives in (a hook on every parameter marks it in
the profile, so a compiled backward that returns them all at once is handled as eager's
one by one), and the ``.grad`` storages live at the end. Only those allocations are left
out, not others that reused their addresses.

:func:`kernel_slack` is the allowance the figure needs over the simulator's peak: the
most bytes any single op allocates beyond what it leaves behind (oneDNN reorders, im2col
and reduction buffers inside a convolution or its backward). The simulator models a
node's outputs and its transient outputs, not the kernel's private scratch; ops run one
at a time, so at any instant the measured bytes exceed the modelled ones by at most one
op's scratch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Measured:
    peak_bytes: int           # most step bytes live at once (gradients left out)
    end_bytes: int            # step bytes still live when the callable returned
    slack_bytes: int          # the most any single ATen op allocated beyond what it left behind
    n_events: int


_MARK = "poetc.grad "


def _events(prof: Any) -> list[tuple[int, int, int, int]]:
    """(time ns, +/- bytes, address, index of the ATen op it happened in or -1), in time
    order; a gradient mark (:data:`_MARK`) is ``(time, 0, address, -2)``. The op is the
    outermost ``aten::`` event above the allocation (a backward node's kernel, a
    recomputed op)."""
    from torch._C._profiler import _EventType

    out: list[tuple[int, int, int, int]] = []
    ops = 0

    def walk(node: Any, op: int) -> None:
        nonlocal ops
        if node.tag == _EventType.Allocation:
            a = node.extra_fields
            out.append((node.start_time_ns, int(a.alloc_size), int(a.ptr), op))
            return
        if node.name.startswith(_MARK):
            out.append((node.start_time_ns, 0, int(node.name[len(_MARK):]), -2))
            return
        here = op
        if op < 0 and node.tag == _EventType.TorchOp and node.name.startswith("aten::"):
            here = ops
            ops += 1
        for child in node.children:
            walk(child, here)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root, -1)
    out.sort(key=lambda e: (e[0], e[3] == -2))
    return out


def _mark(grad: torch.Tensor) -> None:
    with torch.profiler.record_function(f"{_MARK}{grad.untyped_storage().data_ptr()}"):
        pass


def measure(fn: Callable[[], Any], exclude: Callable[[], Iterable[torch.Tensor]] = tuple,
            params: Iterable[torch.Tensor] = ()) -> tuple[Any, Measured]:
    """Run ``fn()`` once under the profiler; return its result and the measurement.
    ``params``: the parameters whose gradients are left out; ``exclude()`` (called after
    ``fn``) names further tensors whose storages, live at the end, are not step memory
    (the parameters' ``.grad``)."""
    from torch.profiler import ProfilerActivity, profile

    hooks = [p.register_hook(_mark) for p in params if p.requires_grad]
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=False) as prof:
            result = fn()
    finally:
        for h in hooks:
            h.remove()
    at_end = {t.untyped_storage().data_ptr() for t in exclude() if t is not None}
    events = _events(prof)
    # First pass: which allocation (by its event index) each gradient is.
    live: dict[int, int] = {}          # address -> index of the allocation live there
    gradient: set[int] = set()
    for k, (_, size, ptr, op) in enumerate(events):
        if op == -2:
            if ptr in live:
                gradient.add(live[ptr])
        elif size > 0:
            live[ptr] = k
        else:
            live.pop(ptr, None)
    gradient |= {k for ptr, k in live.items() if ptr in at_end}
    # Second pass: the peak of the rest.
    sizes: dict[int, int] = {}
    cur = peak = 0
    for k, (_, size, ptr, op) in enumerate(events):
        if op == -2:
            continue
        if size > 0:
            if k in gradient:
                continue
            sizes[ptr] = size
            cur += size
        else:
            got = sizes.pop(ptr, None)
            if got is None:
                continue           # allocated before the step, or a gradient: not counted
            cur -= got
        peak = max(peak, cur)
    # Per ATen op: the high-water of what it allocated itself, above what of that it leaves
    # allocated (its frees of older tensors do not count).
    slack = 0
    per_op: dict[int, list[tuple[int, int]]] = {}
    for _, size, ptr, op in events:
        if op >= 0:
            per_op.setdefault(op, []).append((size, ptr))
    for allocs in per_op.values():
        mine: dict[int, int] = {}
        run = high = 0
        for size, ptr in allocs:
            if size > 0:
                mine[ptr] = size
                run += size
                high = max(high, run)
            elif ptr in mine:
                run -= mine.pop(ptr)
        slack = max(slack, high - run)
    return result, Measured(peak_bytes=peak, end_bytes=cur, slack_bytes=slack, n_events=len(events))


def kernel_slack(step: Callable[[], Any]) -> int:
    """:attr:`Measured.slack_bytes` of one run of ``step`` (a plain training step)."""
    return measure(step)[1].slack_bytes


__all__ = ["Measured", "kernel_slack", "measure"]
