"""What the C runtime's tests share: building runtime/c, running its harness, and the
differential checks of the C and Python decoders."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.codegen.programs import decoder_verdict, fix_crc

RUNTIME = Path(__file__).resolve().parents[2] / "runtime" / "c"
CC = shutil.which("cc") or shutil.which("gcc")
needs_cc = pytest.mark.skipif(CC is None or shutil.which("make") is None, reason="needs a C compiler and make")


def build_runtime(out: Path, *targets: str) -> Path:
    """``make`` the given targets of runtime/c into ``out``."""
    subprocess.run(["make", "-s", "-C", str(RUNTIME), f"BUILD={out}", f"CC={CC}", *targets],
                   check=True, capture_output=True, text=True)
    return out


def run_harness(exe: Path, path: Path, *args: str,
                timeout: float = 120) -> tuple[list[str], dict[str, str], subprocess.CompletedProcess]:
    """The harness's trace lines, its ``# key value`` figures, and the process."""
    proc = subprocess.run([str(exe), *args, str(path)], capture_output=True, text=True, timeout=timeout)
    trace = [ln for ln in proc.stdout.splitlines() if not ln.startswith("#")]
    figs = dict(ln[2:].split(" ", 1) for ln in proc.stdout.splitlines() if ln.startswith("# "))
    return trace, figs, proc


def c_codes(build: Path, paths: list[Path]) -> list[str]:
    """The sanitized harness's ``-c`` verdict (an error code name) for each file."""
    proc = subprocess.run([str(build / "harness_asan"), "-c", *map(str, paths)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return [ln.split(" ", 1)[0] for ln in proc.stdout.splitlines()]


def assert_decoders_agree_on_mutations(build: Path, tmp_path: Path, bases: list[bytes], seed: int) -> None:
    """Differential fuzz: 400 random edits of ``bases`` behind a valid CRC; the C and
    Python decoders give one code for each (bar the C runtime's own resource limits),
    and the edits reach several checks."""
    rng = random.Random(seed)
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
        expected.append(decoder_verdict(data))
    got = c_codes(build, paths)
    mismatches = [(p.name, c, e) for p, c, e in zip(paths, got, expected)
                  if c != e and c not in ("POET_E_NOT_EXECUTABLE", "POET_E_RESOURCES")]
    assert not mismatches, mismatches[:5]
    assert len(set(expected)) > 4          # the mutations did reach several checks


def run_libfuzzer(build: Path, tmp_path: Path, seeds: dict[str, bytes], seed: int) -> None:
    """3,000 libFuzzer runs of the loader from the ``seeds`` corpus (skip without clang's
    libFuzzer)."""
    proc = subprocess.run(["make", "-s", "-C", str(RUNTIME), f"BUILD={build}", "fuzz"], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"clang cannot build a libFuzzer target here: {proc.stderr.strip()[:200]}")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, data in seeds.items():
        (corpus / f"{name}.poet").write_bytes(data)
    run = subprocess.run([str(build / "fuzz_loader"), "-runs=3000", "-max_len=4096", f"-seed={seed}", str(corpus)],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Done 3000 runs" in run.stderr
