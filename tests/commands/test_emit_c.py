"""poetc emit-c through the installed console script: bad input is one line and exit 2,
and leaves no output directory behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from poet_compiler.frontends.onnx import export_module

POETC = Path(sys.executable).parent / "poetc"


@pytest.fixture(scope="module")
def tanh_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """An ONNX MLP with a Tanh (no reference kernel) and a valid schedule for it."""
    d = tmp_path_factory.mktemp("tanh")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    onnx = d / "tanh_mlp.onnx"
    export_module(model, (torch.randn(2, 8),), onnx)
    poet = d / "tanh_mlp.poet"
    proc = subprocess.run([str(POETC), "compile", str(onnx), "--device", "m4", "--ram", "100%",
                           "--strategy", "checkpoint_all", "-o", str(poet)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return onnx, poet


@pytest.mark.skipif(not POETC.exists(), reason="console script not installed")
def test_unsupported_op_is_one_line_exit_2(tanh_model: tuple[Path, Path], tmp_path: Path) -> None:
    onnx, poet = tanh_model
    out = tmp_path / "emitted"
    proc = subprocess.run([str(POETC), "emit-c", str(onnx), "--schedule", str(poet), "-o", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "aten.tanh" in lines[0] and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout == ""
    assert list(tmp_path.iterdir()) == [], "emit-c left files behind"


@pytest.mark.skipif(not POETC.exists(), reason="console script not installed")
def test_missing_schedule_is_one_line_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run([str(POETC), "emit-c", "kws_dscnn", "--schedule", str(tmp_path / "nope.poet"),
                           "-o", str(tmp_path / "out")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "nope.poet" in proc.stderr
    assert not (tmp_path / "out").exists()
