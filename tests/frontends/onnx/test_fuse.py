"""The fusion pass: exported linear layers and GELU formulas (in every operand order the
exporters use) become F.linear / F.gelu, numerics stay within 1e-5 of onnx's reference
evaluator, gradients map back to the file's initializers, and look-alikes are left alone."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from poet_compiler.frontends.onnx import export_module, load_onnx_module
from poet_compiler.frontends.onnx.fuse import INTERNAL_DOMAIN, LINEAR_OP, fuse_graph

from . import small_models as sm
from .helpers import max_diff, reference_output

TOL = 1e-5


# -- exported transformers ------------------------------------------------------------

# (exporter, training, opset): training exports keep W and Transpose it at run time; eval
# exports fold the transpose into an [in, out] initializer (stored transposed by fusion);
# opset 20 writes Gelu itself; the dynamo exporter writes its own operand orders.
EXPORTS = [("legacy", True, 17), ("legacy", False, 17), ("legacy", True, 20), ("dynamo", False, 18)]


@pytest.mark.parametrize("name", ["bert", "gpt"])
@pytest.mark.parametrize(("exporter", "training", "opset"), EXPORTS, ids=lambda v: str(v))
def test_exported_transformer_fuses_and_matches_reference(tmp_path, name: str, exporter: str, training: bool, opset: int) -> None:
    model, inputs = sm.build(name)
    path = tmp_path / f"{name}.onnx"
    export_module(model, inputs, path, opset=opset, training=training, dynamo=exporter == "dynamo")
    fused, plain = load_onnx_module(path), load_onnx_module(path, fuse=False)

    # qkv, out, two feed-forward linears (+ the LM head on 3-D logits for gpt; bert's
    # head reads a 2-D [CLS] slice and exports as Gemm, which converts to F.linear anyway).
    assert fused.fusions["linear"] == (5 if name == "gpt" else 4)
    assert fused.fusions["gelu"] == (0 if opset >= 20 else 1)  # opset 20 has Gelu itself
    assert plain.fusions == {}
    ops = [s.op_type for s in fused.module.steps]
    assert "Erf" not in ops and "Tanh" not in ops and ops.count("Gelu") == 1
    assert "MatMul" in ops  # attention products stay MatMul (no initializer operand)
    # Eval exports fold the weight transposes into [in, out] initializers; training
    # exports keep the [out, in] weight. Only the former are stored transposed.
    assert bool(fused.transposed) == (not training)
    assert not any(s.op_type == "Transpose" and s.inputs[0] in fused.attr_of for s in fused.module.steps)

    with torch.no_grad():
        y = fused.module(*fused.example_inputs)
        assert max_diff(y, reference_output(path, fused)) <= TOL
        assert max_diff(y, plain.module(*plain.example_inputs)) <= TOL


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_gradients_map_back_to_onnx_initializers(tmp_path, training: bool) -> None:
    """Per ONNX initializer name and in the file's orientation, the fused module's
    gradients equal the unfused module's (which converts the file node by node)."""
    model, inputs = sm.build("gpt")
    path = tmp_path / "gpt.onnx"
    export_module(model, inputs, path, opset=17, training=training)
    fused, plain = load_onnx_module(path), load_onnx_module(path, fuse=False)
    for om in (fused, plain):
        om.loss_fn(om.module(*om.example_inputs), om.target).backward()
    g_fused, g_plain = fused.onnx_tensors(grads=True), plain.onnx_tensors(grads=True)
    assert sorted(g_fused) == sorted(g_plain) and g_fused
    for n in g_plain:
        assert max_diff(g_fused[n], g_plain[n]) <= TOL, n
    values = fused.onnx_tensors()
    file_inits = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}
    for n, t in values.items():
        assert np.array_equal(t.numpy(), file_inits[n]), n  # orientation restored
    if not training:
        n = sorted(fused.transposed)[0]
        p = dict(fused.module.named_parameters())[fused.attr_of[n]]
        assert tuple(p.shape) == file_inits[n].shape[::-1]


# -- hand-written GELU forms ----------------------------------------------------------

SQ2 = math.sqrt(2.0)
C = math.sqrt(2.0 / math.pi)


def _const(name: str, v: float) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(v, dtype=np.float32)))


def _model(nodes: list[onnx.NodeProto], out: str = "y", extra_outputs: tuple[str, ...] = ()) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 7])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, [3, 7]) for o in (out, *extra_outputs)],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _erf_forms() -> dict[str, list[onnx.NodeProto]]:
    mk = helper.make_node
    return {
        # torch legacy: Mul(Mul(x, Add(Erf(Div(x, sqrt2)), 1)), 0.5)
        "div_last_half": [_const("s", SQ2), _const("one", 1.0), _const("h", 0.5),
                          mk("Div", ["x", "s"], ["d"]), mk("Erf", ["d"], ["e"]), mk("Add", ["e", "one"], ["a"]),
                          mk("Mul", ["x", "a"], ["m"]), mk("Mul", ["m", "h"], ["y"])],
        # (x * 0.5) * (1 + erf(x * 1/sqrt2)), constants on the left
        "mul_half_first": [_const("s", 1 / SQ2), _const("one", 1.0), _const("h", 0.5),
                           mk("Mul", ["s", "x"], ["d"]), mk("Erf", ["d"], ["e"]), mk("Add", ["one", "e"], ["a"]),
                           mk("Mul", ["h", "x"], ["hx"]), mk("Mul", ["a", "hx"], ["y"])],
        # 0.5 * (x * (1 + erf(x / sqrt2))) with the 0.5 multiplied on the left
        "half_outer": [_const("s", SQ2), _const("one", 1.0), _const("h", 0.5),
                       mk("Div", ["x", "s"], ["d"]), mk("Erf", ["d"], ["e"]), mk("Add", ["e", "one"], ["a"]),
                       mk("Mul", ["a", "x"], ["m"]), mk("Mul", ["h", "m"], ["y"])],
    }


def _tanh_forms() -> dict[str, list[onnx.NodeProto]]:
    mk = helper.make_node
    tail = [mk("Tanh", ["u"], ["t"]), mk("Add", ["one", "t"], ["a"]),
            mk("Mul", ["x", "a"], ["m"]), mk("Mul", ["h", "m"], ["y"])]
    consts = [_const("k", 0.044715), _const("c", C), _const("one", 1.0), _const("h", 0.5)]
    return {
        # torch legacy: x*x*x
        "cube_by_mul": consts + [mk("Mul", ["x", "x"], ["x2"]), mk("Mul", ["x", "x2"], ["x3"]),
                                 mk("Mul", ["k", "x3"], ["kx3"]), mk("Add", ["x", "kx3"], ["p"]),
                                 mk("Mul", ["c", "p"], ["u"])] + tail,
        # HF NewGELU: Pow(x, 3)
        "cube_by_pow": consts + [_const("three", 3.0), mk("Pow", ["x", "three"], ["x3"]),
                                 mk("Mul", ["x3", "k"], ["kx3"]), mk("Add", ["kx3", "x"], ["p"]),
                                 mk("Mul", ["p", "c"], ["u"])] + tail,
    }


@pytest.mark.parametrize(
    ("form", "approximate"),
    [(f, "none") for f in _erf_forms()] + [(f, "tanh") for f in _tanh_forms()],
)
def test_gelu_forms_fuse(tmp_path, form: str, approximate: str) -> None:
    nodes = {**_erf_forms(), **_tanh_forms()}[form]
    m = _model(nodes)
    fused = fuse_graph(m.graph)
    assert fused.gelu == 1
    gelus = [n for n in fused.graph.node if n.op_type == "Gelu"]
    assert len(gelus) == 1 and list(gelus[0].input) == ["x"] and list(gelus[0].output) == ["y"]
    attrs = {a.name: helper.get_attribute_value(a) for a in gelus[0].attribute}
    assert attrs.get("approximate", b"none") in (approximate, approximate.encode())
    assert not any(n.op_type in ("Erf", "Tanh", "Mul", "Div", "Pow") for n in fused.graph.node)

    path = tmp_path / f"{form}.onnx"
    onnx.save(m, path)
    om = load_onnx_module(path, loss="sum")
    assert om.fusions["gelu"] == 1
    with torch.no_grad():
        y = om.module(*om.example_inputs)
    assert max_diff(y, reference_output(path, om)) <= TOL
    assert torch.equal(y, torch.nn.functional.gelu(om.example_inputs[0], approximate=approximate))


def test_gelu_lookalikes_are_left_alone() -> None:
    mk = helper.make_node
    base = _erf_forms()["div_last_half"]
    # x * (1 + erf(x / sqrt2)) is 2 * GELU: the region is found but its values differ.
    no_half = [n for n in base if n.output[0] not in ("h", "y")]
    no_half[-1] = mk("Mul", ["x", "a"], ["y"])
    assert fuse_graph(_model(no_half).graph).gelu == 0
    # The erf value is also read outside the formula: fusing would lose it.
    assert fuse_graph(_model(base, extra_outputs=("e",)).graph).gelu == 0
    # The wrong constant (0.6 instead of 0.5).
    wrong = [(_const("h", 0.6) if n.output[0] == "h" else n) for n in base]
    assert fuse_graph(_model(wrong).graph).gelu == 0


# -- linear ---------------------------------------------------------------------------


def _linear_model(direct_weight: bool, bias_shape: list[int], weight_elsewhere: bool = False) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 4) if direct_weight else (4, 6)).astype(np.float32)  # [in,out] / [out,in]
    b = rng.standard_normal(bias_shape).astype(np.float32)
    mk = helper.make_node
    nodes = [] if direct_weight else [mk("Transpose", ["W"], ["Wt"], perm=[1, 0])]
    nodes += [mk("MatMul", ["x", "W" if direct_weight else "Wt"], ["mm"]), mk("Add", ["mm", "b"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 4])]
    if weight_elsewhere:
        nodes.append(mk("ReduceSum", ["W"], ["ws"], keepdims=0))
        outputs.append(helper.make_tensor_value_info("ws", TensorProto.FLOAT, []))
    g = helper.make_graph(
        nodes, "lin", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 6])], outputs,
        initializer=[numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("direct_weight", [False, True], ids=["transpose_w", "folded_w"])
def test_matmul_add_becomes_linear(tmp_path, direct_weight: bool) -> None:
    m = _linear_model(direct_weight, [4])
    fused = fuse_graph(m.graph)
    assert fused.linear == 1
    assert [(n.domain, n.op_type, list(n.input), list(n.output)) for n in fused.graph.node] == [
        (INTERNAL_DOMAIN, LINEAR_OP, ["x", "W", "b"], ["y"])
    ]
    assert fused.transposed == ({"W"} if direct_weight else set())
    w = {i.name: numpy_helper.to_array(i) for i in fused.graph.initializer}["W"]
    assert w.shape == (4, 6)  # F.linear's [out, in]
    assert len(m.graph.node) == (2 if direct_weight else 3)  # the input graph is untouched

    path = tmp_path / "lin.onnx"
    onnx.save(m, path)
    om = load_onnx_module(path, loss="sum")
    assert [s.op_type for s in om.module.steps] == [LINEAR_OP]
    with torch.no_grad():
        assert max_diff(om.module(*om.example_inputs), reference_output(path, om)) <= TOL


def test_linear_fusion_keeps_what_it_must() -> None:
    # A bias that does not match [out] stays a separate Add (the MatMul still fuses).
    f = fuse_graph(_linear_model(False, [5, 4]).graph)
    assert [n.op_type for n in f.graph.node] == [LINEAR_OP, "Add"]
    # An [in, out] weight also read by another op cannot be stored transposed.
    f = fuse_graph(_linear_model(True, [4], weight_elsewhere=True).graph)
    assert f.linear == 0 and f.transposed == frozenset()
    # ... but a weight behind a Transpose still fuses: the file's W is already [out, in]
    # and keeps its orientation; the Transpose, read by nothing else, is dropped.
    f = fuse_graph(_linear_model(False, [4], weight_elsewhere=True).graph)
    assert f.linear == 1 and [n.op_type for n in f.graph.node] == [LINEAR_OP, "ReduceSum"]


def test_fused_ops_are_not_accepted_from_files(tmp_path) -> None:
    """The internal domain is not an ONNX op a file may use."""
    from poet_compiler.errors import FrontendError
    from poet_compiler.frontends.onnx import supported_ops

    assert LINEAR_OP not in supported_ops() and not any("::" in op for op in supported_ops())
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    node = helper.make_node(LINEAR_OP, ["x", "x"], ["y"], domain=INTERNAL_DOMAIN)
    g = helper.make_graph([node], "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(INTERNAL_DOMAIN, 1)])
    m.ir_version = 8
    path = tmp_path / "internal.onnx"
    onnx.save(m, path)
    with pytest.raises(FrontendError, match="unsupported ONNX op 'ai.poetc::Linear'"):
        load_onnx_module(path)
