"""The C99 device runtime, built and run from pytest (runtime/c, issue 8).

Builds the library and harness with the system C compiler under -std=c99 -Wall -Wextra
-Werror, and again with AddressSanitizer + UBSan; runs the harness on generated .poet
files and compares its trace and peak with the Python Program; checks every corruption
class gives the documented error code, in C as in Python; runs libFuzzer briefly when
clang is available.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

from poet_compiler.codegen.bytecode import BytecodeFormatError, decode, encode
from poet_compiler.schedule.program import Op
from tests.codegen.programs import (
    budget_program, chain_graph, checkpoint_all_peak, corruption_cases, fix_crc, peak_live_bytes,
    resnet18_cifar_graph, training_graph,
)

RUNTIME = Path(__file__).resolve().parents[2] / "runtime" / "c"
CC = shutil.which("cc") or shutil.which("gcc")
pytestmark = pytest.mark.skipif(CC is None or shutil.which("make") is None, reason="needs a C compiler and make")


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("poet_rt_build")
    subprocess.run(["make", "-s", "-C", str(RUNTIME), f"BUILD={out}", f"CC={CC}", "all", "asan"],
                   check=True, capture_output=True, text=True)
    return out


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


def _run(exe: Path, path: Path, *args: str) -> tuple[list[str], dict[str, str], subprocess.CompletedProcess]:
    proc = subprocess.run([str(exe), *args, str(path)], capture_output=True, text=True, timeout=120)
    trace = [ln for ln in proc.stdout.splitlines() if not ln.startswith("#")]
    figs = dict(ln[2:].split(" ", 1) for ln in proc.stdout.splitlines() if ln.startswith("# "))
    return trace, figs, proc


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("sanitized", [False, True])
def test_trace_and_peak_match_python(build, tmp_path, name, sanitized):
    graph, program = CASES[name]
    path = tmp_path / f"{name}.poet"
    path.write_bytes(encode(program, graph))
    trace, figs, proc = _run(build / ("harness_asan" if sanitized else "harness"), path)
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
        _, figs, proc = _run(build / "harness", path, "-q")
        assert proc.returncode == 0, proc.stderr
        expected = sim.simulate(graph, load_costs(graph, "m4"), program).peak_bytes
        assert int(figs["peak_live_bytes"]) == expected


def test_stripped_file_runs_the_same_trace(build, tmp_path):
    graph, program = CASES["resnet_50_pg"]
    path = tmp_path / "s.poet"
    path.write_bytes(encode(program, graph, strip=True))
    trace, figs, proc = _run(build / "harness", path)
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
    _, _, proc = _run(build / "harness", path, "-q")
    assert proc.returncode == 1
    assert "input not in RAM" in proc.stderr


def _check(build: Path, paths: list[Path]) -> list[str]:
    proc = subprocess.run([str(build / "harness_asan"), "-c", *map(str, paths)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return [ln.split(" ", 1)[0] for ln in proc.stdout.splitlines()]


def test_every_corruption_class_gives_its_code(build, tmp_path):
    cases = corruption_cases()
    paths = []
    for name, (data, _) in sorted(cases.items()):
        paths.append(tmp_path / f"{name}.poet")
        paths[-1].write_bytes(data)
    got = _check(build, paths)
    assert got == [cases[name][1] for name in sorted(cases)]


def test_planning_file_is_not_executable(build, tmp_path):
    graph, program = CASES["chain_ckpt"]
    path = tmp_path / "plan.poet"
    path.write_bytes(encode(program))          # no graph: no sizes
    assert _check(build, [path]) == ["POET_E_NOT_EXECUTABLE"]


def _py_code(data: bytes) -> str:
    try:
        decode(data)
    except BytecodeFormatError as exc:
        return exc.code
    return "POET_OK"


def test_c_and_python_agree_on_mutated_files(build, tmp_path):
    """Differential fuzz: random edits behind a valid CRC; both decoders give one code."""
    rng = random.Random(1234)
    bases = [encode(p, g, strip=True) for g, p in (CASES["chain_budget_0"], CASES["workspace"],
                                                   CASES["chain_budget_2"])]
    paths, expected = [], []
    for k in range(400):
        bad = bytearray(rng.choice(bases))
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(10, len(bad))
            if rng.random() < 0.8:
                bad[at] = rng.randrange(256)
            else:
                del bad[at]
        data = fix_crc(bytes(bad))
        paths.append(tmp_path / f"m{k}.poet")
        paths[-1].write_bytes(data)
        expected.append(_py_code(data))
    got = _check(build, paths)
    mismatches = [(p.name, c, e) for p, c, e in zip(paths, got, expected)
                  if c != e and c not in ("POET_E_NOT_EXECUTABLE", "POET_E_RESOURCES")]
    assert not mismatches, mismatches[:5]
    assert len(set(expected)) > 4          # the mutations did reach several checks


@pytest.mark.skipif(shutil.which("clang") is None, reason="libFuzzer needs clang")
def test_short_libfuzzer_run(build, tmp_path):
    proc = subprocess.run(["make", "-s", "-C", str(RUNTIME), f"BUILD={build}", "fuzz"], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"clang cannot build a libFuzzer target here: {proc.stderr.strip()[:200]}")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, (g, p) in CASES.items():
        if not name.startswith("resnet"):
            (corpus / f"{name}.poet").write_bytes(encode(p, g))
    run = subprocess.run([str(build / "fuzz_loader"), "-runs=3000", "-max_len=4096", "-seed=1", str(corpus)],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Done 3000 runs" in run.stderr
