"""Writing a PyTorch model (or a zoo model) as an ONNX file with torch.onnx.export.

Exporter choice: the TorchScript exporter (``dynamo=False``) is the default. On torch
2.13 it works offline for every model family here, covers opsets 13..20, and is the one
with a real *training* mode (BatchNormalization with training_mode=1 and no constant
folding of parameters). The torch.export-based exporter (``dynamo=True``, opset >= 18)
is available too; it exports what the module does in eval mode (it folds BatchNorm into
the preceding convolution), so it is refused with ``training=True``.
"""

from __future__ import annotations

import copy
import io
import warnings
from pathlib import Path

import torch
from torch import nn

from poet_compiler.errors import FrontendError
from poet_compiler.fileio import atomic_write_bytes

from .loader import parse_model

LEGACY_OPSETS = range(13, 21)
DYNAMO_MIN_OPSET = 18
DEFAULT_OPSET = 17


def export_bytes(
    module: nn.Module,
    example_inputs: tuple[torch.Tensor, ...],
    *,
    opset: int = DEFAULT_OPSET,
    training: bool = False,
    dynamo: bool = False,
    name: str = "model",
) -> bytes:
    """Serialized ONNX model of ``module`` on ``example_inputs`` (checked by onnx)."""
    if dynamo:
        if training:
            raise FrontendError(
                "--training needs the TorchScript exporter (the dynamo exporter exports eval semantics)"
            )
        if opset < DYNAMO_MIN_OPSET:
            raise FrontendError(
                f"opset {opset} is not supported by the dynamo exporter (use {DYNAMO_MIN_OPSET} or later)"
            )
    elif opset not in LEGACY_OPSETS:
        raise FrontendError(f"opset {opset} is not supported (choose {LEGACY_OPSETS.start}..{LEGACY_OPSETS.stop - 1})")
    # Exporting runs forward; a copy keeps the caller's BatchNorm statistics untouched.
    m = copy.deepcopy(module).train(training)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if dynamo:
                prog = torch.onnx.export(m, example_inputs, dynamo=True, opset_version=opset, verbose=False)
                assert prog is not None, "torch.onnx.export(dynamo=True) returns the program"
                data = prog.model_proto.SerializeToString()
            else:
                buf = io.BytesIO()
                torch.onnx.export(
                    m,
                    example_inputs,
                    buf,  # type: ignore[arg-type]  # a file object is accepted; torch's annotation says path only
                    dynamo=False,
                    opset_version=opset,
                    training=torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL,
                    do_constant_folding=not training,
                    input_names=[
                        f"input{i}" if len(example_inputs) > 1 else "input" for i in range(len(example_inputs))
                    ],
                    output_names=["output"],
                )
                data = buf.getvalue()
    except FrontendError:
        raise
    except Exception as exc:  # the exporters raise many types; report one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FrontendError(f"{name}: torch.onnx.export failed: {first[:300]}") from None
    parse_model(data, f"{name} (exported)")
    return data


def export_module(
    module: nn.Module,
    example_inputs: tuple[torch.Tensor, ...],
    path: str | Path,
    **kwargs: object,
) -> int:
    """Export ``module`` to ``path`` atomically; returns the file size in bytes."""
    data = export_bytes(module, example_inputs, **kwargs)  # type: ignore[arg-type]
    atomic_write_bytes(path, data)
    return len(data)


def export_zoo_model(
    name: str,
    path: str | Path,
    *,
    opset: int = DEFAULT_OPSET,
    training: bool = False,
    batch: int | None = None,
    dynamo: bool = False,
) -> int:
    """Export the zoo model ``name`` (its example batch fixes the shapes)."""
    try:
        import models
    except ImportError:
        raise FrontendError("the model zoo (package 'models') is not installed") from None
    try:
        spec = models.get(name)
    except (KeyError, LookupError, ValueError) as exc:
        if isinstance(exc, FrontendError):
            raise
        raise FrontendError(f"unknown model '{name}' (zoo: {', '.join(models.names())})") from None
    inputs = tuple(spec.example_inputs(batch))
    module = spec.build()
    if any(t.is_meta for t in (*module.parameters(), *inputs)):
        small = getattr(module, "poet_weights_from", None)
        raise FrontendError(f"{name} is built on the meta device (its graph, no weights); export needs real weights"
                            + (f": use {small}, the same graph with weights" if small else ""))
    return export_module(module, inputs, path, opset=opset, training=training, dynamo=dynamo, name=name)
