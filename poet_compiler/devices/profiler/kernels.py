"""Compute benchmarks: timed torch kernels per op class, dispatch overhead, memory bandwidth.

FLOP conventions: conv and matmul 2 per multiply-accumulate; add, sum, copy 1 per
element; layer norm 5 per element."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from poet_compiler.devices.profiler.energy import RaplMeter, measure


@dataclass(frozen=True)
class Kernel:
    op_class: str
    label: str
    flops: int
    bytes: int
    fn: Callable[[], Any]


def _transpose_copy(x: Any) -> Any:
    return x.t().contiguous()


def kernels(quick: bool) -> list[Kernel]:
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    out: list[Kernel] = []
    conv_sizes = (
        [(1, 16, 32, 16), (4, 32, 32, 32)]
        if quick
        else [(1, 16, 32, 16), (4, 32, 32, 32), (8, 64, 32, 64), (8, 128, 16, 128)]
    )
    for n, c, hw, k in conv_sizes:
        x = torch.randn(n, c, hw, hw, generator=g)
        w = torch.randn(k, c, 3, 3, generator=g)
        flops = 2 * n * k * c * 9 * hw * hw
        out.append(
            Kernel(
                "conv",
                f"conv2d n{n} c{c} {hw}x{hw} k{k}",
                flops,
                4 * (x.numel() + w.numel() + n * k * hw * hw),
                partial(F.conv2d, x, w, padding=1),
            )
        )
    for m in ([64, 256] if quick else [64, 256, 512, 1024]):
        a = torch.randn(m, m, generator=g)
        b = torch.randn(m, m, generator=g)
        out.append(Kernel("matmul", f"matmul {m}^3", 2 * m**3, 12 * m * m, partial(torch.mm, a, b)))
    for numel in ([1 << 14, 1 << 20] if quick else [1 << 14, 1 << 18, 1 << 22]):
        a = torch.randn(numel, generator=g)
        b = torch.randn(numel, generator=g)
        c_ = torch.empty(numel)
        out.append(
            Kernel("elementwise", f"add {numel}", numel, 12 * numel, partial(torch.add, a, b, out=c_))
        )
        rows = numel // 256
        x = torch.randn(rows, 256, generator=g)
        out.append(Kernel("norm", f"layer_norm {rows}x256", 5 * numel, 8 * numel, partial(F.layer_norm, x, (256,))))
        out.append(Kernel("reduction", f"sum {rows}x256", numel, 4 * numel + 4 * rows, partial(torch.sum, x, dim=1)))
        out.append(Kernel("data", f"transpose-copy {rows}x256", numel, 8 * numel, partial(_transpose_copy, x)))
    return out


def overhead_s(min_time_s: float) -> float:
    import torch

    a, b = torch.ones(1), torch.ones(1)
    t, _ = measure(lambda: torch.add(a, b), min_time_s, None)
    return t


def memory_bandwidth(quick: bool, min_time_s: float, meter: RaplMeter | None) -> tuple[float, float, float | None]:
    """(bytes/s, seconds per copy, joules per copy or None) of a large buffer copy."""
    import torch

    numel = (64 << 20) // 4  # well beyond any last-level cache, quick or not
    src = torch.ones(numel)
    dst = torch.empty(numel)
    t, j = measure(lambda: dst.copy_(src), min_time_s, meter)
    return 8 * numel / t, t, j
