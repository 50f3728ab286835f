"""Measure the machine poetc runs on and write a ``poet-profile/1`` for it.

What is measured, all for real:

- per op class compute roof: timed torch kernels (conv2d, matmul, elementwise add,
  layer norm, row sums, transposing copies) at several sizes; the roof is the best
  FLOP/s reached (small sizes are dominated by dispatch overhead, which is measured
  separately as ``op_overhead_s`` from 1-element ops). FLOP conventions: conv and
  matmul 2 per multiply-accumulate; add, sum, copy 1 per element; layer norm 5 per
  element. ``other`` takes the slowest class (a conservative default);
- memory bandwidth: ``copy_`` between large buffers (read + write bytes / time);
- paging: a real file on the local disk — writes with ``fsync`` and reads after the
  file's pages are dropped from the page cache (``posix_fadvise(DONTNEED)``); the
  latency comes from small transfers and the bandwidth from the slope between a
  small and a large transfer;
- energy: from RAPL counters (``/sys/class/powercap``) when readable — idle power
  becomes ``static_power_w`` and the extra power during each benchmark becomes its
  dynamic energy — otherwise from ``power_w`` that the user gives (power drawn above
  idle while busy). Which one was used is recorded in ``measurement.energy_from``;
- optionally, a per-op table for one model: every scheduling node of its traced graph
  is timed by re-running its FX nodes, and the median time per op signature is kept.

The package follows those concepts: :mod:`.energy` (RAPL, the power model, the timed
loop), :mod:`.kernels` (compute and memory benchmarks), :mod:`.paging` (the page file),
:mod:`.fx_timing` (the per-op table), :mod:`.host` (``/sys``, ``/proc``); this module
assembles the profile (:func:`profile_host`).
"""

from __future__ import annotations

import math
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from poet_compiler.devices.profile import FORMAT, DeviceProfile, profile_from_dict
from poet_compiler.devices.profiler.energy import RAPL_ROOT, PowerModel, RaplMeter
from poet_compiler.devices.profiler.energy import measure as _measure
from poet_compiler.devices.profiler.fx_timing import op_table_from_times, time_fx_nodes
from poet_compiler.devices.profiler.fx_timing import trace_for_profiling as _trace_for_profiling
from poet_compiler.devices.profiler.fx_timing import traced_op_times as _traced_op_times
from poet_compiler.devices.profiler.host import clock_hz as _clock_hz
from poet_compiler.devices.profiler.host import cpu_name as _cpu_name
from poet_compiler.devices.profiler.kernels import Kernel
from poet_compiler.devices.profiler.kernels import kernels as _kernels
from poet_compiler.devices.profiler.kernels import memory_bandwidth as _memory_bandwidth
from poet_compiler.devices.profiler.kernels import overhead_s as _overhead_s
from poet_compiler.devices.profiler.paging import measure_paging
from poet_compiler.errors import ProfileError
from poet_compiler.graph.ir import OP_CLASSES

__all__ = [
    "RAPL_ROOT", "Kernel", "PowerModel", "RaplMeter", "measure_paging", "op_table_from_times", "profile_host",
    "time_fx_nodes",
]


# ---- the profile ---------------------------------------------------------------------------
def profile_host(
    *,
    name: str = "host",
    quick: bool = False,
    power_w: float | None = None,
    idle_w: float = 0.0,
    page_file: Path | None = None,
    model: str | None = None,
    rapl_root: Path = RAPL_ROOT,
) -> DeviceProfile:
    """Measure this machine; see the module docstring. Raises ProfileError with no energy source."""
    import torch

    meter: RaplMeter | None = RaplMeter(rapl_root)
    assert meter is not None
    if not meter.available:
        meter = None
        if power_w is None:
            raise ProfileError(
                f"no readable RAPL energy counters under {rapl_root}; "
                "give --power-w W (power this machine draws above idle while busy)"
            )
    if power_w is not None and power_w <= 0:
        raise ProfileError(f"--power-w must be positive, got {power_w}")
    if idle_w < 0:
        raise ProfileError(f"--idle-w must be >= 0, got {idle_w}")
    traced = _trace_for_profiling(model) if model is not None else None
    min_t = 0.03 if quick else 0.25

    if meter is not None:
        start = meter.read_uj()
        t0 = time.perf_counter()
        time.sleep(0.2 if quick else 1.0)
        idle = meter.joules_since(start) / (time.perf_counter() - t0)
    else:
        idle = idle_w
    power = PowerModel(meter, idle, power_w if meter is None else None)

    overhead = _overhead_s(min_t)
    bw, t_copy, j_copy = _memory_bandwidth(quick, min_t, meter)
    e_byte = power.dynamic_w(t_copy, j_copy) / bw

    best: dict[str, tuple[float, float]] = {}  # class -> (FLOP/s, J/FLOP)
    labels: dict[str, str] = {}
    for k in _kernels(quick):
        t, j = _measure(k.fn, min_t, meter)
        thr = k.flops / max(t - overhead, t * 0.5)
        dyn_j = power.dynamic_w(t, j) * t
        e_flop = max(dyn_j - k.bytes * e_byte, 0.0) / k.flops
        if k.op_class not in best or thr > best[k.op_class][0]:
            best[k.op_class] = (thr, e_flop)
            labels[k.op_class] = k.label
    slowest = min(best, key=lambda c: best[c][0])
    best["other"] = best[slowest]

    if page_file is None:
        page_dir = Path.cwd()
        fd, tmp = tempfile.mkstemp(prefix=".poetc-paging-", dir=page_dir)
        os.close(fd)
        page_path = Path(tmp)
    else:
        page_path = Path(page_file)
        page_dir = page_path.parent if str(page_path.parent) else Path.cwd()
    try:
        block = os.statvfs(page_dir).f_bsize if hasattr(os, "statvfs") else 4096
        flash = shutil.disk_usage(page_dir).total
    except OSError as exc:
        raise ProfileError(f"{page_dir}: cannot use this directory for paging ({exc.strerror or exc})") from None
    if meter is not None:
        start = meter.read_uj()
    paging = measure_paging(page_path, quick, block)
    if meter is not None:
        page_power = max(0.0, meter.joules_since(start) / (paging["in_time_s"] + paging["out_time_s"]) - idle)
    else:
        page_power = float(power_w or 0.0)

    op_table: dict[str, dict[str, float]] = {}
    if traced is not None:
        busy_w = _mean_dynamic(best)
        for sig, secs in _traced_op_times(traced, overhead).items():
            op_table[sig] = {"compute_s": secs, "compute_j": busy_w * secs}

    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 0
    energy_ref = (
        f"RAPL package counters under {rapl_root}: idle power and extra power during each benchmark"
        if meter is not None
        else f"--power-w {power_w} W above idle while busy (user figure), --idle-w {idle_w} W"
    )
    threads = torch.get_num_threads()
    how = f"poetc profile{' --quick' if quick else ''} on {_cpu_name()}, torch {torch.__version__}, {threads} threads"
    sources: dict[str, dict[str, str]] = {
        "ram_bytes": {"kind": "measurement", "ref": "sysconf(SC_PHYS_PAGES) x sysconf(SC_PAGE_SIZE)"},
        "flash_bytes": {"kind": "measurement", "ref": f"size of the file system holding {page_dir}"},
        "page_size_bytes": {"kind": "measurement", "ref": f"statvfs({page_dir}).f_bsize"},
        "memory.bandwidth_bps": {
            "kind": "measurement",
            "ref": f"{how}: copy_ of a large float32 buffer, read+write bytes / time",
        },
        "memory.energy_j_per_byte": {
            "kind": "measurement",
            "ref": f"dynamic power during the copy / bandwidth; {energy_ref}",
        },
        "op_overhead_s": {"kind": "measurement", "ref": f"{how}: median time of a 1-element torch.add"},
        "page_in": {
            "kind": "measurement",
            "ref": f"{how}: cold pread after posix_fadvise(DONTNEED) of a file in {page_dir}; "
            f"{block} B and {'8' if quick else '64'} MiB transfers, two-point fit; power: {energy_ref}",
        },
        "page_out": {
            "kind": "measurement",
            "ref": f"{how}: write + fsync of a file in {page_dir}; "
            f"{block} B and {'8' if quick else '64'} MiB transfers, two-point fit; power: {energy_ref}",
        },
        "static_power_w": {
            "kind": "measurement",
            "ref": energy_ref if meter is not None else f"--idle-w {idle_w} W (user figure)",
        },
    }
    for c in OP_CLASSES:
        if c == "other":
            sources["compute.other"] = {
                "kind": "derived",
                "ref": f"the slowest measured class ({slowest}), a conservative default",
            }
        else:
            sources[f"compute.{c}"] = {
                "kind": "measurement",
                "ref": f"{how}: best FLOP/s over sizes, reached by {labels[c]}; energy: {energy_ref}",
            }
    clock = _clock_hz()
    if clock is not None:
        sources["clock_hz"] = {"kind": "measurement", "ref": "cpufreq cpuinfo_max_freq or /proc/cpuinfo 'cpu MHz'"}
    if op_table:
        sources["op_table"] = {
            "kind": "measurement",
            "ref": f"{how}: each scheduling node of {model} timed as its traced step runs it, median "
            "of 5 runs, median per op signature; energy = dynamic power x time",
        }

    data: dict[str, Any] = {
        "format": FORMAT,
        "name": name,
        "description": f"this machine ({_cpu_name()}, {platform.system()} {platform.machine()}), "
        "measured by poetc profile",
        "ram_bytes": int(ram) if ram > 0 else 1,
        "flash_bytes": int(flash),
        "page_size_bytes": int(block),
        "compute": {
            c: {"throughput_flops": _sig(best[c][0]), "energy_j_per_flop": _sig(best[c][1])} for c in OP_CLASSES
        },
        "memory": {"bandwidth_bps": _sig(bw), "energy_j_per_byte": _sig(e_byte)},
        "op_overhead_s": _sig(overhead),
        "page_in": {
            "latency_s": _sig(paging["in_latency_s"]),
            "bandwidth_bps": _sig(paging["in_bw"]),
            "power_w": _sig(page_power),
        },
        "page_out": {
            "latency_s": _sig(paging["out_latency_s"]),
            "bandwidth_bps": _sig(paging["out_bw"]),
            "power_w": _sig(page_power),
        },
        "static_power_w": _sig(idle),
        "dma": True,
        "measurement": {
            "tool": "poetc profile" + (" --quick" if quick else ""),
            "energy_from": "rapl" if meter is not None else "power-w",
            "torch_version": torch.__version__,
            "threads": threads,
            "page_file_dir": str(page_dir),
            **({"model": model} if model else {}),
        },
        "sources": sources,
    }
    if clock is not None:
        data["clock_hz"] = clock
    if op_table:
        data["op_table"] = {
            s: {"compute_s": _sig(v["compute_s"]), "compute_j": _sig(v["compute_j"])} for s, v in op_table.items()
        }
    sources["dma"] = {"kind": "derived", "ref": "the OS writes back and reads ahead asynchronously while compute runs"}
    return profile_from_dict(data, f"measured profile {name!r}")


def _mean_dynamic(best: dict[str, tuple[float, float]]) -> float:
    """Dynamic W while busy, as measured for the compute classes (power = J/FLOP x FLOP/s)."""
    return statistics.mean(thr * e for thr, e in best.values())


def _sig(x: float) -> float:
    """Six significant digits: measurement noise is far larger, and the file stays readable."""
    if x == 0 or not math.isfinite(x):
        return 0.0 if not math.isfinite(x) else x
    return float(f"{x:.6g}")
