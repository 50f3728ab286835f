"""poetc's memory limit on its solver processes (solvers/memory.py).

The children here really allocate (a filled ``bytes`` object is resident, unlike a
zeroed one), and the parent really measures them in /proc: a watch that measured nothing
would let them sleep out their 30 s and every test would fail on its status or message.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from poet_compiler.solve.formulation.fast import build_fast
from poet_compiler.solvers import BackendOptions, cpsat, native, solve_model
from poet_compiler.solvers.memory import Watch, memory_limit, peak_rss, private_bytes, self_rss
from tests.support.graphs import training_problem

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the figures come from /proc")

BIG = 300 * 2**20


def _hog(*args, **kwargs):  # noqa: ANN002, ANN003
    """A solver child that allocates BIG bytes and then takes its time."""
    block = b"x" * BIG
    time.sleep(30)
    return block


def test_the_figures_are_measured() -> None:
    import multiprocessing

    mine = self_rss()
    assert mine is not None and mine > 10 * 2**20
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=_hog, daemon=True)
    proc.start()
    try:
        deadline = time.monotonic() + 20
        got = 0
        while time.monotonic() < deadline and got < BIG:
            got = private_bytes(proc.pid) or 0
            time.sleep(0.05)
        assert got >= BIG, got       # the child's own bytes, not the pages it shares with us
    finally:
        proc.kill()
        proc.join()
    assert private_bytes(proc.pid) is None      # reaped: nothing to measure
    assert set(peak_rss()) == {"poetc_mb", "solver_mb"}


def test_no_limit_watches_nothing() -> None:
    assert Watch(12345).exceeded() is False


def test_a_cpsat_child_past_the_limit_is_stopped(monkeypatch) -> None:
    monkeypatch.setattr(cpsat, "solve_cpsat_here", _hog)
    problem = training_problem(1, 3, "poet")
    started = time.perf_counter()
    with memory_limit((self_rss() or 0) + BIG // 2):
        out = solve_model(build_fast(problem).model, "cpsat", BackendOptions(time_limit_s=60))
    assert time.perf_counter() - started < 25, "the child slept its 30 s out: nothing stopped it"
    assert out.status == "timeout" and out.values is None
    assert "memory limit" in out.message, out.message


def test_a_native_child_past_the_limit_keeps_its_latest_solution(monkeypatch) -> None:
    """A forked native solve (here: isolated) that sent a solution and then grows past
    the limit is stopped, and that solution is the answer."""
    from poet_compiler.solvers.native import NativeLimits, new_model, solve_native

    m = new_model()
    x = m.new_int_var(0, 10, "x")
    m.minimize(x)

    def solution_then_hog(model, limits, on_solution=None, on_bound=None):  # noqa: ANN001
        on_solution(3.0, 0.0, [3])
        return _hog()

    monkeypatch.setattr(native, "_solve_here", solution_then_hog)
    with memory_limit((self_rss() or 0) + BIG // 2):
        res = solve_native(m, NativeLimits(time_limit_s=60, isolate=True))
    assert res.has_solution and res.value(x) == 3
    assert "memory limit" in res.message and "last solution is kept" in res.message, res.message


def test_a_highs_child_past_the_limit_is_a_status() -> None:
    """HiGHS runs in a spawned Python (its whole memory is its own): a limit a few MiB
    above poetc's own stops it as soon as it is measured."""
    problem = training_problem(1, 3, "poet")
    with memory_limit((self_rss() or 0) + 4 * 2**20):
        out = solve_model(build_fast(problem).model, "highs", BackendOptions(time_limit_s=60))
    assert out.status == "timeout" and "memory limit" in out.message, out


def test_compile_reports_its_memory_and_answers_under_a_tiny_limit(tmp_path: Path) -> None:
    """Through the installed console script: a limit below poetc's own memory stops every
    solver process, and the compile still answers (the heuristics' schedule) and reports
    its peak memory and the limit."""
    from tests.commands.test_usage_errors import run_poetc

    model = Path(__file__).resolve().parents[2] / "models" / "kws_dscnn.onnx"
    proc = run_poetc("compile", str(model), "--device", "m4", "--ram", "256k", "--time-limit", "20",
                     "--memory-limit", "64M", "--json", "-o", str(tmp_path / "s.poet"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    assert rep["memory_limit_mb"] == 64
    assert rep["peak_rss_mb"]["poetc_mb"] > 64 and rep["status"] in ("optimal", "feasible")
    assert rep["memory_stops"] >= 1 and "memory limit" in rep["message"], rep["message"]
    assert rep["memory_peak_mb"] > 64        # what the watch measured when it stopped one


def test_a_growing_child_is_stopped_before_it_passes_the_limit(monkeypatch) -> None:
    """The watch stops a child whose next measurement would pass the limit at the pace
    it grew since the last one, so what it measured stays within the limit (the /proc
    figures are given here, so that the pace is exact)."""
    from poet_compiler.solvers import memory

    mib = 2**20
    figures = iter([100 * mib, 150 * mib, 200 * mib, 250 * mib])
    monkeypatch.setattr(memory, "EVERY_S", 0.0)
    monkeypatch.setattr(memory, "self_rss", lambda: 50 * mib)
    monkeypatch.setattr(memory, "private_bytes", lambda pid: next(figures) if pid == 4242 else None)
    with memory_limit(290 * mib) as seen:
        watch = Watch(4242)
        stopped = [watch.exceeded() for _ in range(3)]
    assert stopped == [False, False, True]          # 250 MiB now, 300 MiB at the next measurement
    assert watch.used == 250 * mib and seen.peak_bytes == 250 * mib <= 290 * mib
    assert "growing 50 MiB per" in seen.stops[0] and "limit 0.28 GiB" in seen.stops[0]
    memory._WATCHED.discard(4242)


@pytest.mark.parametrize("share, stopped", [(0.97, False), (0.99, True)])
def test_a_child_that_does_not_grow_is_stopped_within_the_margin(monkeypatch, share: float,
                                                                 stopped: bool) -> None:
    """CP-SAT allocates in bursts: a child is stopped once poetc is within MARGIN of the
    limit even when the last two measurements were equal."""
    from poet_compiler.solvers import memory

    limit = 1000 * 2**20
    monkeypatch.setattr(memory, "EVERY_S", 0.0)
    monkeypatch.setattr(memory, "self_rss", lambda: 0)
    monkeypatch.setattr(memory, "private_bytes", lambda pid: int(share * limit) if pid == 4243 else None)
    with memory_limit(limit):
        watch = Watch(4243)
        assert [watch.exceeded() for _ in range(3)] == [stopped] * 3
    memory._WATCHED.discard(4243)
