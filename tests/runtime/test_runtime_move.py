"""MOVE (format version 4) in the C runtime: the harness runs programs with MOVEs, the
moved bytes are what the next consumer reads, and C and Python refuse bad MOVEs with one
code (runtime/c, docs/bytecode.md)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from poet_compiler.codegen.bytecode import encode
from poet_compiler.schedule.program import Op
from tests.codegen.move_programs import hand_program, move_cases, with_moves
from tests.codegen.programs import (
    budget_program,
    chain_graph,
    checkpoint_all_peak,
    decoder_verdict,
    fix_crc,
    resnet18_cifar_graph,
    training_graph,
)
from tests.runtime.harness import (
    CC,
    RUNTIME,
    assert_decoders_agree_on_mutations,
    build_runtime,
    c_codes,
    needs_cc,
    run_harness,
    run_libfuzzer,
)

pytestmark = needs_cc
CFLAGS = "-std=c99 -Wall -Wextra -Werror -pedantic -O2"


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    return build_runtime(tmp_path_factory.mktemp("poet_rt_move"), "all", "asan")


def _harness(build_dir: Path, cflags: str) -> Path:
    """The harness built with extra CFLAGS (in its own directory)."""
    subprocess.run(["make", "-s", "-C", str(RUNTIME), f"BUILD={build_dir}", f"CC={CC}", f"CFLAGS={CFLAGS} {cflags}",
                    str(build_dir / "harness")], check=True, capture_output=True, text=True)
    return build_dir / "harness"


def _cases():
    g = resnet18_cifar_graph()
    ca = checkpoint_all_peak(g)
    ws = training_graph([("c0", "conv", [], 96), ("r0", "elementwise", [0], 96), ("c1", "conv", [1], 48),
                         ("fc", "matmul", [2], 16)], name="ws", workspace=40)
    out = {"hand": hand_program()}
    for seed in range(3):
        out[f"chain_{seed}"] = (chain_graph(9), with_moves(budget_program(chain_graph(9), 2600, seed=seed),
                                                           chain_graph(9), seed))
    out["resnet_50"] = (g, with_moves(budget_program(g, int(ca * 0.5), seed=5), g, 5))
    out["resnet_30_rm"] = (g, with_moves(budget_program(g, int(ca * 0.3), paging=False, seed=3), g, 3, rate=0.6))
    out["workspace"] = (ws, with_moves(budget_program(ws, 200, seed=1), ws, 1, rate=0.6))
    return out


CASES = _cases()


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("sanitized", [False, True])
def test_trace_and_moved_bytes(build, tmp_path, name, sanitized):
    graph, program = CASES[name]
    assert program.n_move > 0
    path = tmp_path / f"{name}.poet"
    data = encode(program, graph)
    assert data[4] == 4
    path.write_bytes(data)
    trace, figs, proc = run_harness(build / ("harness_asan" if sanitized else "harness"), path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert figs["status"] == "POET_OK"
    assert trace == [str(ins) for ins in program]           # "MOVE n @new" like str(Instruction)
    # Every consumer found every input intact, moved ones at their new offsets.
    n_checks = sum(len(graph.nodes[i.node].inputs) for i in program if i.op is Op.COMPUTE)
    assert int(figs["inputs_checked"]) == n_checks
    assert int(figs["arena_high_water"]) <= int(figs["arena_bytes"]) == program.arena_bytes
    sizes = [n.output_bytes for n in graph.nodes]
    assert int(figs["flash_read_bytes"]) == sum(sizes[i.node] for i in program if i.op is Op.PAGE_IN)


def test_stripped_move_file_runs_the_same_trace(build, tmp_path):
    graph, program = CASES["resnet_50"]
    path = tmp_path / "s.poet"
    path.write_bytes(encode(program, graph, strip=True))
    trace, figs, proc = run_harness(build / "harness", path)
    assert proc.returncode == 0, proc.stderr
    assert trace == [str(ins) for ins in program]


def test_a_move_that_copies_nothing_is_caught(tmp_path):
    """The data really moves: with the copy compiled out (-DPOET_MEMMOVE as a no-op) the
    harness finds the moved input clobbered; with the C library's memmove all is well."""
    graph, program = CASES["hand"]
    path = tmp_path / "hand.poet"
    path.write_bytes(encode(program, graph))
    nocopy = _harness(tmp_path / "nocopy", "'-DPOET_MEMMOVE(d,s,n)=((void)(s),(void)(n),(d))'")
    _, _, proc = run_harness(nocopy, path, "-q")
    assert proc.returncode == 1
    assert "input buffer clobbered (input, consumer)" in proc.stderr
    libc = _harness(tmp_path / "libc", "-DPOET_MEMMOVE=memmove")
    for name in ("hand", "chain_1", "workspace"):
        graph, program = CASES[name]
        path.write_bytes(encode(program, graph))
        trace, figs, proc = run_harness(libc, path)
        assert proc.returncode == 0, proc.stderr
        assert trace == [str(ins) for ins in program]


def test_every_move_rule_gives_its_code_in_c_and_python(build, tmp_path):
    cases = move_cases()
    paths = []
    for name, (data, code) in sorted(cases.items()):
        assert decoder_verdict(data) == code, name
        paths.append(tmp_path / f"{name}.poet")
        paths[-1].write_bytes(data)
    assert c_codes(build, paths) == [cases[name][1] for name in sorted(cases)]


def test_move_in_a_version_3_file_is_refused_alike(build, tmp_path):
    graph, program = CASES["hand"]
    data = encode(program, graph, strip=True)
    paths = []
    for version in (2, 3):
        old = fix_crc(data[:4] + bytes([version]) + data[5:])
        assert decoder_verdict(old) == "POET_E_OPCODE"
        paths.append(tmp_path / f"v{version}.poet")
        paths[-1].write_bytes(old)
    assert c_codes(build, paths) == ["POET_E_OPCODE", "POET_E_OPCODE"]


def test_c_and_python_agree_on_mutated_move_files(build, tmp_path):
    """Differential fuzz behind a valid CRC, on version-4 files."""
    bases = [encode(p, g, strip=True) for g, p in (CASES["hand"], CASES["chain_0"], CASES["workspace"])]
    assert_decoders_agree_on_mutations(build, tmp_path, bases, seed=4321)


@pytest.mark.skipif(shutil.which("clang") is None, reason="libFuzzer needs clang")
def test_short_libfuzzer_run_on_move_files(build, tmp_path):
    seeds = {name: encode(p, g) for name, (g, p) in CASES.items() if not name.startswith("resnet")}
    seeds.update({name: data for name, (data, _) in move_cases().items()})
    run_libfuzzer(build, tmp_path, seeds, seed=2)
