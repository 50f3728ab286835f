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
"""

from __future__ import annotations

import math
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from poet_compiler.devices.profile import FORMAT, DeviceProfile, profile_from_dict
from poet_compiler.errors import ProfileError
from poet_compiler.graph.ir import OP_CLASSES, TrainingGraph

RAPL_ROOT = Path("/sys/class/powercap")


# ---- energy ------------------------------------------------------------------------------
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


def _measure(fn: Callable[[], Any], min_time_s: float, meter: RaplMeter | None) -> tuple[float, float | None]:
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


# ---- compute benchmarks ----------------------------------------------------------------------
@dataclass(frozen=True)
class Kernel:
    op_class: str
    label: str
    flops: int
    bytes: int
    fn: Callable[[], Any]


def _transpose_copy(x: Any) -> Any:
    return x.t().contiguous()


def _kernels(quick: bool) -> list[Kernel]:
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


def _overhead_s(min_time_s: float) -> float:
    import torch

    a, b = torch.ones(1), torch.ones(1)
    t, _ = _measure(lambda: torch.add(a, b), min_time_s, None)
    return t


def _memory_bandwidth(quick: bool, min_time_s: float, meter: RaplMeter | None) -> tuple[float, float, float | None]:
    """(bytes/s, seconds per copy, joules per copy or None) of a large buffer copy."""
    import torch

    numel = (64 << 20) // 4  # well beyond any last-level cache, quick or not
    src = torch.ones(numel)
    dst = torch.empty(numel)
    t, j = _measure(lambda: dst.copy_(src), min_time_s, meter)
    return 8 * numel / t, t, j


# ---- paging ------------------------------------------------------------------------------
def _drop_cache(fd: int) -> None:
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def _write_fsync(path: Path, data: bytes) -> float:
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    try:
        t0 = time.perf_counter()
        os.write(fd, data)
        os.fsync(fd)
        return time.perf_counter() - t0
    finally:
        os.close(fd)


def _read_cold(path: Path, size: int) -> float:
    fd = os.open(path, os.O_RDONLY)
    try:
        _drop_cache(fd)
        t0 = time.perf_counter()
        got = 0
        while got < size:
            chunk = os.pread(fd, min(size - got, 8 << 20), got)
            if not chunk:
                break
            got += len(chunk)
        return time.perf_counter() - t0
    finally:
        os.close(fd)


def _fit(small: int, t_small: float, large: int, t_large: float) -> tuple[float, float]:
    """(latency_s, bandwidth_bps) from a small and a large transfer (two-point line)."""
    bw = (large - small) / (t_large - t_small) if t_large > t_small else large / t_large
    latency = max(t_small - small / bw, 0.0)
    return latency, bw


def measure_paging(page_file: Path, quick: bool, block: int) -> dict[str, float]:
    """Page-out (write+fsync) and page-in (cold read) latency and bandwidth on a real file."""
    small = block
    large = (8 << 20) if quick else (64 << 20)
    reps = 5 if quick else 15
    payload = os.urandom(large)
    try:
        w_small = statistics.median(_write_fsync(page_file, payload[:small]) for _ in range(reps))
        r_small = statistics.median(_read_cold(page_file, small) for _ in range(reps))
        w_large = statistics.median(_write_fsync(page_file, payload) for _ in range(2))
        r_large = statistics.median(_read_cold(page_file, large) for _ in range(2))
    except OSError as exc:
        raise ProfileError(f"{page_file}: cannot page to this file ({exc.strerror or exc})") from None
    finally:
        page_file.unlink(missing_ok=True)
    out_lat, out_bw = _fit(small, w_small, large, w_large)
    in_lat, in_bw = _fit(small, r_small, large, r_large)
    return {"in_latency_s": in_lat, "in_bw": in_bw, "out_latency_s": out_lat, "out_bw": out_bw,
            "in_time_s": r_small + r_large, "out_time_s": w_small + w_large}


# ---- per-op table ------------------------------------------------------------------------
def time_fx_nodes(gm: Any, args: Sequence[Any], repeats: int = 3) -> dict[str, float]:
    """Seconds per FX node (call_function/call_method/call_module), median of ``repeats`` re-runs.

    The graph is interpreted once with real values; each op is then re-run on the same
    concrete arguments, so the time is that of the op alone.
    """
    import torch.fx

    times: dict[str, float] = {}

    class _Timer(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            result = super().run_node(n)
            if n.op in ("call_function", "call_method", "call_module"):
                samples = []
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    super().run_node(n)
                    samples.append(time.perf_counter() - t0)
                times[n.name] = statistics.median(samples)
            return result

    _Timer(gm).run(*args)
    return times


def op_table_from_times(
    graph: TrainingGraph, node_fx: Sequence[Sequence[str]], fx_times: dict[str, float], overhead_s: float
) -> dict[str, float]:
    """Median seconds per op signature: a node's time is the sum of its FX nodes' times."""
    per_sig: dict[str, list[float]] = {}
    for node, names in zip(graph.nodes, node_fx):
        sig = node.extra.get("signature")
        if not isinstance(sig, str):
            continue
        t = sum(fx_times.get(name, 0.0) for name in names)
        per_sig.setdefault(sig, []).append(max(t, overhead_s))
    return {sig: statistics.median(v) for sig, v in sorted(per_sig.items())}


def _trace_for_profiling(model: str) -> Any:
    """The TracedModel of ``model`` (a zoo name or .onnx file), traced before any
    measurement so that a wrong name costs no benchmark time."""
    from poet_compiler.frontends import load_model

    traced = load_model(model)
    if traced is None:
        raise ProfileError(f"--model {model!r}: not a traceable model (a graph file has no kernels to time)")
    return traced


def _traced_op_times(traced: Any, overhead_s: float) -> dict[str, float]:
    """Time every op signature of a traced training step: its joint FX graph is run on
    the model's real parameters, buffers and example batch (``TracedModel.flat_args``),
    and each scheduling node's time is the sum of its FX nodes' (``node_fx``)."""
    import torch

    with torch.no_grad():
        fx_times = time_fx_nodes(traced.gm, traced.flat_args())
    return op_table_from_times(traced.graph, traced.node_fx, fx_times, overhead_s)


# ---- host facts --------------------------------------------------------------------------
def _clock_hz() -> float | None:
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


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


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
            "ref": f"{how}: each scheduling node of {model} re-run on its traced FX arguments, "
            "median per op signature; energy = dynamic power x time",
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
