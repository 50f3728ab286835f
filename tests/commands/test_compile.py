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
