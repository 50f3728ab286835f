"""Input files that once broke poetc (copies of shared/regressions/), each through the
installed console script as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.commands.test_usage_errors import run_poetc

pytestmark = pytest.mark.smoke  # in `make test-latest` (newest releases)

HERE = Path(__file__).parent
# POET's published solver (PuLP on CBC, proven optimal) reaches 4.6373e-4 J on this graph
# and budget (BENCHMARKS.md, "Against peers on their own inputs": make bench-peers-poet POET=...).
POET_OPTIMUM_J = 4.6373e-4


@pytest.mark.parametrize("solver", ["auto", "cpsat", "highs"])
def test_poet_linear_m4_is_solved_to_optimality_by_every_solver(tmp_path: Path, solver: str) -> None:
    """POET's 27-node `linear` example: a node reads one input twice (accepted), and CP-SAT
    used to abort the process (SIGABRT) when stopped early; now every solver proves it."""
    out = tmp_path / "linear.poet"
    proc = run_poetc("compile", str(HERE / "poet_linear_m4.json"), "--ram", "3388", "--deadline", "1.5x",
                     "--solver", solver, "-o", str(out), "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["status"] == "optimal", report["message"]
    assert report["energy_j"] <= POET_OPTIMUM_J
    assert report["lower_bound_j"] <= report["energy_j"] * (1 + 1e-9)
