"""The C runtime on the real model zoo (issue 8): for each zoo schedule at 30/50/70 %,
the C harness's trace equals the Python Program, its peak live bytes equal the
project simulator's, every input of every compute is found intact, stripped or not."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from poet_compiler.schedule.program import Op
from poet_compiler.schedule.simulate import simulate
from tests.codegen.zoo_cases import CASES, zoo_case

RUNTIME = Path(__file__).resolve().parents[2] / "runtime" / "c"
CC = shutil.which("cc") or shutil.which("gcc")
pytestmark = pytest.mark.skipif(CC is None or shutil.which("make") is None, reason="needs a C compiler and make")


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("poet_rt_zoo")
    subprocess.run(["make", "-s", "-C", str(RUNTIME), f"BUILD={out}", f"CC={CC}", "all"],
                   check=True, capture_output=True, text=True)
    return out / "harness"


def run_harness(exe: Path, path: Path) -> tuple[list[str], dict[str, str], subprocess.CompletedProcess]:
    proc = subprocess.run([str(exe), str(path)], capture_output=True, text=True, timeout=300)
    trace = [ln for ln in proc.stdout.splitlines() if not ln.startswith("#")]
    figs = dict(ln[2:].split(" ", 1) for ln in proc.stdout.splitlines() if ln.startswith("# "))
    return trace, figs, proc


@pytest.mark.parametrize("model, ram", CASES)
def test_zoo_c_trace_matches_python(harness, tmp_path, model, ram):
    c = zoo_case(model, ram).compilation
    program, graph = c.result.program, c.graph
    peak = simulate(graph, c.costs, program).peak_bytes
    for strip in (False, True):
        path = tmp_path / f"{model}_{strip}.poet"
        path.write_bytes(c.bytecode(strip=strip))
        trace, figs, proc = run_harness(harness, path)
        assert proc.returncode == 0, proc.stderr
        assert trace == [str(ins) for ins in program]
        assert int(figs["peak_live_bytes"]) == peak
        assert int(figs["arena_high_water"]) <= int(figs["arena_bytes"]) == program.arena_bytes
        checks = 0 if strip else sum(len(graph.nodes[i.node].inputs) for i in program if i.op is Op.COMPUTE)
        assert int(figs["inputs_checked"]) == checks
