"""The int8 step: its gradients against PyTorch's float gradients of the dequantized model
(an independent oracle), determinism, and an unsupported op named in one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from poet_compiler.codegen.emit_c import dataset
from poet_compiler.quant import calibrate, conv, exponents, onnx_import, sources, step
from poet_compiler.quant.qmodel import Conv, MaxPool


@pytest.fixture(scope="module")
def digits():
    return dataset.digits()


def _model(split):
    graph, _ = sources.from_zoo("digits_cnn", 16)
    return calibrate.quantize(graph, split.x_train[:16], split.y_train[:16])


def _float_grads(model, xq, y):
    params = {}
    for n in model.convs():
        s_w = n.weight_scale * 2.0 ** n.weight_exponent
        s_x = model.qparams[n.input].scale * 2.0 ** exponents.k(model, n.input)
        params[n.name] = (torch.tensor(n.weight * s_w[:, None, None, None], requires_grad=True),
                          torch.tensor(n.bias * s_x * s_w, requires_grad=True))
    h = torch.tensor(model.qparams[model.input].dequantize(xq))
    for n in model.nodes:
        if isinstance(n, Conv):
            w, b = params[n.name]
            h = F.linear(h.flatten(1), w.flatten(1), b) if n.linear else F.conv2d(h, w, b, n.stride, n.padding[0])
            h = F.relu(h) if n.activation == "relu" else h
        elif isinstance(n, MaxPool):
            h = F.max_pool2d(h, n.kernel, n.stride)
        else:
            h = h.flatten(1)
    F.cross_entropy(h, torch.tensor(y), reduction="sum").backward()
    return {k: v[0].grad.numpy() for k, v in params.items()}


def test_weight_gradients_match_float_autograd(digits, monkeypatch):
    model = _model(digits)
    xq = model.qparams[model.input].quantize(digits.x_train[:16])
    y = digits.y_train[:16]
    expected = _float_grads(model, xq, y)
    caught, exps = {}, {}

    def record(self, node, g, x, e_y, result):  # the update is left out: gradients of the step's weights
        exps[node.name] = e_y
        caught[node.name] = conv.weight_grad(node, g, x, self.model.qparams[node.input].zero_point)[0]

    monkeypatch.setattr(step.Trainer, "_update", record)
    step.Trainer(model, lr=0.01, batch=16).step(xq, y)
    for n in model.convs():
        got = caught[n.name] * 2.0 ** -exps[n.name] * model.qparams[n.input].scale
        cos = float((got * expected[n.name]).sum() / np.linalg.norm(got) / np.linalg.norm(expected[n.name]))
        assert cos > 0.99, (n.name, cos)


def test_step_is_deterministic(digits):
    runs = []
    for _ in range(2):
        model = _model(digits)
        trainer = step.Trainer(model, lr=0.05, batch=16, momentum=0.5)
        xq = model.qparams[model.input].quantize(digits.x_train[:64])
        losses = [trainer.step(xq[i:i + 16], digits.y_train[i:i + 16]).loss_q16 for i in range(0, 64, 16)]
        runs.append((losses, [n.weight.copy() for n in model.convs()], dict(model.act_exponent)))
    assert runs[0][0] == runs[1][0]
    assert all(np.array_equal(a, b) for a, b in zip(runs[0][1], runs[1][1]))
    assert runs[0][2] == runs[1][2]


def test_a_step_changes_weights_and_reports_it(digits):
    model = _model(digits)
    before = [n.weight.copy() for n in model.convs()]
    xq = model.qparams[model.input].quantize(digits.x_train[:16])
    r = step.Trainer(model, lr=0.05, batch=16).step(xq, digits.y_train[:16])
    changed = sum(int(np.count_nonzero(a != n.weight)) for a, n in zip(before, model.convs()))
    assert r.weights_changed == changed > 0
    assert r.weights_updated == sum(n.weight.size for n in model.convs())


def test_unsupported_op_names_the_node(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("Sigmoid", ["input"], ["output"], name="act1")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 4])])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph), str(path))
    with pytest.raises(onnx_import.QuantError, match="node act1 \\(Sigmoid\\)"):
        onnx_import.read(path)


def test_a_constant_behind_identity_is_read(tmp_path):
    """torch's exporter shares equal initializers (kws_dscnn's folded zero biases) through
    Identity nodes: the importer reads the constant behind them."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((2, 1, 1, 1), np.float32), "w")
    b = numpy_helper.from_array(np.array([0.5, -0.5], np.float32), "b")
    nodes = [helper.make_node("Identity", ["b"], ["b2"], name="share"),
             helper.make_node("Conv", ["input", "w", "b2"], ["output"], name="conv")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 1, 2, 2])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 2, 2, 2])], [w, b])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph), str(path))
    (conv_node,) = onnx_import.read(path).nodes
    assert conv_node.bias.tolist() == [0.5, -0.5]
