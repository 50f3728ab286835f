"""Solver child processes, through the installed console script, as a user runs them.

The README demo with every solver (the smoke set of ``make test-latest``, which runs it
against the newest releases pyproject allows), and two faults of a HiGHS child
(tests/support/highspy_shim): a banner on its stdout, as highspy 1.16 prints, must not
reach the result; an exception in it is one line and exit 1, with the traceback only
under ``--debug``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.commands.test_usage_errors import POETC

ROOT = Path(__file__).resolve().parents[2]
SHIM = ROOT / "tests" / "support" / "highspy_shim"
DEMO = ["compile", str(ROOT / "models" / "kws_dscnn.onnx"), "--device", "m4", "--ram", "256k"]

pytestmark = pytest.mark.smoke


def _poetc(args: list[str], cwd: Path, fault: str = "", ran: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if fault:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SHIM), env.get("PYTHONPATH", "")) if p)
        env["POETC_TEST_HIGHSPY"] = fault
    if ran is not None:
        env["POETC_TEST_HIGHSPY_RAN"] = str(ran)
    env.pop("POETC_DEBUG", None)
    return subprocess.run([str(POETC), *args], capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


# (solver, --time-limit): limits at which the HiGHS child is reached (its banner broke
# these before the child's results had a pipe of their own).
SOLVERS = [("auto", "20"), ("cpsat", "20"), ("highs", "10")]


@pytest.mark.parametrize(("solver", "limit"), SOLVERS, ids=[s for s, _ in SOLVERS])
def test_readme_demo_gives_a_schedule_with_every_solver(tmp_path: Path, solver: str, limit: str) -> None:
    proc = _poetc([*DEMO, "--solver", solver, "--time-limit", limit, "-o", "demo.poet"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "demo.json").read_text())
    assert report["status"] in ("optimal", "feasible"), report["status"]
    assert (tmp_path / "demo.poet").stat().st_size > 0


# A small effort, so the cover and presence bounds leave the proof to a solve on the chosen
# solver (the guided sub-problem), and a wall cap with room for the stages before it on a
# loaded machine.
HIGHS_RUN = ["--solver", "highs", "--effort", "3", "--time-limit", "120"]


def test_a_banner_on_the_highs_childs_stdout_does_not_reach_the_result(tmp_path: Path) -> None:
    ran = tmp_path.parent / f"{tmp_path.name}.ran"
    proc = _poetc([*DEMO, *HIGHS_RUN, "-o", "demo.poet"], tmp_path, fault="banner", ran=ran)
    assert proc.returncode == 0, proc.stderr
    assert ran.exists(), "the HiGHS child was never reached: the test proves nothing"
    assert "Traceback" not in proc.stderr
    assert json.loads((tmp_path / "demo.json").read_text())["status"] in ("optimal", "feasible")


def test_a_fault_in_the_highs_child_is_one_line_and_exit_1(tmp_path: Path) -> None:
    args = [*DEMO, *HIGHS_RUN, "-o", "demo.poet"]
    proc = _poetc(args, tmp_path, fault="raise")
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 1, proc.stderr
    assert len(err) == 1, proc.stderr
    assert err[0].startswith("internal error: the HiGHS solver process raised RuntimeError: injected fault")
    assert "report" in err[0] and "--debug" in err[0]
    assert list(tmp_path.iterdir()) == [], "nothing may be written when the compile fails"

    debug = _poetc(["--debug", *args], tmp_path, fault="raise")
    assert debug.returncode == 1
    assert "Traceback" in debug.stderr and "injected fault in the HiGHS child" in debug.stderr


def test_the_report_records_the_versions_that_produced_it(tmp_path: Path) -> None:
    import ortools
    import torch

    graph = ROOT / "tests" / "regressions" / "poet_linear_m4.json"
    proc = _poetc(["compile", str(graph), "--ram", "3388", "-o", "g.poet"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    versions = json.loads((tmp_path / "g.json").read_text())["versions"]
    # Without the local label, which a wheel's metadata may carry or not (2.13.0+cpu, 2.14.1 of 2.14.1+cu130).
    assert versions["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert versions["ortools"] == ortools.__version__
    assert set(versions) >= {"poetc", "highspy", "python"}
    assert _poetc(["--version"], tmp_path).stdout.split()[:2] == ["poetc", versions["poetc"]]
