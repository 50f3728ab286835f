"""The C runtime on the real model zoo: for each zoo schedule at 30/50/70 %,
the C harness's trace equals the Python Program, its peak live bytes equal the
project simulator's, every input of every compute is found intact, stripped or not."""

from __future__ import annotations

from pathlib import Path

import pytest

from poet_compiler.schedule.program import Op
from poet_compiler.schedule.simulate import simulate
from tests.codegen.zoo_cases import CASES, zoo_case
from tests.runtime.harness import build_runtime, needs_cc, run_harness

pytestmark = needs_cc


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    return build_runtime(tmp_path_factory.mktemp("poet_rt_zoo"), "all") / "harness"


@pytest.mark.parametrize("model, ram", CASES)
def test_zoo_c_trace_matches_python(harness, tmp_path, model, ram):
    c = zoo_case(model, ram).compilation
    program, graph = c.result.program, c.graph
    peak = simulate(graph, c.costs, program).peak_bytes
    for strip in (False, True):
        path = tmp_path / f"{model}_{strip}.poet"
        path.write_bytes(c.bytecode(strip=strip))
        trace, figs, proc = run_harness(harness, path, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert trace == [str(ins) for ins in program]
        assert int(figs["peak_live_bytes"]) == peak
        assert int(figs["arena_high_water"]) <= int(figs["arena_bytes"]) == program.arena_bytes
        checks = 0 if strip else sum(len(graph.nodes[i.node].inputs) for i in program if i.op is Op.COMPUTE)
        assert int(figs["inputs_checked"]) == checks


def test_a_compacted_schedule_runs_in_c_as_in_python(harness, tmp_path):
    """End to end: a schedule that no static arena holds (tests/schedule/test_compact.py's
    9-node case) is compacted by finalize, written as a version-4 .poet file, and run by
    the C runtime: the same trace, MOVEs included, the simulator's peak, every input of
    every compute intact at its (moved) offset."""
    from poet_compiler.codegen.bytecode import encode
    from poet_compiler.codegen.bytecode.format import MOVE_VERSION
    from poet_compiler.solve.finalize import finalize
    from tests.schedule.test_compact import _fragmenting

    problem, schedule, _ = _fragmenting()
    res = finalize(problem, schedule, strategy="t")
    program, graph = res.program, problem.graph
    assert res.ok and program is not None and program.count(Op.MOVE) >= 1
    path = tmp_path / "compacted.poet"
    data = encode(program, graph)
    assert data[4] == MOVE_VERSION
    path.write_bytes(data)
    trace, figs, proc = run_harness(harness, path)
    assert proc.returncode == 0, proc.stderr
    assert trace == [str(ins) for ins in program]
    assert int(figs["peak_live_bytes"]) == simulate(graph, problem.costs, program).peak_bytes
    assert int(figs["arena_bytes"]) == program.arena_bytes <= problem.activation_budget
    assert int(figs["inputs_checked"]) == sum(len(graph.nodes[i.node].inputs) for i in program if i.op is Op.COMPUTE)
