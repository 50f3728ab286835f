"""The ONNX frontend with the optimizer's update and a trained subset (docs/training.md):
the converted module goes through the torch tracer like a zoo model, so the update nodes,
the frozen parameters and the schedule's result are the same kind."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from poet_compiler.errors import FrontendError
from poet_compiler.frontends import load_model
from poet_compiler.frontends.torch.optimizer import parse_optimizer
from poet_compiler.schedule.build import assemble
from poet_compiler.schedule.linearize import linearize
from poet_compiler.torch_exec.executor import ScheduledStep

ONNX = Path(__file__).resolve().parents[3] / "models" / "kws_dscnn.onnx"


def test_onnx_step_with_sgd_on_the_biases() -> None:
    spec = parse_optimizer("sgd:lr=0.1,momentum=0.9")
    tm = load_model(str(ONNX), optimizer=spec, train="bias")
    assert tm is not None
    trained = [n for n, p in tm.module.named_parameters() if p.requires_grad]
    assert trained and all(n.endswith("bias") for n in trained)
    assert tm.graph.count("update") == len(trained)
    start = {n: p.detach().clone() for n, p in tm.module.named_parameters()}
    ref_module = __import__("copy").deepcopy(tm.module)
    opt = spec.to_torch([p for p in ref_module.parameters() if p.requires_grad])
    program = linearize(tm.graph, assemble(tm.graph, np.eye(tm.graph.n, dtype=bool)))
    with ScheduledStep(tm, program) as step:
        for _ in range(2):
            step.step()
            opt.zero_grad()
            tm.loss_fn(ref_module(*tm.example_inputs), tm.target).backward()
            opt.step()
    ref = dict(ref_module.named_parameters())
    for name, p in tm.module.named_parameters():
        assert torch.equal(p, ref[name]), name
        if name not in trained:
            assert torch.equal(p, start[name]), name


def test_onnx_pattern_matching_nothing() -> None:
    with pytest.raises(FrontendError, match="matches no parameter"):
        load_model(str(ONNX), train="classifier.*")
