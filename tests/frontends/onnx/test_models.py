"""Exported models (small stand-ins for every zoo family) convert to modules whose
forward equals onnx's reference evaluator and the original PyTorch model, whose
gradients equal the original's, and which trace with make_fx."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from poet_compiler.frontends.onnx import export_module, load_onnx_module

from . import small_models as sm
from .helpers import max_diff, reference_output

TOL = 1e-5

# (exporter, training, opset): legacy TorchScript exporter across opsets in both modes,
# and the dynamo exporter (eval semantics, opset >= 18).
CONFIGS = [
    ("legacy", False, 13),
    ("legacy", True, 13),
    ("legacy", False, 17),
    ("legacy", True, 17),
    ("legacy", True, 20),
    ("dynamo", False, 18),
]


def _cases() -> list:
    out = []
    for name in sm.NAMES:
        for exp, training, opset in CONFIGS:
            if name == "gpt" and opset < 14:
                continue  # torch exports tril (the causal mask) from opset 14 on
            if exp == "dynamo" and name not in ("resnet", "bert", "gpt"):
                continue  # keep the suite fast; these three cover the dynamo op forms
            out.append(pytest.param(name, exp, training, opset, id=f"{name}-{exp}-{'train' if training else 'eval'}-{opset}"))
    return out


@pytest.mark.parametrize(("name", "exporter", "training", "opset"), _cases())
def test_forward_matches_reference_and_torch(tmp_path, name: str, exporter: str, training: bool, opset: int) -> None:
    model, inputs = sm.build(name)
    path = tmp_path / f"{name}.onnx"
    export_module(model, inputs, path, opset=opset, training=training, dynamo=exporter == "dynamo")
    om = load_onnx_module(path)
    assert om.opset == opset
    with torch.no_grad():
        y = om.module(*om.example_inputs)
        expected = model.train(training)(*om.example_inputs)
    assert max_diff(y, expected) <= TOL
    if not (training and opset < 14):
        # onnx.reference's BatchNormalization-9 normalizes a training-mode node with the
        # *updated running* statistics, which neither the ONNX spec text nor PyTorch do;
        # from opset 14 (training_mode attribute) it agrees with both.
        assert max_diff(y, reference_output(path, om)) <= TOL


@pytest.mark.parametrize("name", sm.NAMES)
def test_training_export_gradients_equal_torch(tmp_path, name: str) -> None:
    """Initializers become trainable parameters; autograd through the converted module
    gives the original model's gradients, parameter by parameter."""
    model, inputs = sm.build(name)
    path = tmp_path / f"{name}.onnx"
    export_module(model, inputs, path, opset=17, training=True)
    om = load_onnx_module(path)

    loss = om.loss_fn(om.module(*om.example_inputs), om.target)
    loss.backward()
    model.train()
    ref_loss = om.loss_fn(model(*om.example_inputs), om.target)
    ref_loss.backward()
    assert max_diff(loss, ref_loss) <= TOL

    ref_grads = {n: p.grad for n, p in model.named_parameters()}
    conv_params = dict(om.module.named_parameters())
    assert len(conv_params) == len(ref_grads)
    for onnx_name, attr in om.attr_of.items():
        if attr in conv_params:
            assert onnx_name in ref_grads, onnx_name
            assert max_diff(conv_params[attr].grad, ref_grads[onnx_name]) <= TOL, onnx_name
    # BatchNorm running statistics are buffers, never parameters.
    assert not any("running" in n for n in conv_params)


@pytest.mark.parametrize("name", ["resnet", "bert", "gpt"])
def test_module_traces_with_make_fx(tmp_path, name: str) -> None:
    """The forward is pure torch ops with no run-time Python control flow: make_fx
    traces it, and the traced graph recomputes the same loss."""
    model, inputs = sm.build(name)
    path = tmp_path / f"{name}.onnx"
    export_module(model, inputs, path, opset=17, training=True)
    om = load_onnx_module(path)
    params = dict(om.module.named_parameters())
    buffers = dict(om.module.named_buffers())

    def step(p, b, xs, t):  # noqa: ANN001, ANN202
        out = torch.func.functional_call(om.module, {**p, **b}, tuple(xs))
        return om.loss_fn(out, t)

    gm = make_fx(step)(params, buffers, list(om.example_inputs), om.target)
    targets = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
    assert any("convolution" in t or "mm" in t for t in targets)
    assert not targets & {"aten._local_scalar_dense.default", "aten.item.default"}
    again = gm(params, buffers, list(om.example_inputs), om.target)
    assert max_diff(again, step(params, buffers, om.example_inputs, om.target)) == 0.0


def test_conversion_is_deterministic(tmp_path) -> None:
    model, inputs = sm.build("bert")
    path = tmp_path / "bert.onnx"
    export_module(model, inputs, path, opset=17, training=True)
    a, b = load_onnx_module(path), load_onnx_module(path)
    for x, y in zip(a.example_inputs, b.example_inputs):
        assert torch.equal(x, y)
    assert torch.equal(a.target, b.target)
    sa, sb = a.module.state_dict(), b.module.state_dict()
    assert list(sa) == list(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)
    # Token ids index the embedding tables: they must be in range.
    assert int(a.example_inputs[0].max()) < 50 and int(a.example_inputs[0].min()) >= 0


def test_default_and_explicit_losses(tmp_path) -> None:
    model, inputs = sm.build("gpt")  # [N, S, V] logits
    path = tmp_path / "gpt.onnx"
    export_module(model, inputs, path, opset=17, training=True)
    # Language-model logits: cross-entropy over the vocabulary, one target per token.
    ce = load_onnx_module(path)
    assert ce.loss_fn.kind == "cross_entropy"
    assert ce.target.shape == (2, 8) and ce.target.dtype == torch.int64
    out = ce.module(*ce.example_inputs)
    expected = torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), ce.target.reshape(-1))
    assert torch.equal(ce.loss_fn(out, ce.target), expected)
    m = load_onnx_module(path, loss="mse")
    assert m.loss_fn.kind == "mse" and m.target.shape == (2, 8, 50) and m.target.is_floating_point()
    s = load_onnx_module(path, loss="sum")
    assert s.loss_fn(s.module(*s.example_inputs), s.target).dim() == 0

    model, inputs = sm.build("mlp")  # [N, C] scores
    path = tmp_path / "mlp.onnx"
    export_module(model, inputs, path, opset=17)
    om = load_onnx_module(path)
    assert om.loss_fn.kind == "cross_entropy" and om.target.shape == (4,)

    # A single-score head ([N, 1]) and a 4-D map get MSE by default.
    for module, x in ((torch.nn.Linear(20, 1), torch.randn(4, 20)), (torch.nn.Conv2d(3, 4, 1), torch.randn(2, 3, 5, 5))):
        path = tmp_path / "reg.onnx"
        export_module(module, (x,), path, opset=17)
        assert load_onnx_module(path).loss_fn.kind == "mse"
