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
from dataclasses import dataclass
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
    meter = _energy_source(rapl_root, power_w, idle_w)
    traced = _trace_for_profiling(model) if model is not None else None
    min_t = 0.03 if quick else 0.25
    idle = _idle_power(meter, quick) if meter is not None else idle_w
    power = PowerModel(meter, idle, power_w if meter is None else None)
    overhead = _overhead_s(min_t)
    bw, t_copy, j_copy = _memory_bandwidth(quick, min_t, meter)
    e_byte = power.dynamic_w(t_copy, j_copy) / bw
    roofs = _compute_roofs(quick, min_t, meter, power, overhead, e_byte)
    page_path, page_dir = _page_file(page_file)
    try:
        block = os.statvfs(page_dir).f_bsize if hasattr(os, "statvfs") else 4096
        flash = shutil.disk_usage(page_dir).total
    except OSError as exc:
        raise ProfileError(f"{page_dir}: cannot use this directory for paging ({exc.strerror or exc})") from None
    start = meter.read_uj() if meter is not None else None
    paging = measure_paging(page_path, quick, block)
    if meter is not None and start is not None:
        page_power = max(0.0, meter.joules_since(start) / (paging["in_time_s"] + paging["out_time_s"]) - idle)
    else:
        page_power = float(power_w or 0.0)
    op_table: dict[str, dict[str, float]] = {}
    if traced is not None:
        busy_w = _mean_dynamic(roofs.best)
        for sig, secs in _traced_op_times(traced, overhead).items():
            op_table[sig] = {"compute_s": secs, "compute_j": busy_w * secs}
    m = _Measured(quick=quick, page_dir=page_dir, block=block, flash=flash, roofs=roofs, bw=bw, e_byte=e_byte,
                  overhead=overhead, paging=paging, page_power=page_power, idle=idle, op_table=op_table,
                  energy_ref=(f"RAPL package counters under {rapl_root}: idle power and extra power during each "
                              "benchmark" if meter is not None
                              else f"--power-w {power_w} W above idle while busy (user figure), --idle-w {idle_w} W"),
                  rapl=meter is not None, idle_w=idle_w, model=model)
    return profile_from_dict(_profile_data(name, m), f"measured profile {name!r}")


def _energy_source(rapl_root: Path, power_w: float | None, idle_w: float) -> RaplMeter | None:
    """The RAPL counters when readable, else None (``power_w`` then required); the user's
    figures checked."""
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
    return meter


def _idle_power(meter: RaplMeter, quick: bool) -> float:
    """Watts the counters see while this process sleeps."""
    start = meter.read_uj()
    t0 = time.perf_counter()
    time.sleep(0.2 if quick else 1.0)
    return meter.joules_since(start) / (time.perf_counter() - t0)


@dataclass(frozen=True)
class _Roofs:
    """Per op class the best (FLOP/s, J/FLOP) measured and the kernel that reached it;
    ``other`` is the slowest class's."""

    best: dict[str, tuple[float, float]]
    labels: dict[str, str]
    slowest: str


def _compute_roofs(quick: bool, min_t: float, meter: RaplMeter | None, power: PowerModel, overhead: float,
                   e_byte: float) -> _Roofs:
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
    return _Roofs(best, labels, slowest)


def _page_file(page_file: Path | None) -> tuple[Path, Path]:
    """The file paging is measured on (a new temporary one in the working directory when
    none is given) and its directory."""
    if page_file is None:
        page_dir = Path.cwd()
        fd, tmp = tempfile.mkstemp(prefix=".poetc-paging-", dir=page_dir)
        os.close(fd)
        return Path(tmp), page_dir
    page_path = Path(page_file)
    return page_path, page_path.parent if str(page_path.parent) else Path.cwd()


@dataclass(frozen=True)
class _Measured:
    """Everything :func:`profile_host` measured, for the profile and its sources."""

    quick: bool
    page_dir: Path
    block: int
    flash: int
    roofs: _Roofs
    bw: float
    e_byte: float
    overhead: float
    paging: dict[str, float]
    page_power: float
    idle: float
    op_table: dict[str, dict[str, float]]
    energy_ref: str
    rapl: bool                  # energy from the RAPL counters (else the user's figures)
    idle_w: float
    model: str | None


def _profile_data(name: str, m: _Measured) -> dict[str, Any]:
    """The ``poet-profile/1`` document of ``m``, every figure with its source."""
    import torch

    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 0
    threads = torch.get_num_threads()
    how = f"poetc profile{' --quick' if m.quick else ''} on {_cpu_name()}, torch {torch.__version__}, {threads} threads"
    sources = _sources(m, how)
    clock = _clock_hz()
    if clock is not None:
        sources["clock_hz"] = {"kind": "measurement", "ref": "cpufreq cpuinfo_max_freq or /proc/cpuinfo 'cpu MHz'"}
    if m.op_table:
        sources["op_table"] = {
            "kind": "measurement",
            "ref": f"{how}: each scheduling node of {m.model} timed as its traced step runs it, median "
            "of 5 runs, median per op signature; energy = dynamic power x time",
        }
    best, paging = m.roofs.best, m.paging
    data: dict[str, Any] = {
        "format": FORMAT,
        "name": name,
        "description": f"this machine ({_cpu_name()}, {platform.system()} {platform.machine()}), "
        "measured by poetc profile",
        "ram_bytes": int(ram) if ram > 0 else 1,
        "flash_bytes": int(m.flash),
        "page_size_bytes": int(m.block),
        "compute": {
            c: {"throughput_flops": _sig(best[c][0]), "energy_j_per_flop": _sig(best[c][1])} for c in OP_CLASSES
        },
        "memory": {"bandwidth_bps": _sig(m.bw), "energy_j_per_byte": _sig(m.e_byte)},
        "op_overhead_s": _sig(m.overhead),
        "page_in": {
            "latency_s": _sig(paging["in_latency_s"]),
            "bandwidth_bps": _sig(paging["in_bw"]),
            "power_w": _sig(m.page_power),
        },
        "page_out": {
            "latency_s": _sig(paging["out_latency_s"]),
            "bandwidth_bps": _sig(paging["out_bw"]),
            "power_w": _sig(m.page_power),
        },
        "static_power_w": _sig(m.idle),
        "dma": True,
        "measurement": {
            "tool": "poetc profile" + (" --quick" if m.quick else ""),
            "energy_from": "rapl" if m.rapl else "power-w",
            "torch_version": torch.__version__,
            "threads": threads,
            "page_file_dir": str(m.page_dir),
            **({"model": m.model} if m.model else {}),
        },
        "sources": sources,
    }
    if clock is not None:
        data["clock_hz"] = clock
    if m.op_table:
        data["op_table"] = {
            s: {"compute_s": _sig(v["compute_s"]), "compute_j": _sig(v["compute_j"])} for s, v in m.op_table.items()
        }
    sources["dma"] = {"kind": "derived", "ref": "the OS writes back and reads ahead asynchronously while compute runs"}
    return data


def _sources(m: _Measured, how: str) -> dict[str, dict[str, str]]:
    """Where each measured figure comes from (the profile's ``sources``)."""
    page_dir, block, energy_ref = m.page_dir, m.block, m.energy_ref
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
            f"{block} B and {'8' if m.quick else '64'} MiB transfers, two-point fit; power: {energy_ref}",
        },
        "page_out": {
            "kind": "measurement",
            "ref": f"{how}: write + fsync of a file in {page_dir}; "
            f"{block} B and {'8' if m.quick else '64'} MiB transfers, two-point fit; power: {energy_ref}",
        },
        "static_power_w": {
            "kind": "measurement",
            "ref": energy_ref if m.rapl else f"--idle-w {m.idle_w} W (user figure)",
        },
    }
    for c in OP_CLASSES:
        if c == "other":
            sources["compute.other"] = {
                "kind": "derived",
                "ref": f"the slowest measured class ({m.roofs.slowest}), a conservative default",
            }
        else:
            sources[f"compute.{c}"] = {
                "kind": "measurement",
                "ref": f"{how}: best FLOP/s over sizes, reached by {m.roofs.labels[c]}; energy: {energy_ref}",
            }
    return sources


def _mean_dynamic(best: dict[str, tuple[float, float]]) -> float:
    """Dynamic W while busy, as measured for the compute classes (power = J/FLOP x FLOP/s)."""
    return statistics.mean(thr * e for thr, e in best.values())


def _sig(x: float) -> float:
    """Six significant digits: measurement noise is far larger, and the file stays readable."""
    if x == 0 or not math.isfinite(x):
        return 0.0 if not math.isfinite(x) else x
    return float(f"{x:.6g}")
