"""A float model from any source as an ONNX graph for :mod:`~poet_compiler.quant.onnx_import`:
a zoo name, an ``nn.Module`` (exported in eval mode, batch norm folded by the exporter),
or an ONNX file (float or QDQ)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from poet_compiler.quant.float_graph import FloatGraph
from poet_compiler.quant.onnx_import import read


def from_module(module: nn.Module, example: torch.Tensor, name: str = "model") -> FloatGraph:
    from poet_compiler.frontends.onnx.export import export_bytes

    return read(export_bytes(module, (example,), name=name))


def from_zoo(name: str, batch: int | None = None) -> tuple[FloatGraph, nn.Module]:
    import models

    spec = models.get(name)
    module = spec.build()
    return from_module(module, spec.example_inputs(batch)[0], name), module


def from_onnx(path: str | Path) -> FloatGraph:
    return read(path)
