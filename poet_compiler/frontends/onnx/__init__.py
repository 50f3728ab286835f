"""ONNX frontend: an ONNX model -> an executable, trainable PyTorch module.

``load_onnx_module(path, input_shapes=None, loss=None) -> OnnxModel`` reads and checks
the file, fuses exported linear layers and GELU formulas back into F.linear/F.gelu
(``fuse.py``), converts every node with a per-op converter (``ops/``), folds the
shape-driven parts at conversion time, and returns the module with a deterministic
example batch, a target and a loss — what the torch tracing frontend needs to build the
joint forward+backward graph; ``trace_onnx`` runs that tracing (what the frontend
dispatcher calls for ``.onnx`` sources). ``export_zoo_model`` writes a zoo model as ONNX.
"""

from __future__ import annotations

from .context import CONVERTERS
from .convert import OnnxModule, Step
from .export import export_module, export_zoo_model
from .model import LOSSES, OnnxLoss, OnnxModel, load_onnx_module
from .tracing import trace_onnx

__all__ = [
    "CONVERTERS",
    "LOSSES",
    "OnnxLoss",
    "OnnxModel",
    "OnnxModule",
    "Step",
    "export_module",
    "export_zoo_model",
    "load_onnx_module",
    "supported_ops",
    "trace_onnx",
]


def supported_ops() -> list[str]:
    """Sorted ONNX op types that have a converter."""
    from . import ops  # noqa: F401

    return sorted(k for k in CONVERTERS if "::" not in k)  # internal fused ops are not ONNX ops
