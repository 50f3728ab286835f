"""``compile(time_limit_s=S)`` bounds the whole compile: loading the model counts."""

from __future__ import annotations

import time

import poet_compiler.api as api
from poet_compiler.solve.options import SolveOptions
from tests.support.layered import layered_graph


def _solve_limit(monkeypatch, load_s: float, limit_s: float) -> float:
    """The time limit the solve was given when loading the model took ``load_s``."""
    graph = layered_graph(40)
    real_load = api._load
    seen: list[SolveOptions] = []

    def slow_load(*args, **kwargs):  # noqa: ANN002, ANN003
        time.sleep(load_s)
        return real_load(*args, **kwargs)

    def spy(name, problem, opts):  # noqa: ANN001
        seen.append(opts)
        return real_run(name, problem, opts)

    real_run = api.run_strategy
    monkeypatch.setattr(api, "_load", slow_load)
    monkeypatch.setattr(api, "run_strategy", spy)
    out = api.compile(graph, ram="90%", mode="remat", strategy="checkpoint_all", time_limit_s=limit_s)
    assert out.result.notes.trace_s is not None and out.result.notes.trace_s >= load_s
    return seen[0].time_limit_s


def test_loading_time_is_taken_from_the_solves_limit(monkeypatch) -> None:
    limit = _solve_limit(monkeypatch, 0.5, 10.0)
    assert 8.0 < limit <= 9.5


def test_the_solve_keeps_a_floor_when_loading_took_the_limit(monkeypatch) -> None:
    assert _solve_limit(monkeypatch, 0.6, 0.5) == 0.5          # never more than the limit itself
    assert _solve_limit(monkeypatch, 1.2, 2.0) == api.MIN_SOLVE_S


def _spy_options(monkeypatch) -> list[SolveOptions]:  # noqa: ANN001
    """The SolveOptions each strategy run gets, as they come."""
    seen: list[SolveOptions] = []
    real_run = api.run_strategy

    def spy(name, problem, opts):  # noqa: ANN001
        seen.append(opts)
        return real_run(name, problem, opts)

    monkeypatch.setattr(api, "run_strategy", spy)
    return seen


def test_a_timeout_message_names_the_users_limit(monkeypatch) -> None:
    """The solve's share is an internal figure: a stop at the limit names the user's
    --time-limit and what was spent of it before the solve."""
    seen = _spy_options(monkeypatch)
    api.compile(layered_graph(40), ram="90%", mode="remat", strategy="checkpoint_all", time_limit_s=30.0)
    assert seen[0].stated_limit_s == 30.0 and seen[0].time_limit_s < 30.0


def test_the_limit_counts_from_the_instant_given(monkeypatch) -> None:
    """``started`` (the CLI passes its process's start): the time before the call counts,
    and the report says how much it was."""
    seen = _spy_options(monkeypatch)
    out = api.compile(layered_graph(40), ram="90%", mode="remat", strategy="checkpoint_all", time_limit_s=10.0,
                      started=time.perf_counter() - 3.0)
    assert 6.0 < seen[0].time_limit_s <= 7.0
    startup = out.result.notes.startup_s
    assert startup is not None and 3.0 <= startup < 3.5
    assert out.result.notes.compile_s is not None and out.result.notes.compile_s >= startup
    plain = api.compile(layered_graph(40), ram="90%", mode="remat", strategy="checkpoint_all", time_limit_s=10.0)
    assert plain.result.notes.startup_s is None


def test_process_started_is_this_process_start() -> None:
    """A child that waits 0.5 s before asking sees itself at least that old."""
    import subprocess
    import sys

    code = ("import time; time.sleep(0.5); from poet_compiler.command_start import process_started; "
            "print(time.perf_counter() - process_started())")
    age = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert 0.45 <= age < 30.0


def test_an_explicit_limit_sets_the_effort_both_ways(monkeypatch) -> None:
    """No limit: the default effort under the 600 s cap. An explicit limit without
    --effort: 0.3 deterministic s per second of it, above the default as below it."""
    from poet_compiler.solve.options import DEFAULT_TIME_LIMIT_S, EFFORT_PRESETS, effort_units

    seen = _spy_options(monkeypatch)
    graph = layered_graph(40)
    api.compile(graph, ram="90%", mode="remat", strategy="checkpoint_all")
    api.compile(graph, ram="90%", mode="remat", strategy="checkpoint_all", time_limit_s=300.0)
    api.compile(graph, ram="90%", mode="remat", strategy="checkpoint_all", time_limit_s=10.0)
    api.compile(graph, ram="90%", mode="remat", strategy="checkpoint_all", time_limit_s=300.0, effort="quick")
    default, long, short, quick = seen
    assert default.stated_limit_s == DEFAULT_TIME_LIMIT_S
    assert effort_units(default.effort, default.stated_limit_s) == EFFORT_PRESETS["default"]
    assert effort_units(long.effort, long.stated_limit_s) == 90.0 > EFFORT_PRESETS["default"]
    assert effort_units(short.effort, short.stated_limit_s) == 3.0
    assert effort_units(quick.effort, quick.stated_limit_s) == EFFORT_PRESETS["quick"]


def test_the_report_says_when_effort_stopped_well_inside_the_limit() -> None:
    from poet_compiler.solve.options import effort_note

    note = effort_note("effort", 90.0, 70.4, 300.0, limit_given=True)
    assert note == ("stopped at effort 90 after 70 s of the 300 s limit; "
                    "--effort thorough (or a longer --time-limit) searches further")
    assert "--time-limit S (0.3 units per second)" in effort_note("effort", 30.0, 70.0, 600.0, limit_given=False)
    assert "--effort 240" in effort_note("effort", 120.0, 70.0, 600.0, limit_given=True)
    assert effort_note("effort", 90.0, 250.0, 300.0, limit_given=True) is None   # near the limit
    assert effort_note("proof", 90.0, 70.0, 300.0, limit_given=True) is None
    assert effort_note("time", 90.0, 70.0, 300.0, limit_given=True) is None


def test_a_bad_time_limit_is_refused() -> None:
    import pytest

    from poet_compiler.errors import PoetError

    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(PoetError, match="time limit must be a positive number"):
            api.compile(layered_graph(10), ram="90%", mode="remat", time_limit_s=bad)
