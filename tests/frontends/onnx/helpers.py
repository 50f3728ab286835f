"""Shared helpers for the ONNX frontend tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import torch
from onnx.reference import ReferenceEvaluator

from poet_compiler.frontends.onnx import OnnxModel


def reference_output(path: str | Path, om: OnnxModel) -> np.ndarray:
    """The primary output as computed by onnx's reference evaluator on om's inputs."""
    ref = ReferenceEvaluator(onnx.load(str(path)))
    feeds = {n: t.numpy() for n, t in zip(om.input_names, om.example_inputs)}
    return np.ascontiguousarray(ref.run([om.output_name], feeds)[0])


def max_diff(a: torch.Tensor | np.ndarray, b: torch.Tensor | np.ndarray) -> float:
    ta = torch.as_tensor(np.asarray(a.detach() if isinstance(a, torch.Tensor) else a))
    tb = torch.as_tensor(np.asarray(b.detach() if isinstance(b, torch.Tensor) else b))
    assert ta.shape == tb.shape, (ta.shape, tb.shape)
    return float((ta.double() - tb.double()).abs().max()) if ta.numel() else 0.0
