"""The C99 device runtime, built and run from pytest (runtime/c).

Builds the library and harness with the system C compiler under -std=c99 -Wall -Wextra
-Werror, and again with AddressSanitizer + UBSan; runs the harness on generated .poet
files and compares its trace and peak with the Python Program; checks every corruption
class gives the documented error code, in C as in Python; runs libFuzzer briefly when
clang is available.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from poet_compiler.codegen.bytecode import encode
from poet_compiler.schedule.program import Op
from tests.codegen.programs import (
    budget_program,
    chain_graph,
    checkpoint_all_peak,
    corruption_cases,
    peak_live_bytes,
    resnet18_cifar_graph,
    training_graph,
)
from tests.runtime.harness import (
    assert_decoders_agree_on_mutations,
    build_runtime,
    c_codes,
    needs_cc,
    run_harness,
    run_libfuzzer,
)

pytestmark = needs_cc


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    return build_runtime(tmp_path_factory.mktemp("poet_rt_build"), "all", "asan")


def _cases():
    g = resnet18_cifar_graph()
    ca = checkpoint_all_peak(g)
    ws = training_graph([("c0", "conv", [], 96), ("r0", "elementwise", [0], 96), ("c1", "conv", [1], 48),
                         ("fc", "matmul", [2], 16)], name="ws", workspace=40)
    out = {"chain_ckpt": (chain_graph(8), budget_program(chain_graph(8), None))}
    for frac in (0.3, 0.5, 0.7):
        for paging in (False, True):
            out[f"resnet_{int(frac * 100)}_{'pg' if paging else 'rm'}"] = (
                g, budget_program(g, int(ca * frac), paging=paging, seed=int(frac * 10)))
    for seed in range(3):
        out[f"chain_budget_{seed}"] = (chain_graph(9), budget_program(chain_graph(9), 2600, seed=seed))
    out["workspace"] = (ws, budget_program(ws, 200, seed=1))
    return out


CASES = _cases()


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("sanitized", [False, True])
def test_trace_and_peak_match_python(build, tmp_path, name, sanitized):
    graph, program = CASES[name]
    path = tmp_path / f"{name}.poet"
    path.write_bytes(encode(program, graph))
    trace, figs, proc = run_harness(build / ("harness_asan" if sanitized else "harness"), path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert trace == [str(ins) for ins in program]
    assert int(figs["peak_live_bytes"]) == peak_live_bytes(program, graph)
    assert int(figs["arena_high_water"]) <= int(figs["arena_bytes"]) == program.arena_bytes
    # Each consumer found every input intact: one check per input of every compute.
    n_checks = sum(len(graph.nodes[i.node].inputs) for i in program if i.op is Op.COMPUTE)
    assert int(figs["inputs_checked"]) == n_checks
    # Paging went through the simulated flash, byte for byte.
    sizes = [n.output_bytes for n in graph.nodes]
    assert int(figs["flash_written_bytes"]) == sum(sizes[i.node] for i in program if i.op is Op.PAGE_OUT)
    assert int(figs["flash_read_bytes"]) == sum(sizes[i.node] for i in program if i.op is Op.PAGE_IN)


def test_peak_matches_project_simulator(build, tmp_path):
    from poet_compiler.api import load_costs
    from poet_compiler.schedule import simulate as sim

    for name in ("resnet_50_pg", "workspace", "chain_budget_1"):
        graph, program = CASES[name]
        path = tmp_path / f"{name}.poet"
        path.write_bytes(encode(program, graph))
        _, figs, proc = run_harness(build / "harness", path, "-q")
        assert proc.returncode == 0, proc.stderr
        expected = sim.simulate(graph, load_costs(graph, "m4"), program).peak_bytes
        assert int(figs["peak_live_bytes"]) == expected


def test_stripped_file_runs_the_same_trace(build, tmp_path):
    graph, program = CASES["resnet_50_pg"]
    path = tmp_path / "s.poet"
    path.write_bytes(encode(program, graph, strip=True))
    trace, figs, proc = run_harness(build / "harness", path)
    assert proc.returncode == 0, proc.stderr
    assert trace == [str(ins) for ins in program]
    assert figs["node_table"] == "0" and figs["inputs_checked"] == "0"


def test_harness_catches_a_missing_input(build, tmp_path):
    """The input check is real: encode a chain's program with a node table that claims
    l2 also reads l0, so the backward reads differ from what the schedule keeps."""
    program = budget_program(chain_graph(3), None)
    lying = training_graph([("l0", "elementwise", [], 1024), ("l1", "elementwise", [0], 2048),
                            ("l2", "elementwise", [1, 0], 3072)], name="lying")
    assert [n.output_bytes for n in lying.nodes] == [n.output_bytes for n in chain_graph(3).nodes]
    path = tmp_path / "lying.poet"
    path.write_bytes(encode(program, lying))
    _, _, proc = run_harness(build / "harness", path, "-q")
    assert proc.returncode == 1
    assert "input not in RAM" in proc.stderr


def test_every_corruption_class_gives_its_code(build, tmp_path):
    cases = corruption_cases()
    paths = []
    for name, (data, _) in sorted(cases.items()):
        paths.append(tmp_path / f"{name}.poet")
        paths[-1].write_bytes(data)
    got = c_codes(build, paths)
    assert got == [cases[name][1] for name in sorted(cases)]


def test_planning_file_is_not_executable(build, tmp_path):
    graph, program = CASES["chain_ckpt"]
    path = tmp_path / "plan.poet"
    path.write_bytes(encode(program))          # no graph: no sizes
    assert c_codes(build, [path]) == ["POET_E_NOT_EXECUTABLE"]


def test_c_and_python_agree_on_mutated_files(build, tmp_path):
    """Differential fuzz: random edits behind a valid CRC; both decoders give one code."""
    bases = [encode(p, g, strip=True) for g, p in (CASES["chain_budget_0"], CASES["workspace"],
                                                   CASES["chain_budget_2"])]
    assert_decoders_agree_on_mutations(build, tmp_path, bases, seed=1234)


@pytest.mark.skipif(shutil.which("clang") is None, reason="libFuzzer needs clang")
def test_short_libfuzzerrun_harness(build, tmp_path):
    run_libfuzzer(build, tmp_path, {name: encode(p, g) for name, (g, p) in CASES.items()
                                    if not name.startswith("resnet")}, seed=1)
