"""BENCHMARKS.md stays true to the tree: every table names the command that regenerates it,
every ``make bench-<topic>`` it names exists, and each runs its smallest cell (``QUICK=1``)
to the end, writing its results file. Figures are measured by the benchmarks, not here."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = (ROOT / "BENCHMARKS.md").read_text()
MAKEFILE = (ROOT / "Makefile").read_text()
NAMED = sorted(set(re.findall(r"make (bench-[a-z0-9-]+)", BENCHMARKS)))
DEFINED = set(re.findall(r"(?m)^(bench-[a-z0-9-]+):", MAKEFILE))
# What a target needs beyond the venv, the C compiler and make: tools on PATH, and the
# environment variables that name a peer's checkout.
NEEDS = {"bench-device": ("arm-none-eabi-gcc", "qemu-system-arm"),
         "bench-device-training": ("arm-none-eabi-gcc", "qemu-system-arm")}
NEEDS_ENV = {"bench-peers-moccasin": ("MOCCASIN",)}


def sections(text: str) -> dict[str, str]:
    """Level-2 sections of a Markdown text, by heading (text before the first: '')."""
    parts = re.split(r"(?m)^## (.+)$", text)
    return {"": parts[0], **{parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}}


def test_benchmarks_names_its_targets() -> None:
    assert NAMED, "BENCHMARKS.md names no make bench-<topic> target"


@pytest.mark.parametrize("heading", [h for h, body in sections(BENCHMARKS).items() if re.search(r"(?m)^\|", body)])
def test_every_table_names_the_command_that_regenerates_it(heading: str) -> None:
    body = sections(BENCHMARKS)[heading]
    assert re.search(r"make bench-[a-z0-9-]+|\.venv/bin/", body), f"section {heading!r} has a table but no command"


@pytest.mark.parametrize("target", NAMED)
def test_named_target_is_in_the_makefile(target: str) -> None:
    assert target in DEFINED, f"BENCHMARKS.md names `make {target}`, which the Makefile does not define"


@pytest.mark.parametrize("target", NAMED)
def test_named_target_runs_its_smallest_cell(target: str, tmp_path: Path) -> None:
    missing = [tool for tool in NEEDS.get(target, ()) if shutil.which(tool) is None]
    missing += [var for var in NEEDS_ENV.get(target, ()) if not os.environ.get(var)]
    if missing:
        pytest.skip(f"{target} needs {', '.join(missing)}")
    venv = Path(sys.prefix)
    # -o: the venv is the one running these tests; never (re)build it from here.
    proc = subprocess.run(
        ["make", "--no-print-directory", "-o", f"{venv}/.installed", target, "QUICK=1", f"VENV={venv}",
         f"BENCH_RESULTS={tmp_path}"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    written = [p for p in tmp_path.iterdir() if p.stat().st_size > 0]
    assert written, f"{target} wrote no results file into BENCH_RESULTS"
