"""Zoo models through ONNX: export (training mode) -> convert -> trace gives the same
training graph as tracing the zoo model directly."""

from __future__ import annotations

import collections

import pytest

import models
from poet_compiler.frontends.onnx import load_onnx_module
from poet_compiler.frontends.onnx.export import export_zoo_model
from poet_compiler.frontends.torch import trace_module

# The zoo traces BatchNorm with its running buffers (functionalized:
# _native_batch_norm_legit_functional); the ONNX module runs a training-mode
# BatchNormalization on batch statistics without running buffers (native_batch_norm).
# Same saved tensors and output bytes, different op label.
SAME_OP = {"aten._native_batch_norm_legit_functional": "aten.native_batch_norm"}


@pytest.mark.parametrize("name", ["mlp", "cifar_cnn_tiny", pytest.param("kws_dscnn", marks=pytest.mark.slow)])
def test_onnx_graph_matches_zoo_graph(tmp_path, name: str) -> None:
    spec = models.get(name)
    direct = trace_module(spec.build(), spec.example_inputs(), spec.target(), spec.loss_fn, name=name)
    path = tmp_path / f"{name}.onnx"
    export_zoo_model(name, path, opset=17, training=True)
    om = load_onnx_module(path)
    via = trace_module(om.module, om.example_inputs, spec.target(), spec.loss_fn, name=name)

    assert len(via.graph.nodes) == len(direct.graph.nodes)
    ops_direct = collections.Counter(SAME_OP.get(n.op, n.op) for n in direct.graph.nodes)
    assert collections.Counter(n.op for n in via.graph.nodes) == ops_direct
    act_direct = sum(n.output_bytes for n in direct.graph.nodes if n.kind == "forward")
    act_via = sum(n.output_bytes for n in via.graph.nodes if n.kind == "forward")
    assert abs(act_via - act_direct) <= 0.01 * act_direct
