"""Disk paging: write + fsync and cold reads (page cache dropped) of a real file; latency
and bandwidth from a two-point fit of a small and a large transfer."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from poet_compiler.errors import ProfileError


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
