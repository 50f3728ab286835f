"""compare/sweep: grid order, every figure, identical results in process / pool / Ray,
cache hits counted, interrupted sweeps keep their finished cells, bad input exits 2."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import poet_compiler as pc
from poet_compiler import sweeps
from poet_compiler.cli import main
from poet_compiler.comparison import parse_strategy, plot
from poet_compiler.errors import PoetError
from poet_compiler.solve.result import MEASURED_KEYS
from tests.viz.graphs import chain, chain_dict

RAM = ["60%", "80%", "100%"]
DEADLINE = ["1.2x", "2x"]
STRATEGIES = ["optimal", "checkmate", "paging_only"]
KW = dict(time_limit_s=20.0, threads=1)
TIMING = MEASURED_KEYS  # measured wall times, not results (typed in NoteFields: metadata=MEASURED)


def results(df: pd.DataFrame) -> pd.DataFrame:
    return df[[c for c in df.columns if c not in TIMING]].reset_index(drop=True)


@pytest.fixture(scope="module")
def graph():
    return chain(5)


@pytest.fixture(scope="module")
def reference_frame(graph):
    return pc.compare(graph, None, ram=RAM, deadline=DEADLINE, strategies=STRATEGIES, **KW)


def test_compare_one_row_per_cell_in_grid_order(reference_frame):
    df = reference_frame
    assert len(df) == 3 * 2 * 3
    assert list(df.columns[:6]) == ["model", "device", "ram", "deadline", "strategy", "mode"]
    expected = [(r, d, s) for r in RAM for d in DEADLINE for s in STRATEGIES]
    assert list(zip(df["ram"], df["deadline"], df["strategy"])) == expected
    for col in ("status", "energy_j", "runtime_s", "peak_ram_bytes", "ram_budget_bytes", "deadline_s",
                "n_compute", "n_page_in", "n_page_out", "checkpoint_all_peak_bytes", "message"):
        assert col in df.columns
    ok = df[df["status"].isin(["optimal", "feasible"])]
    assert len(ok) >= 6
    assert (ok["peak_ram_bytes"] <= ok["ram_budget_bytes"]).all()
    assert (ok["runtime_s"] <= ok["deadline_s"] * (1 + 1e-9)).all()
    # the optimum is never worse than a baseline on the same cell
    for (_, _), cell in ok.groupby(["ram", "deadline"]):
        if "optimal" in set(cell["strategy"]):
            best = cell.loc[cell["strategy"] == "optimal", "energy_j"].iloc[0]
            assert best <= cell["energy_j"].min() * (1 + 1e-6)
    assert set(df.loc[df["strategy"] == "checkmate", "mode"]) == {"remat"}
    assert df.attrs == {"cells": 18, "solved": 18, "cached": 0}


def test_process_pool_gives_identical_results(graph, reference_frame, tmp_path):
    df = pc.sweep(graph, None, RAM, DEADLINE, STRATEGIES, jobs=2, cache_dir=None, **KW)
    pd.testing.assert_frame_equal(results(df), results(reference_frame))


def test_ray_gives_identical_results(graph, reference_frame):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        df = pc.sweep(graph, None, RAM, DEADLINE, STRATEGIES, ray="local", cache_dir=None, **KW)
    finally:
        ray.shutdown()
    pd.testing.assert_frame_equal(results(df), results(reference_frame))


def test_repeat_sweep_solves_nothing(graph, reference_frame, tmp_path, monkeypatch):
    calls: list[int] = []
    real = sweeps.run_cell

    def counting(task):
        calls.append(task.index)
        return real(task)

    monkeypatch.setattr(sweeps, "run_cell", counting)
    cache = tmp_path / "cache"
    first = pc.sweep(graph, None, RAM, DEADLINE, STRATEGIES, jobs=1, cache_dir=cache, output=tmp_path / "a.csv", **KW)
    assert len(calls) == 18 and first.attrs["solved"] == 18
    assert len(list(cache.rglob("*.json"))) == 18
    second = pc.sweep(graph, None, RAM, DEADLINE, STRATEGIES, jobs=1, cache_dir=cache, output=tmp_path / "b.csv", **KW)
    assert len(calls) == 18, "the repeat solved a cell"
    assert second.attrs == {"cells": 18, "solved": 0, "cached": 18}
    pd.testing.assert_frame_equal(second, first)
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    # any change of graph, budget or option is a different cell
    pc.sweep(graph, None, RAM, DEADLINE, STRATEGIES, jobs=1, cache_dir=cache, time_limit_s=19.0, threads=1)
    assert len(calls) == 36
    pc.sweep(chain(5, size=1001), None, ["60%"], ["2x"], ["optimal"], jobs=1, cache_dir=cache, **KW)
    assert len(calls) == 37


def test_csv_matches_frame(graph, tmp_path):
    out = tmp_path / "s.csv"
    df = pc.sweep(graph, None, RAM[:2], DEADLINE, STRATEGIES[:2], jobs=1, cache_dir=None, output=out, **KW)
    back = pd.read_csv(out)
    assert list(back.columns) == list(df.columns)
    assert list(back["energy_j"].fillna(-1)) == pytest.approx(list(df["energy_j"].fillna(-1)))
    assert list(back["status"]) == list(df["status"])


def test_interrupted_sweep_keeps_finished_cells(graph, tmp_path, monkeypatch):
    real = sweeps.run_cell
    calls: list[int] = []

    def interrupted(task):
        calls.append(task.index)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real(task)

    monkeypatch.setattr(sweeps, "run_cell", interrupted)
    cache, out = tmp_path / "cache", tmp_path / "s.csv"
    with pytest.raises(KeyboardInterrupt):
        pc.sweep(graph, None, RAM, DEADLINE, STRATEGIES, jobs=1, cache_dir=cache, output=out, **KW)
    assert len(pd.read_csv(out)) == 4
    assert len(list(cache.rglob("*.json"))) == 4
    monkeypatch.setattr(sweeps, "run_cell", real)
    df = pc.sweep(graph, None, RAM, DEADLINE, STRATEGIES, jobs=1, cache_dir=cache, output=out, **KW)
    assert df.attrs == {"cells": 18, "solved": 14, "cached": 4}
    assert len(pd.read_csv(out)) == 18


def test_damaged_cache_entry_is_a_miss(graph, tmp_path):
    cache = tmp_path / "cache"
    pc.sweep(graph, None, ["80%"], ["2x"], ["optimal"], jobs=1, cache_dir=cache, **KW)
    (entry,) = cache.rglob("*.json")
    entry.write_text("{not json")
    df = pc.sweep(graph, None, ["80%"], ["2x"], ["optimal"], jobs=1, cache_dir=cache, **KW)
    assert df.attrs["solved"] == 1
    assert json.loads(entry.read_text())["row"]["status"] == df["status"].iloc[0]


def test_strategy_specs():
    assert parse_strategy("optimal", "poet") == ("optimal", "poet")
    assert parse_strategy("remat", "poet") == ("optimal", "remat")
    assert parse_strategy("optimal:paging", "poet") == ("optimal", "paging")
    for bad in ("nope", "optimal:fast", ""):
        with pytest.raises(PoetError):
            parse_strategy(bad, "poet")


def test_fig4_modes_and_plot(graph):
    df = pc.compare(graph, None, ram="80%", deadline=["1.2x", "2x"], strategies=["remat", "paging", "poet"], **KW)
    assert list(df["mode"][:3]) == ["remat", "paging", "poet"]
    fig = plot(df)
    assert len(fig.axes) == 1 and fig.axes[0].get_xlabel().startswith("deadline")
    both = pc.compare(graph, None, ram=["80%", "100%"], deadline=["1.2x", "2x"], strategies=["poet"], **KW)
    assert len(plot(both).axes) == 2


def test_bad_grids_raise(graph):
    with pytest.raises(PoetError, match="unknown strategy"):
        pc.compare(graph, None, ram=RAM, strategies=["optimal", "bogus"])
    with pytest.raises(PoetError, match="empty grid"):
        pc.compare(graph, None, ram=[], strategies=["optimal"])
    with pytest.raises(PoetError, match="empty grid"):
        pc.sweep([], None, ram=RAM)
    with pytest.raises(PoetError, match="unreachable"):
        pc.sweep(graph, None, ram=RAM, ray="127.0.0.1:1")


@pytest.mark.parametrize("extra,message", [
    (["--strategies", "optimal,bogus"], "unknown strategy 'bogus'"),
    (["--ram", ","], "empty grid"),
    (["--ray", "127.0.0.1:1"], "unreachable"),
    (["--ray", "not-an-address"], "not HOST:PORT"),
    (["--deadline", "0.5x"], "below the compute-only minimum"),
    (["--jobs", "0"], "--jobs"),
])
def test_cli_bad_input_exits_2(tmp_path, capsys, extra, message):
    g = tmp_path / "g.json"
    g.write_text(json.dumps(chain_dict(4)))
    out = tmp_path / "s.csv"
    argv = ["sweep", str(g), "--ram", "80%", "-o", str(out), "-q", "--cache", str(tmp_path / "c"), *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]
    assert not out.exists()


def test_cli_sweep_writes_csv_and_reuses_cache(tmp_path, capsys):
    g = tmp_path / "g.json"
    g.write_text(json.dumps(chain_dict(4)))
    out = tmp_path / "s.csv"
    argv = ["sweep", str(g), "--ram", "60%,80%,100%", "--deadline", "1.2x,2x", "--strategies",
            "optimal,checkmate,paging_only", "-o", str(out), "-j", "2", "--cache", str(tmp_path / "c"),
            "--threads", "1", "--time-limit", "20"]
    assert main(argv) == 0
    first = out.read_bytes()
    assert "18 solved, 0 from cache" in capsys.readouterr().err
    assert main([*argv, "-q"]) == 0
    assert "0 solved, 18 from cache" in capsys.readouterr().err
    assert out.read_bytes() == first


def test_cache_entry_off_the_row_schema_is_a_miss(graph, tmp_path):
    cache = tmp_path / "cache"
    pc.sweep(graph, None, ["80%"], ["2x"], ["optimal"], jobs=1, cache_dir=cache, **KW)
    (entry,) = cache.rglob("*.json")
    data = json.loads(entry.read_text())
    data["row"]["energy_j"] = "a lot"
    entry.write_text(json.dumps(data))
    df = pc.sweep(graph, None, ["80%"], ["2x"], ["optimal"], jobs=1, cache_dir=cache, **KW)
    assert df.attrs["solved"] == 1 and isinstance(df["energy_j"].iloc[0], float)


def test_the_time_limit_sets_the_effort_as_in_compile(graph):
    """A sweep's cells follow compile's rule: an explicit limit gives 0.3 deterministic s
    per second of it, no limit the default effort, --effort wins over both."""
    def effort(**kw) -> float:
        df = pc.compare(graph, None, ram="80%", strategies="optimal", threads=1, **kw)
        return float(df["effort"].iloc[0])

    assert effort(time_limit_s=300.0) == 90.0
    assert effort() == 30.0
    assert effort(time_limit_s=300.0, effort="quick") == 5.0
