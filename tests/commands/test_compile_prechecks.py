"""``poetc compile``: arguments that need no model are refused before the (slow) trace.

The frontends are replaced by ones that fail the test if called, so each case proves
the order — the bad argument is reported without tracing anything — not a speed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import poet_compiler.frontends as frontends
from poet_compiler.cli import main


@pytest.fixture
def no_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    def traced(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was traced before the cheap arguments were checked")

    for name in ("trace_zoo", "load_graph", "load_model"):
        monkeypatch.setattr(frontends, name, traced)


def _broken_profile(tmp_path: Path) -> Path:
    path = tmp_path / "broken.json"
    path.write_text('{"format": "poet-profile/1", "name": "broken"')  # truncated JSON
    return path


CASES = [
    (["--device", "m4", "--ram", "0"], "RAM budget must be positive"),
    (["--device", "m4", "--ram", "12 parsecs"], "is not a size"),
    (["--device", "m4", "--ram", "256k", "--deadline", "soon"], "is not a duration"),
    (["--device", "no_such_device", "--ram", "256k"], "unknown device 'no_such_device'"),
    (["--device", "BROKEN", "--ram", "256k"], "broken.json"),
    (["--ram", "256k"], "no device given"),
    (["--device", "m4", "--ram", "256k", "--loss", "sum"], "--loss applies to .onnx models only"),
    (["--device", "m4", "--ram", "256k", "--formulation", "sparse"], "unknown formulation 'sparse'"),
    (["--device", "m4", "--ram", "256k", "--time-limit", "0"], "time limit must be a positive number of seconds"),
    (["--device", "m4", "--ram", "256k", "--threads", "0"], "threads must be >= 1"),
    (["--device", "m4", "--ram", "256k", "--memory-limit", "lots"], "memory limit 'lots' is not a size"),
    (["--device", "m4", "--ram", "256k", "--memory-limit", "0"], "memory limit must be positive"),
]


@pytest.mark.parametrize(("args", "says"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_refused_before_the_trace(no_trace: None, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  args: list[str], says: str) -> None:
    args = [str(_broken_profile(tmp_path)) if a == "BROKEN" else a for a in args]
    rc = main(["compile", "mlp", *args, "-q", "-o", str(tmp_path / "out.poet")])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert says in err, err
    assert not (tmp_path / "out.poet").exists()
