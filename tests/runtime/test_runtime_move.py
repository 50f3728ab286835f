"""MOVE (format version 4) in the C runtime: the harness runs programs with MOVEs, the
moved bytes are what the next consumer reads, and C and Python refuse bad MOVEs with one
code (runtime/c, docs/bytecode.md)."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

from poet_compiler.codegen.bytecode import BytecodeFormatError, decode, encode
from poet_compiler.schedule.program import Op
from tests.codegen.move_programs import hand_program, move_cases, with_moves
from tests.codegen.programs import (
    budget_program,
    chain_graph,
    checkpoint_all_peak,
    fix_crc,
    resnet18_cifar_graph,
    training_graph,
)

RUNTIME = Path(__file__).resolve().parents[2] / "runtime" / "c"
CC = shutil.which("cc") or shutil.which("gcc")
pytestmark = pytest.mark.skipif(CC is None or shutil.which("make") is None, reason="needs a C compiler and make")
CFLAGS = "-std=c99 -Wall -Wextra -Werror -pedantic -O2"


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("poet_rt_move")
    subprocess.run(["make", "-s", "-C", str(RUNTIME), f"BUILD={out}", f"CC={CC}", "all", "asan"],
                   check=True, capture_output=True, text=True)
    return out


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


def _run(exe: Path, path: Path, *args: str) -> tuple[list[str], dict[str, str], subprocess.CompletedProcess]:
    proc = subprocess.run([str(exe), *args, str(path)], capture_output=True, text=True, timeout=120)
    trace = [ln for ln in proc.stdout.splitlines() if not ln.startswith("#")]
    figs = dict(ln[2:].split(" ", 1) for ln in proc.stdout.splitlines() if ln.startswith("# "))
    return trace, figs, proc


def _check(build: Path, paths: list[Path]) -> list[str]:
    proc = subprocess.run([str(build / "harness_asan"), "-c", *map(str, paths)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return [ln.split(" ", 1)[0] for ln in proc.stdout.splitlines()]


def _py_code(data: bytes) -> str:
    try:
        decode(data)
    except BytecodeFormatError as exc:
        return exc.code
    return "POET_OK"


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("sanitized", [False, True])
def test_trace_and_moved_bytes(build, tmp_path, name, sanitized):
    graph, program = CASES[name]
    assert program.n_move > 0
    path = tmp_path / f"{name}.poet"
    data = encode(program, graph)
    assert data[4] == 4
    path.write_bytes(data)
    trace, figs, proc = _run(build / ("harness_asan" if sanitized else "harness"), path)
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
    trace, figs, proc = _run(build / "harness", path)
    assert proc.returncode == 0, proc.stderr
    assert trace == [str(ins) for ins in program]


def test_a_move_that_copies_nothing_is_caught(tmp_path):
    """The data really moves: with the copy compiled out (-DPOET_MEMMOVE as a no-op) the
    harness finds the moved input clobbered; with the C library's memmove all is well."""
    graph, program = CASES["hand"]
    path = tmp_path / "hand.poet"
    path.write_bytes(encode(program, graph))
    nocopy = _harness(tmp_path / "nocopy", "'-DPOET_MEMMOVE(d,s,n)=((void)(s),(void)(n),(d))'")
    _, _, proc = _run(nocopy, path, "-q")
    assert proc.returncode == 1
    assert "input buffer clobbered (input, consumer)" in proc.stderr
    libc = _harness(tmp_path / "libc", "-DPOET_MEMMOVE=memmove")
    for name in ("hand", "chain_1", "workspace"):
        graph, program = CASES[name]
        path.write_bytes(encode(program, graph))
        trace, figs, proc = _run(libc, path)
        assert proc.returncode == 0, proc.stderr
        assert trace == [str(ins) for ins in program]


def test_every_move_rule_gives_its_code_in_c_and_python(build, tmp_path):
    cases = move_cases()
    paths = []
    for name, (data, code) in sorted(cases.items()):
        assert _py_code(data) == code, name
        paths.append(tmp_path / f"{name}.poet")
        paths[-1].write_bytes(data)
    assert _check(build, paths) == [cases[name][1] for name in sorted(cases)]


def test_move_in_a_version_3_file_is_refused_alike(build, tmp_path):
    graph, program = CASES["hand"]
    data = encode(program, graph, strip=True)
    paths = []
    for version in (2, 3):
        old = fix_crc(data[:4] + bytes([version]) + data[5:])
        assert _py_code(old) == "POET_E_OPCODE"
        paths.append(tmp_path / f"v{version}.poet")
        paths[-1].write_bytes(old)
    assert _check(build, paths) == ["POET_E_OPCODE", "POET_E_OPCODE"]


def test_c_and_python_agree_on_mutated_move_files(build, tmp_path):
    """Differential fuzz behind a valid CRC, on version-4 files."""
    rng = random.Random(4321)
    bases = [encode(p, g, strip=True) for g, p in (CASES["hand"], CASES["chain_0"], CASES["workspace"])]
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
    assert len(set(expected)) > 4


@pytest.mark.skipif(shutil.which("clang") is None, reason="libFuzzer needs clang")
def test_short_libfuzzer_run_on_move_files(build, tmp_path):
    proc = subprocess.run(["make", "-s", "-C", str(RUNTIME), f"BUILD={build}", "fuzz"], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"clang cannot build a libFuzzer target here: {proc.stderr.strip()[:200]}")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, (g, p) in CASES.items():
        if not name.startswith("resnet"):
            (corpus / f"{name}.poet").write_bytes(encode(p, g))
    for name, (data, _) in move_cases().items():
        (corpus / f"{name}.poet").write_bytes(data)
    run = subprocess.run([str(build / "fuzz_loader"), "-runs=3000", "-max_len=4096", "-seed=2", str(corpus)],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Done 3000 runs" in run.stderr
