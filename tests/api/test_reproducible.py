"""Same input, same flags, same bytes: the optimal solve stops on work (--effort), not on
the clock, so two compiles of one graph write byte-identical .poet files and report the
same figures (measured timings aside), also while a CPU-bound process competes for the
cores. The minutes-long cells (README demo, ResNet-18, GPT-2, a 250-node DAG) are
bench/reproducibility.py's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from poet_compiler import api
from poet_compiler.solve.result import MEASURED_KEYS
from tests.support.layered import layered_graph

# Figures that are wall seconds (timings), besides the report's measured keys.
TIMINGS = {"backend_solve_s", "solve_time_s"}


def _compile(tmp: Path, name: str) -> tuple[bytes, dict[str, Any]]:
    graph = layered_graph(60)
    c = api.compile(graph, None, "85%", mode="remat", effort=1.5, time_limit_s=600, threads=2)
    assert c.result.ok, c.result.message
    path, _ = c.save(tmp / f"{name}.poet")
    report = {k: v for k, v in c.report().items() if k not in MEASURED_KEYS and k not in TIMINGS}
    return path.read_bytes(), report


def test_the_same_compile_twice_gives_the_same_bytes_idle_and_beside_a_busy_process(tmp_path: Path) -> None:
    first, report = _compile(tmp_path, "a")
    assert report["stopped_by"] in ("proof", "gap", "effort"), report["stopped_by"]
    assert 0 < report["effort_used"] <= 1.5 * 1.05 + 0.5   # work is charged after each step
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        second, again = _compile(tmp_path, "b")
    finally:
        busy.kill()
        busy.wait()
    assert second == first
    assert again == report
