"""emit-c of a step with the optimizer's update in it (docs/training.md), built with the
host compiler: the parameters and optimizer state it writes in place against PyTorch's
step (the traced graph, whose update ops equal torch.optim bitwise), by the figures of
:mod:`poet_compiler.codegen.emit_c.run` (update error relative to the update's size,
floor 1e-3 of the step's largest update; Adam leaves out elements with |g| < 100 eps)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import poet_compiler as pc
from poet_compiler.codegen.emit_c import emit_c
from poet_compiler.codegen.emit_c import run as runner
from poet_compiler.codegen.emit_c.emit import load_traced
from poet_compiler.schedule.program import Op

pytestmark = pytest.mark.skipif(shutil.which("make") is None or shutil.which("cc") is None,
                                reason="needs make and a C compiler")

CASES = [
    ("cifar_cnn_tiny", "70%", "capuchin", "sgd:lr=0.05,momentum=0.9,nesterov=1,weight_decay=0.001",
     "features.8.*,bias"),
    ("kws_dscnn", "60%", "chen_greedy", "adam:lr=0.001", None),
]


@pytest.mark.parametrize(("model", "ram", "strategy", "optimizer", "train"), CASES, ids=lambda v: str(v))
def test_host_update_matches_pytorch(model: str, ram: str, strategy: str, optimizer: str, train: str | None,
                                     tmp_path: Path) -> None:
    comp = pc.compile(model, "m4", ram, strategy=strategy, optimizer=optimizer, train=train)
    program = comp.program
    assert program is not None, comp.result.message
    assert program.count(Op.PAGE_OUT) > 0 or program.n_recompute > 0
    path, _ = comp.save(tmp_path / "s.poet")
    emitted = emit_c(model, path, tmp_path / "emit")
    manifest = json.loads((emitted.out_dir / "manifest.json").read_text())
    roles = [o["role"] for o in manifest["outputs"]]
    assert "grad" not in roles and "param" in roles, "the outputs are the parameters, written in place"
    step = runner.run_host(emitted.out_dir, tmp_path / "run")
    tm = load_traced(model, path)
    cmp = runner.compare(tm, step)
    assert cmp.max_rel_param_diff is not None and cmp.max_rel_state_diff is not None
    assert cmp.max_rel_param_diff <= 1e-4, f"{cmp.worst_param}: {cmp.max_rel_param_diff:.3g}"
    assert cmp.max_rel_state_diff <= 1e-4
    assert cmp.loss_diff <= 1e-5 * abs(cmp.loss_ref)
    assert cmp.max_rel_update_diff <= 1e-4
    # The frozen parameters are the step's static arrays, untouched: not outputs at all.
    trained = {n for n, p in tm.module.named_parameters() if p.requires_grad}
    assert {o["name"] for o in manifest["outputs"] if o["role"] == "param"} == trained
    if "adam" in optimizer:
        # 83 of 4,860 on kws_dscnn: BatchNorm gammas whose gradient vanishes by symmetry.
        assert cmp.n_ill_conditioned < 0.05 * sum(p.numel() for p in tm.module.parameters())
    fig = step.figures
    assert fig["arena"] == program.arena_bytes
    assert fig["computes"] == program.count(Op.COMPUTE) == int(step.node_runs.sum())
