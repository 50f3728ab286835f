"""Usage errors through the installed console script: one line on stderr, exit code 2.

These run ``poetc`` as a user does (the script the venv's ``pip install`` wrote), so they
see what ``main`` really does with whatever typer/click versions are installed — typer
0.29 raises its vendored click exceptions, which an in-process test against click's
classes would not notice.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.smoke  # in `make test-latest` (newest releases)

POETC = Path(sys.executable).with_name("poetc")

USAGE = [
    (["compile", "mlp", "--ram", "1M", "--bogus"], "no such option: --bogus"),
    (["nosuchcmd"], "no such command 'nosuchcmd'"),
    (["compile"], "missing argument 'model'"),
    (["compile", "mlp", "--threads", "many"], "--threads"),
    (["verify", "mlp"], "--schedule"),
]


def run_poetc(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installed console script; fail loudly if the venv has none."""
    assert POETC.is_file(), f"no console script at {POETC}: is the package installed (pip install -e .)?"
    return subprocess.run([str(POETC), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.mark.parametrize(("args", "says"), USAGE, ids=[" ".join(a) for a, _ in USAGE])
def test_usage_error_is_one_line_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    proc = run_poetc(*args, cwd=tmp_path)
    err = proc.stderr.strip()
    assert proc.returncode == 2, proc.stderr
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: ") and "Traceback" not in err, err
    assert says.lower() in err.lower(), err
    assert proc.stdout == ""
    assert list(tmp_path.iterdir()) == [], "nothing may be written on a usage error"


def test_help_exits_0(tmp_path: Path) -> None:
    proc = run_poetc("compile", "--help", cwd=tmp_path)
    assert proc.returncode == 0 and "--ram" in proc.stdout and proc.stderr == ""



def test_the_report_never_overwrites_the_input_graph(tmp_path: Path) -> None:
    """``poetc compile g.json -o g.poet`` would write its report to g.json, the input: one
    line, exit 2, the graph untouched. Without -o, beside the graph, the schedule is
    g.schedule.poet and its report g.schedule.json."""
    import json

    from tests.viz.graphs import chain_dict

    graph = tmp_path / "g.json"
    text = json.dumps(chain_dict(4))
    graph.write_text(text)
    proc = run_poetc("compile", "g.json", "--device", "m4", "--ram", "70%", "-o", "g.poet", "-q", cwd=tmp_path)
    err = proc.stderr.strip()
    assert proc.returncode == 2 and len(err.splitlines()) == 1 and "overwrite the input" in err, err
    assert graph.read_text() == text and sorted(p.name for p in tmp_path.iterdir()) == ["g.json"]
    proc = run_poetc("compile", "g.json", "--device", "m4", "--ram", "100%", "-q", "--time-limit", "10",
                     "--threads", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert graph.read_text() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.json", "g.schedule.json", "g.schedule.poet"]


@pytest.mark.parametrize("device", [[], ["--device", "m4"]], ids=["no device", "m4"])
def test_a_missing_model_file_is_named_as_such(tmp_path: Path, device: list[str]) -> None:
    """A missing .onnx file is what is wrong, with or without --device (it was reported as
    a missing --device without one): one line, exit 2, nothing written."""
    proc = run_poetc("compile", "nope.onnx", *device, "-o", "out.poet", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == ["error: nope.onnx: no such file"]
    assert not (tmp_path / "out.poet").exists()
