"""The compile's status line: one line rewritten in place on a terminal, one final line
in a log, nothing with --quiet, and never anything on stdout (--json stays parseable)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from poet_compiler import progress
from tests.commands.test_usage_errors import run_poetc


def _console(terminal: bool) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=terminal, width=120), buf


def test_terminal_line_is_rewritten_in_place() -> None:
    console, buf = _console(terminal=True)
    with progress.LiveStatus(console) as status:
        assert progress.active() is status
        progress.stage("tracing mlp")
        progress.stage("solving")
        for k in range(50):  # a solver reporting many incumbents
            assert progress.report("cpsat", 10.0 - k * 0.01, 9.0, "J")
        status._refresh()
        progress.stage("feasible")
        progress.report("schedule", 9.51, 9.0, "J")
    assert progress.active() is None
    out = buf.getvalue()
    assert out.count("\n") == 1 and out.endswith("\n\x1b[?25h")  # one line, ended at the close (cursor back)
    assert "tracing mlp" in out and "\r" in out  # earlier states were drawn over
    final = out.rsplit("\r", 1)[-1]
    assert "feasible" in final and "schedule: incumbent 9.51 J  bound 9 J  gap 5.36%" in final


def test_log_gets_one_final_line_and_errors_leave_none() -> None:
    console, buf = _console(terminal=False)
    with progress.LiveStatus(console):
        progress.stage("solving")
        for k in range(10):
            progress.report("cpsat", 10.0 - k, 1.0, "J")
    lines = buf.getvalue().splitlines()
    assert len(lines) == 1 and "solving" in lines[0] and "incumbent 1 J  bound 1 J  gap 0.00%" in lines[0]
    console, buf = _console(terminal=False)
    with pytest.raises(RuntimeError), progress.LiveStatus(console):
        progress.stage("tracing")
        raise RuntimeError("the error's own line says it")
    assert buf.getvalue() == ""
    assert not progress.report("cpsat", 1.0, 1.0, "J")  # no status shown: the solver prints its own


def test_long_compile_logs_one_status_line(tmp_path: Path) -> None:
    """A solve longer than the old 5-s log interval: one status line on stderr in all."""
    proc = run_poetc("compile", "kws_dscnn", "--device", "m4", "--ram", "30%", "--time-limit", "6",
                     "--threads", "1", "-o", str(tmp_path / "k.poet"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "incumbent" in lines[0] and "bound" in lines[0] and "gap" in lines[0]
    assert "poetc: kws_dscnn on m4" in proc.stdout


@pytest.mark.parametrize("flag", ["--json", "--quiet"])
def test_json_and_quiet_are_machine_clean(tmp_path: Path, flag: str) -> None:
    proc = run_poetc("compile", "mlp", "--device", "m4", "--ram", "100%", "--time-limit", "5", "--threads", "1",
                     "-o", str(tmp_path / "m.poet"), flag, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    if flag == "--json":
        report = json.loads(proc.stdout)  # the whole of stdout is one JSON document
        assert report["status"] in ("optimal", "feasible") and report["schedule_file"].endswith("m.poet")
