"""The sweep cache is keyed on what computes a result — poetc's code and the solver
libraries — not on the package version, which is the same for every commit."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import poet_compiler as pc
from poet_compiler import sweeps
from tests.viz.graphs import chain

KW = dict(time_limit_s=10.0, threads=1)


def test_code_digest_follows_every_source_file(tmp_path: Path) -> None:
    copy = tmp_path / "poet_compiler"
    shutil.copytree(sweeps.PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert sweeps.source_digest(copy) == sweeps.code_digest()
    target = copy / "solve" / "strategies.py"
    original = target.read_text()
    target.write_text(original + "\n# a change to the solver code\n")
    assert sweeps.source_digest(copy) != sweeps.code_digest()
    target.unlink()
    (copy / "solve" / "strategies2.py").write_text(original)  # same bytes, another module: a change too
    assert sweeps.source_digest(copy) != sweeps.code_digest()


def test_upgraded_code_or_solver_is_a_cache_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    graph, cache = chain(4), tmp_path / "cache"
    grid = (graph, None, ["70%"], ["2x"], ["optimal", "checkmate"])
    first = pc.sweep(*grid, jobs=1, cache_dir=cache, **KW)
    assert first.attrs == {"cells": 2, "solved": 2, "cached": 0}
    assert pc.sweep(*grid, jobs=1, cache_dir=cache, **KW).attrs["cached"] == 2
    # After an upgrade of poetc's code (same package version) nothing old is served.
    monkeypatch.setattr(sweeps, "code_digest", lambda: "0" * 64)
    assert pc.sweep(*grid, jobs=1, cache_dir=cache, **KW).attrs == {"cells": 2, "solved": 2, "cached": 0}
    # Nor after an upgrade of a solver library.
    versions = {**sweeps.library_versions(), "ortools": "0.0.0-other"}
    monkeypatch.setattr(sweeps, "library_versions", lambda: versions)
    assert pc.sweep(*grid, jobs=1, cache_dir=cache, **KW).attrs == {"cells": 2, "solved": 2, "cached": 0}
