""".poet version 3 on the C runtime: arenas and offsets past 32 bits.

On a 64-bit host the where word is 64 bits: a file with an arena of 8 GiB and more
validates (``harness -c``: the full dry run of poet_open, without allocating the arena)
and a file whose buffers sit above 4 GiB runs, trace for trace, on a lazily mapped
arena. A build with 32-bit where words (what a Cortex-M gets, forced on the host with
-DPOET_WHERE_BITS=32) and a real Cortex-M4 under qemu refuse the same files with
POET_E_RESOURCES and report the 64-bit arena size the file needs: never a truncated one.
Version-2 files still run.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from poet_compiler.codegen.bytecode import decode, encode
from poet_compiler.schedule.program import Instruction, Program
from tests.codegen.programs import budget_program, chain_graph, checkpoint_all_peak, training_graph

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "runtime" / "c"
DEVICE = RUNTIME / "device"
CC = shutil.which("cc") or shutil.which("gcc")
pytestmark = pytest.mark.skipif(CC is None or shutil.which("make") is None, reason="needs a C compiler and make")

GIB = 1 << 30
CFLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2"]
# Three convolutions of 3-5 GiB with 1 GiB of workspace: arenas of 13-16 GiB.
BIG = training_graph([("c0", "conv", [], 3 * GIB + 12), ("r0", "elementwise", [0], 3 * GIB),
                      ("c1", "conv", [1], 5 * GIB + 4), ("fc", "matmul", [2], 96)], name="big", workspace=GIB + 8)


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wide_build")
    subprocess.run(["make", "-s", "-C", str(RUNTIME), f"BUILD={out}", f"CC={CC}", "all", "asan"],
                   check=True, capture_output=True, text=True)
    subprocess.run([CC, *CFLAGS, "-DPOET_WHERE_BITS=32", f"-I{RUNTIME}", str(RUNTIME / "harness.c"),
                    str(RUNTIME / "poet_runtime.c"), "-o", str(out / "harness32")],
                   check=True, capture_output=True, text=True)
    return out


def _big_file(tmp_path: Path, strip: bool = True) -> tuple[Path, Program]:
    program = budget_program(BIG, int(checkpoint_all_peak(BIG) * 0.6), seed=2)
    assert program.arena_bytes >= 8 * GIB
    path = tmp_path / "big.poet"
    path.write_bytes(encode(program, BIG, strip=strip))
    return path, program


def _high_file(tmp_path: Path, version: int = 3) -> tuple[Path, Program]:
    """A small chain program moved 5 GiB up an arena of 5 GiB + its own: every offset
    is above 2^32, but only a few KiB of the arena are ever touched."""
    g = chain_graph(4)
    p = budget_program(g, 4000, seed=1)
    shift = 5 * GIB
    moved = Program(p.n_nodes, tuple(Instruction(i.op, i.node, None if i.offset is None else i.offset + shift)
                                     for i in p), p.arena_bytes + shift)
    path = tmp_path / f"high_v{version}.poet"
    path.write_bytes(encode(moved, g))
    return path, moved


def _check(exe: Path, *args: str) -> list[str]:
    proc = subprocess.run([str(exe), "-c", *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return proc.stdout.splitlines()


def _run(exe: Path, path: Path) -> tuple[list[str], dict[str, str], subprocess.CompletedProcess]:
    proc = subprocess.run([str(exe), str(path)], capture_output=True, text=True, timeout=300)
    trace = [ln for ln in proc.stdout.splitlines() if not ln.startswith("#")]
    figs = dict(ln[2:].split(" ", 1) for ln in proc.stdout.splitlines() if ln.startswith("# "))
    return trace, figs, proc


@pytest.mark.parametrize("exe", ["harness", "harness_asan"])
@pytest.mark.parametrize("strip", [True, False])
def test_arena_of_8_gib_validates_without_allocating(build, tmp_path, exe, strip):
    path, _ = _big_file(tmp_path, strip)
    assert _check(build / exe, str(path)) == [f"POET_OK {path}"]


def test_resources_reports_the_size_the_file_needs(build, tmp_path):
    path, program = _big_file(tmp_path)
    line = _check(build / "harness", "-a", str(1 << 20), str(path))
    assert line == [f"POET_E_RESOURCES {path} needs arena_bytes={program.arena_bytes} n_nodes={BIG.n}"]
    assert program.arena_bytes > 1 << 32       # reported whole, not modulo 2^32


def test_32_bit_where_words_refuse_with_the_needed_size(build, tmp_path):
    big, program = _big_file(tmp_path)
    high, moved = _high_file(tmp_path)
    lines = _check(build / "harness32", str(big), str(high))
    assert lines == [f"POET_E_RESOURCES {big} needs arena_bytes={program.arena_bytes} n_nodes={BIG.n}",
                     f"POET_E_RESOURCES {high} needs arena_bytes={moved.arena_bytes} n_nodes={moved.n_nodes}"]
    _, figs, proc = _run(build / "harness32", high)
    assert proc.returncode == 2
    assert f"needs a {moved.arena_bytes} B arena, this build addresses at most {GIB - 1} B" in proc.stderr
    assert figs["status"] == "POET_E_RESOURCES"


@pytest.mark.parametrize("exe", ["harness", "harness_asan", "harness32"])
def test_32_bit_where_words_run_small_files(build, tmp_path, exe):
    g = chain_graph(6)
    p = budget_program(g, 3000, seed=4)
    path = tmp_path / "small.poet"
    path.write_bytes(encode(p, g))
    trace, figs, proc = _run(build / exe, path)
    assert proc.returncode == 0, proc.stderr
    assert trace == [str(i) for i in p] and int(figs["arena_bytes"]) == p.arena_bytes


@pytest.mark.parametrize("exe", ["harness", "harness_asan"])
def test_offsets_above_4_gib_run_trace_for_trace(build, tmp_path, exe):
    """Executed for real: the harness allocates the 5 GiB arena (mapped lazily), its
    kernels write and check every input at offsets above 2^32."""
    path, moved = _high_file(tmp_path)
    assert min(i.offset for i in moved if i.offset is not None) >= 5 * GIB
    trace, figs, proc = _run(build / exe, path)
    assert proc.returncode == 0, proc.stderr
    assert trace == [str(i) for i in moved]
    assert int(figs["arena_bytes"]) == moved.arena_bytes
    assert int(figs["arena_high_water"]) > 5 * GIB
    assert int(figs["inputs_checked"]) > 0


def test_version_2_files_run_the_same_trace(build, tmp_path):
    g = chain_graph(6)
    p = budget_program(g, 3000, seed=5)
    traces = []
    for version in (2, 3):
        path = tmp_path / f"v{version}.poet"
        path.write_bytes(encode(p, g, version=version))
        assert decode(path.read_bytes()).version == version
        trace, _, proc = _run(build / "harness", path)
        assert proc.returncode == 0, proc.stderr
        traces.append(trace)
    assert traces[0] == traces[1] == [str(i) for i in p]
    # A version-2 file is read with version 3's limits: an arena past 4 GiB (which no
    # version-2 writer wrote) validates, one of 2^59 does not.
    from tests.codegen.programs import assemble
    for arena, code in ((5 * GIB, "POET_OK"), (1 << 59, "POET_E_OFFSET")):
        v2_big = tmp_path / f"v2_{arena}.poet"
        v2_big.write_bytes(assemble(sizes=[16], arena=arena, offsets=[], code=b"", n_instr=0, version=2))
        assert _check(build / "harness", str(v2_big)) == [f"{code} {v2_big}"]


@pytest.mark.skipif(not all(shutil.which(t) for t in ("arm-none-eabi-gcc", "qemu-system-arm")),
                    reason="needs arm-none-eabi-gcc and qemu-system-arm")
def test_cortex_m4_refuses_what_its_size_t_cannot_hold(tmp_path):
    """The runtime compiled for a Cortex-M4 (32-bit size_t) and run under qemu."""
    elf = tmp_path / "open_check.elf"
    subprocess.run(["arm-none-eabi-gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", "-mcpu=cortex-m4",
                    "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16", "-nostartfiles", "-T",
                    str(DEVICE / "mps2_an386.ld"), "--specs=nano.specs", "--specs=nosys.specs", f"-I{DEVICE}",
                    f"-I{RUNTIME}", str(Path(__file__).parent / "c" / "open_check.c"), str(RUNTIME / "poet_runtime.c"),
                    str(DEVICE / "platform_semihost.c"), str(DEVICE / "startup_m4.c"), "-o", str(elf)],
                   check=True, capture_output=True, text=True)
    big, program = _big_file(tmp_path)
    g = chain_graph(6)
    small = budget_program(g, 3000, seed=4)
    results = {}
    for name, data in (("big", big.read_bytes()), ("small", encode(small, g, strip=True)),
                       ("v2", encode(small, g, strip=True, version=2))):
        work = tmp_path / name
        work.mkdir()
        (work / "check.poet").write_bytes(data)
        proc = subprocess.run(["qemu-system-arm", "-M", "mps2-an386", "-nographic", "-monitor", "none", "-serial",
                               "none", "-semihosting-config", "enable=on,target=native", "-kernel", str(elf)],
                              cwd=work, capture_output=True, text=True, timeout=120)
        line = next(ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("open_check:"))
        results[name] = dict(tok.split("=", 1) for tok in line.split()[1:])
    assert results["big"] == {"status": "POET_E_RESOURCES", "arena_bytes": str(program.arena_bytes),
                              "n_nodes": str(BIG.n), "max_arena": str(GIB - 1), "where_bytes": "4", "run": "-"}
    for name in ("small", "v2"):
        assert results[name]["status"] == "POET_OK" and results[name]["run"] == "POET_OK", results[name]
        assert results[name]["arena_bytes"] == str(small.arena_bytes)
