"""Energy: RAPL package counters (``/sys/class/powercap``), the dynamic-power model, and
the timed benchmark loop every measurement uses (seconds and joules per call)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RAPL_ROOT = Path("/sys/class/powercap")

class RaplMeter:
    """Sum of the package-level RAPL energy counters, with wrap-around handled."""

    def __init__(self, root: Path = RAPL_ROOT) -> None:
        self.domains: list[tuple[Path, int]] = []
        for d in sorted(root.glob("intel-rapl:*")) if root.is_dir() else []:
            if d.name.count(":") != 1:  # sub-domains (core, uncore, dram) are inside the package
                continue
            energy = d / "energy_uj"
            try:
                int(energy.read_text())
                wrap = int((d / "max_energy_range_uj").read_text())
            except (OSError, ValueError):
                continue
            self.domains.append((energy, wrap))

    @property
    def available(self) -> bool:
        return bool(self.domains)

    def read_uj(self) -> list[int]:
        return [int(p.read_text()) for p, _ in self.domains]

    def joules_since(self, start: list[int]) -> float:
        total = 0
        for (_, wrap), a, b in zip(self.domains, start, self.read_uj()):
            total += b - a if b >= a else b + wrap - a
        return total * 1e-6


@dataclass
class PowerModel:
    """Turns (time, optional measured joules) into dynamic power above idle."""

    rapl: RaplMeter | None
    idle_w: float
    busy_w: float | None  # user figure: power above idle while busy

    def dynamic_w(self, seconds: float, joules: float | None) -> float:
        if self.rapl is not None and joules is not None and seconds > 0:
            return max(0.0, joules / seconds - self.idle_w)
        assert self.busy_w is not None
        return self.busy_w


def measure(fn: Callable[[], Any], min_time_s: float, meter: RaplMeter | None) -> tuple[float, float | None]:
    """(seconds per call, joules per call or None): median of 3 runs of about min_time_s/3 each."""
    fn()  # warm-up: allocation, first-call dispatch, caches
    per_run = min_time_s / 3
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    reps = max(1, int(per_run / once))
    samples: list[float] = []
    start = meter.read_uj() if meter is not None else None
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        samples.append((time.perf_counter() - t0) / reps)
    joules = meter.joules_since(start) / (3 * reps) if meter is not None and start is not None else None
    return statistics.median(samples), joules
