"""Host facts from ``/sys`` and ``/proc``: the CPU's clock and name."""

from __future__ import annotations

import platform
from pathlib import Path


def clock_hz() -> float | None:
    try:
        text = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text()
        return float(text.strip()) * 1e3
    except (OSError, ValueError):
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("cpu mhz"):
                return float(line.split(":")[1]) * 1e6
    except (OSError, ValueError, IndexError):
        pass
    return None


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
