"""poetc emit-c: the generated C step, built with the host compiler, against PyTorch.

For each schedule of :mod:`tests.codegen.emit_cases` the emitted directory is built with
``make host`` and run; the gradients, loss and BatchNorm running-statistic updates must
match the traced step run by PyTorch (metric: poet_compiler.codegen.emit_c.run), the
arena must be exactly the planned one, the page file must see exactly the schedule's
paging bytes and every COMPUTE of the program must have run a kernel.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from poet_compiler.codegen.emit_c import emit_c
from poet_compiler.codegen.emit_c import run as runner
from poet_compiler.codegen.emit_c.emit import load_traced
from poet_compiler.codegen.emit_c.errors import EmitError
from poet_compiler.codegen.bytecode import decode
from poet_compiler.schedule.program import Op
from tests.codegen.emit_cases import CASES, Case, compile_case

pytestmark = pytest.mark.skipif(shutil.which("make") is None or shutil.which("cc") is None,
                                reason="needs make and a C compiler")


@pytest.fixture(scope="module")
def schedules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("schedules")
    return {case.id: compile_case(case, out) for case in CASES}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
@pytest.mark.smoke
def test_host_step_matches_pytorch(case: Case, schedules: dict[str, Path], tmp_path: Path) -> None:
    path = schedules[case.id]
    program = decode(path.read_bytes()).program
    emitted = emit_c(case.model, path, tmp_path / "emit")
    step = runner.run_host(emitted.out_dir, tmp_path / "run")
    cmp = runner.compare(load_traced(case.model, path), step)
    assert cmp.max_rel_grad_diff <= 1e-4, f"{cmp.worst_grad}: {cmp.max_rel_grad_diff:.3g}"
    assert cmp.loss_diff <= 1e-5 * abs(cmp.loss_ref)
    assert cmp.max_rel_update_diff <= 1e-4
    fig = step.figures
    assert fig["arena"] == fig["planned"] == program.arena_bytes == emitted.arena_bytes
    assert fig["computes"] == program.count(Op.COMPUTE) == int(step.node_runs.sum())
    assert (fig["paged_out"], fig["paged_in"]) == (emitted.page_out_bytes, emitted.page_in_bytes)
    if case.pages:
        assert fig["paged_out"] > 0 and fig["paged_in"] > 0
        assert (tmp_path / "run" / "pages.bin").stat().st_size > 0


def test_emit_is_deterministic(schedules: dict[str, Path], tmp_path: Path) -> None:
    case = CASES[3]
    a = emit_c(case.model, schedules[case.id], tmp_path / "a")
    b = emit_c(case.model, schedules[case.id], tmp_path / "b")
    assert a.files == b.files
    for rel in a.files:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes(), rel


def test_emit_replaces_existing_directory(schedules: dict[str, Path], tmp_path: Path) -> None:
    case = CASES[2]
    out = tmp_path / "out"
    out.mkdir()
    (out / "stale.txt").write_text("old")
    emit_c(case.model, schedules[case.id], out)
    assert not (out / "stale.txt").exists() and (out / "model.c").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"], "temporary directories left behind"


def test_schedule_of_another_model_is_refused(schedules: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(EmitError, match="node graph but"):
        emit_c("cifar_cnn_tiny", schedules[CASES[0].id], tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_more_ops_through_onnx(tmp_path: Path) -> None:
    """Kernels the zoo's MCU models do not reach: ReLU6 (hardtanh), a residual add,
    average pooling, convolutions with a bias (depthwise included), from an ONNX export."""
    import torch
    from torch import nn

    import poet_compiler as pc
    from poet_compiler.frontends.onnx import export_module

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1 = nn.Conv2d(3, 8, 3, padding=1)
            self.c2 = nn.Conv2d(8, 8, 3, padding=1, groups=8)
            self.pool = nn.AvgPool2d(2)
            self.fc = nn.Linear(8 * 4 * 4, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = nn.functional.relu6(self.c1(x))
            y = self.pool(y + self.c2(y))
            return self.fc(torch.flatten(y, 1))

    torch.manual_seed(0)
    onnx = tmp_path / "net.onnx"
    export_module(Net(), (torch.randn(2, 3, 8, 8),), onnx)
    comp = pc.compile(str(onnx), "m4", "100%", strategy="checkpoint_all")
    path, _ = comp.save(tmp_path / "net.poet")
    ops = {n.op for n in comp.graph.nodes}
    assert {"aten.hardtanh", "aten.hardtanh_backward", "aten.add", "aten.avg_pool2d",
            "aten.avg_pool2d_backward"} <= ops, ops
    emitted = emit_c(str(onnx), path, tmp_path / "emit")
    step = runner.run_host(emitted.out_dir, tmp_path / "run")
    cmp = runner.compare(load_traced(str(onnx), path), step)
    assert cmp.max_rel_grad_diff <= 1e-5 and cmp.loss_diff <= 1e-6 * abs(cmp.loss_ref)
