"""``poetc compile`` on bad input: one line naming what is wrong, exit code 2, nothing written."""

from __future__ import annotations

import json

import pytest

from poet_compiler.cli import main
from tests.viz.graphs import chain_dict

BAD = [
    (["--ram", "0"], "RAM"),
    (["--ram", "-1"], "RAM"),
    (["--ram", "abc"], "RAM"),
    (["--ram", "256kk"], "RAM"),
    (["--ram", "80%", "--deadline", "0.5x"], "compute-only minimum"),
    (["--ram", "80%", "--deadline", "1ns"], "compute-only minimum"),
    (["--ram", "80%", "--device", "no_such_device"], "no_such_device"),
    (["--ram", "80%", "--strategy", "bogus"], "unknown strategy 'bogus'"),
    (["--ram", "80%", "--solver", "bogus"], "unknown solver 'bogus'"),
    (["--ram", "80%", "--mode", "bogus"], "unknown mode 'bogus'"),
    (["--ram", "80%", "--gap", "1.5"], "gap"),
    (["--ram", "80%", "--gap", "-0.1"], "gap"),
]


@pytest.mark.parametrize(("args", "says"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args: list[str], says: str) -> None:
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps(chain_dict(4)))
    out = tmp_path / "schedule.poet"   # not g.poet: its report g.json would be the input
    device = [] if "--device" in args else ["--device", "m4"]
    rc = main(["compile", str(graph), *device, *args, "-o", str(out), "-q", "--time-limit", "5", "--threads", "1"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert says.lower() in err.lower(), err
    assert list(tmp_path.iterdir()) == [graph], "nothing may be written on bad input"


def test_gap_option_is_honoured(tmp_path, capsys) -> None:
    """--gap 0 on a small graph: the answer is proven optimal (gap 0), and the report says so."""
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps(chain_dict(6)))
    rc = main(["compile", str(graph), "--device", "m4", "--ram", "70%", "--gap", "0", "-o", str(tmp_path / "s.poet"),
               "--json", "--time-limit", "20", "--threads", "1"])
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "optimal" and report["gap"] == 0.0


def test_the_summary_says_where_the_time_went(tmp_path, capsys, monkeypatch) -> None:
    """The printed summary ends with the whole command's seconds and the stages that used
    them (the report's compile_s, trace_s and stage_s), in the order they ran."""
    monkeypatch.setenv("COLUMNS", "240")   # one table row on one line
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps(chain_dict(6)))
    rc = main(["compile", str(graph), "--device", "m4", "--ram", "70%", "-o", str(tmp_path / "s.poet"),
               "--time-limit", "20", "--threads", "1"])
    assert rc == 0
    out = capsys.readouterr().out
    line = next(row for row in out.splitlines() if "│ time " in row)
    report = json.loads((tmp_path / "s.json").read_text())
    assert f"│ {report['compile_s']:.1f} s" in line
    from poet_compiler.solve.clock import STAGES

    # The sidecar's keys are sorted by name: the order they ran in is STAGES'.
    shown = sorted((name for name, secs in report["stage_s"].items() if secs >= 0.05), key=STAGES.index)
    positions = [line.index(f"{name} ") for name in shown]
    assert positions == sorted(positions)


def test_time_split() -> None:
    from poet_compiler.reporting import time_split

    assert time_split({"energy_j": 1.0}) is None
    assert time_split({"compile_s": 23.04, "trace_s": 6.4, "costing_s": 0.01,
                       "stage_s": {"warm_starts": 5.5, "cover": 2.94, "other": 0.0}}) == \
        "23.0 s: trace 6.4, warm_starts 5.5, cover 2.9"
    assert time_split({"compile_s": 20.5, "startup_s": 0.33, "trace_s": 6.8, "stage_s": {"guided": 3.9}}) == \
        "20.5 s: startup 0.3, trace 6.8, guided 3.9"


def _spy_started(monkeypatch) -> list[float | None]:  # noqa: ANN001
    """The ``started`` each api.compile call gets, with the process made 600 s old."""
    import time

    from poet_compiler import api

    monkeypatch.setattr("poet_compiler.cli.process_started", lambda: time.perf_counter() - 600.0)
    seen: list[float | None] = []
    real = api.compile

    def spy(*args, **kwargs):  # noqa: ANN002, ANN003
        seen.append(kwargs["started"])
        return real(*args, **kwargs)

    monkeypatch.setattr(api, "compile", spy)
    return seen


def _chain_args(tmp_path) -> list[str]:  # noqa: ANN001
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps(chain_dict(6)))
    return ["compile", str(graph), "--device", "m4", "--ram", "100%", "--strategy", "checkpoint_all",
            "-o", str(tmp_path / "s.poet"), "-q"]


def test_main_in_a_long_lived_process_counts_the_limit_from_the_call(tmp_path, monkeypatch) -> None:
    """A test worker or a notebook calling main: its process's age is not the command's
    (under pytest-xdist a 10-minute-old worker left a 60 s compile no time at all)."""
    import time

    seen = _spy_started(monkeypatch)
    before = time.perf_counter()
    assert main(_chain_args(tmp_path)) == 0
    assert seen and seen[0] is not None and before <= seen[0] <= time.perf_counter()


def test_the_console_script_counts_the_limit_from_its_process_start(tmp_path, monkeypatch) -> None:
    import time

    from poet_compiler.cli import run

    seen = _spy_started(monkeypatch)
    monkeypatch.setattr("sys.argv", ["poetc", *_chain_args(tmp_path)])
    with pytest.raises(SystemExit) as stop:
        run()
    assert stop.value.code == 0
    assert seen and seen[0] is not None and seen[0] <= time.perf_counter() - 599.0


def test_the_same_inputs_give_the_same_schedule_bytes(tmp_path) -> None:
    """The README demo twice, on two threads, at the default effort: the same schedule
    file, byte for byte (every stage stops on work; the 600 s wall cap is far). A short
    --time-limit would lower the effort and could make the wall cap decide on a loaded
    machine (stopped_by=time), the one case where the bytes may differ."""
    from pathlib import Path

    demo = Path(__file__).resolve().parents[2] / "models" / "kws_dscnn.onnx"
    written = []
    for run in ("a", "b"):
        out = tmp_path / run / "kws.poet"
        out.parent.mkdir()
        assert main(["compile", str(demo), "--device", "m4", "--ram", "256k", "-o", str(out), "-q",
                     "--threads", "2"]) == 0
        written.append(out.read_bytes())
    assert written[0] == written[1]
