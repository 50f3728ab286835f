"""``trace_onnx``: an ONNX file -> TracedModel, through the PyTorch frontend's tracing.

The converted module, its example batch, target and loss go through exactly the path a
zoo model takes (:func:`poet_compiler.frontends.torch.trace_module`), so the backward
graph is the real autograd one and ``poetc verify`` can run the schedule against it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from poet_compiler.errors import FrontendError

from .model import load_onnx_module

if TYPE_CHECKING:
    from poet_compiler.frontends.torch import TracedModel
    from poet_compiler.frontends.torch.optimizer import OptimizerSpec


def trace_onnx(
    path: str | Path,
    *,
    granularity: str = "op",
    batch: int | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    loss: str | None = None,
    optimizer: OptimizerSpec | None = None,
    train: str | None = None,
) -> TracedModel:
    """Convert ``path`` (see :func:`load_onnx_module`) and trace one training step.

    ``batch`` is refused: an ONNX file's batch size is part of its input shapes, which
    ``input_shapes`` sets (``--input-shape NAME=D0,D1,...``).
    """
    if batch is not None:
        raise FrontendError(
            f"{path}: --batch applies to zoo models; an ONNX file's batch is part of its input shapes "
            "(give --input-shape NAME=D0,D1,...)"
        )
    from poet_compiler.frontends.torch import trace_module

    om = load_onnx_module(path, input_shapes=input_shapes, loss=loss)
    return trace_module(om.module, om.example_inputs, om.target, om.loss_fn, name=om.name, granularity=granularity,
                        optimizer=optimizer, train=train)
