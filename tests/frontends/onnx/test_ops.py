"""Single-node ONNX models, one per converter and opset-dependent form, against
onnx's reference evaluator."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from poet_compiler.frontends.onnx import load_onnx_module

from .helpers import max_diff, reference_output

F32 = TP.FLOAT


def _model(op: str, x_shape: list[int], out_shape: list[int] | None, opset: int, consts: dict[str, np.ndarray] | None = None,
           inputs: list[str] | None = None, n_out: int = 1, out_type: int = F32, **attrs: object) -> onnx.ModelProto:
    """One node ``op`` reading graph input x (and constant initializers ``consts``)."""
    consts = consts or {}
    names = inputs if inputs is not None else ["x", *consts]
    outs = [f"y{i}" for i in range(n_out)]
    node = oh.make_node(op, names, outs, name=f"{op.lower()}_node", **attrs)
    graph = oh.make_graph(
        [node], "g",
        [oh.make_tensor_value_info("x", F32, x_shape)],
        [oh.make_tensor_value_info(o, out_type, out_shape) for o in outs],
        initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    if out_shape is None:
        # The checker wants output shapes: take them from the reference evaluator.
        x = np.zeros(x_shape, np.float32)
        ys = ReferenceEvaluator(model).run(None, {"x": x})
        del model.graph.output[:]
        model.graph.output.extend(
            oh.make_tensor_value_info(o, out_type, list(np.shape(y))) for o, y in zip(outs, ys)
        )
    return model


def i64(*v: int) -> np.ndarray:
    return np.array(v, dtype=np.int64)


CASES = {
    # elementwise & activations
    "relu": (_model, ("Relu", [2, 3], None, 17)),
    "leaky": (_model, ("LeakyRelu", [2, 3], None, 17), {"alpha": 0.2}),
    "elu": (_model, ("Elu", [2, 3], None, 17)),
    "gelu20-tanh": (_model, ("Gelu", [2, 3], None, 20), {"approximate": "tanh"}),
    "hardsigmoid": (_model, ("HardSigmoid", [2, 3], None, 17)),
    "softplus": (_model, ("Softplus", [2, 3], None, 17)),
    "clip6-attrs": (_model, ("Clip", [2, 3], None, 6), {"min": -0.5, "max": 0.5}),
    "clip13-inputs": (_model, ("Clip", [2, 3], None, 13, {"lo": np.array(-0.5, np.float32), "hi": np.array(0.3, np.float32)})),
    "pow-const": (_model, ("Pow", [2, 3], None, 13, {"e": np.array(2.0, np.float32)})),
    "div-bcast": (_model, ("Div", [2, 3], None, 13, {"d": np.array([1.0, 2.0, 4.0], np.float32)})),
    "max3": (_model, ("Max", [2, 3], None, 13, {"a": np.ones(3, np.float32) * 0.1, "b": np.zeros((2, 1), np.float32)})),
    # shape & data movement
    "unsqueeze11-attr": (_model, ("Unsqueeze", [2, 3], None, 11), {"axes": [0, -1]}),
    "unsqueeze13-input": (_model, ("Unsqueeze", [2, 3], None, 13, {"axes": i64(0, 3)})),
    "squeeze11-attr": (_model, ("Squeeze", [2, 1, 3, 1], None, 11), {"axes": [1]}),
    "squeeze13-all": (_model, ("Squeeze", [2, 1, 3, 1], None, 13)),
    "split11-attr": (_model, ("Split", [6, 2], None, 11), {"axis": 0, "split": [2, 4]}, 2),
    "split13-input": (_model, ("Split", [6, 2], None, 13, {"s": i64(1, 5)}), {"axis": 0}, 2),
    "split18-num": (_model, ("Split", [2, 7], None, 18), {"axis": 1, "num_outputs": 3}, 3),
    "slice-neg-step": (_model, ("Slice", [5, 6], None, 13, {"s": i64(4, -1), "e": i64(0, -100), "a": i64(0, 1), "st": i64(-2, -2)})),
    "slice9-attrs": (_model, ("Slice", [5, 6], None, 9), {"starts": [1], "ends": [4], "axes": [1]}),
    "transpose": (_model, ("Transpose", [2, 3, 4], None, 13), {"perm": [2, 0, 1]}),
    "flatten2": (_model, ("Flatten", [2, 3, 4, 5], None, 13), {"axis": 2}),
    "reshape0": (_model, ("Reshape", [2, 3, 4], None, 14, {"s": i64(0, -1)})),
    "expand": (_model, ("Expand", [3, 1], None, 13, {"s": i64(2, 3, 4)})),
    "tile": (_model, ("Tile", [2, 3], None, 13, {"r": i64(2, 1)})),
    "trilu-lower": (_model, ("Trilu", [4, 4], None, 14, {"k": np.array(1, np.int64)}), {"upper": 0}),
    "gather-const": (_model, ("Gather", [4, 3], None, 13, {"i": i64(3, -1, 0)}), {"axis": 0}),
    "pad-reflect": (_model, ("Pad", [1, 2, 4, 4], None, 13, {"p": i64(0, 0, 1, 2, 0, 0, 2, 1)}), {"mode": "reflect"}),
    "cumsum-rev": (_model, ("CumSum", [3, 4], None, 14, {"a": np.array(1, np.int64)}), {"reverse": 1, "exclusive": 1}),
    # reductions: axes as attribute before 13/18, as input after
    "reducemean17-attr": (_model, ("ReduceMean", [2, 3, 4], None, 17), {"axes": [1, 2], "keepdims": 0}),
    "reducemean18-input": (_model, ("ReduceMean", [2, 3, 4], None, 18, {"a": i64(-1)})),
    "reducesum11-attr": (_model, ("ReduceSum", [2, 3, 4], None, 11), {"axes": [0]}),
    "reducesum13-input": (_model, ("ReduceSum", [2, 3, 4], None, 13, {"a": i64(2)}), {"keepdims": 0}),
    "reducemax18-all": (_model, ("ReduceMax", [2, 3, 4], None, 18)),
    # layers
    "logsoftmax13": (_model, ("LogSoftmax", [2, 3, 4], None, 13), {"axis": 1}),
    "conv-same-upper": (_model, ("Conv", [1, 2, 5, 5], None, 13, {"w": np.random.default_rng(0).standard_normal((3, 2, 2, 2)).astype(np.float32)}), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    "conv-asym-pads": (_model, ("Conv", [1, 2, 5, 5], None, 13, {"w": np.random.default_rng(1).standard_normal((3, 2, 3, 3)).astype(np.float32)}), {"pads": [0, 1, 2, 1]}),
    "convtranspose": (_model, ("ConvTranspose", [1, 2, 3, 3], None, 13, {"w": np.random.default_rng(2).standard_normal((2, 3, 3, 3)).astype(np.float32)}), {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
    "maxpool-ceil": (_model, ("MaxPool", [1, 2, 5, 5], None, 13), {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    "avgpool-pad": (_model, ("AveragePool", [1, 2, 5, 5], None, 13), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    "globalmax": (_model, ("GlobalMaxPool", [1, 2, 5, 5], None, 13)),
    "gemm-general": (_model, ("Gemm", [3, 4], None, 13, {"b": np.ones((5, 4), np.float32), "c": np.ones((3, 5), np.float32)}), {"alpha": 0.5, "beta": 2.0, "transB": 1}),
    "layernorm17": (_model, ("LayerNormalization", [2, 3, 4], None, 17, {"s": np.full(4, 1.5, np.float32), "b": np.full(4, 0.1, np.float32)}), {"axis": -1}),
    "batchnorm15-eval": (_model, ("BatchNormalization", [2, 3, 4], None, 15, {"s": np.full(3, 1.5, np.float32), "b": np.full(3, 0.1, np.float32), "m": np.full(3, 0.2, np.float32), "v": np.full(3, 2.0, np.float32)})),
    "batchnorm15-train": (_model, ("BatchNormalization", [4, 3, 2], None, 15, {"s": np.full(3, 1.5, np.float32), "b": np.full(3, 0.1, np.float32), "m": np.zeros(3, np.float32), "v": np.ones(3, np.float32)}), {"training_mode": 1}, 3),
    "dropout-eval": (_model, ("Dropout", [2, 3], None, 13, {"r": np.array(0.5, np.float32)})),
    "einsum": (_model, ("Einsum", [2, 3], None, 13, {"w": np.ones((3, 4), np.float32)}), {"equation": "ij,jk->ik"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_single_op_matches_reference(tmp_path, case: str) -> None:
    spec = CASES[case]
    fn, args = spec[0], spec[1]
    attrs = spec[2] if len(spec) > 2 else {}
    n_out = spec[3] if len(spec) > 3 else 1
    model = fn(*args, n_out=n_out, **attrs)
    path = tmp_path / f"{case}.onnx"
    onnx.save(model, path)
    om = load_onnx_module(path, loss="sum")
    y = om.module(*om.example_inputs)
    assert max_diff(y, reference_output(path, om)) <= 1e-5


def test_softmax_before_opset13_coerces_to_2d(tmp_path) -> None:
    """Softmax-11 normalizes over all dims from ``axis`` on (the input is coerced to 2-D);
    onnx.reference implements only the opset-13 per-axis form, so compare with numpy."""
    path = tmp_path / "softmax11.onnx"
    onnx.save(_model("Softmax", [2, 3, 4], [2, 3, 4], 11, axis=1), path)
    om = load_onnx_module(path, loss="sum")
    x = om.example_inputs[0].numpy().reshape(2, 12)
    e = np.exp(x - x.max(1, keepdims=True))
    expected = (e / e.sum(1, keepdims=True)).reshape(2, 3, 4)
    assert max_diff(om.module(*om.example_inputs), expected) <= 1e-6


def test_shape_driven_reshape_folds_at_conversion(tmp_path) -> None:
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape (as exporters write x.view(b, -1))
    folds into constants: the module keeps only the Reshape step."""
    nodes = [
        oh.make_node("Shape", ["x"], ["s"]),
        oh.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.array(0, np.int64))),
        oh.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        oh.make_node("Unsqueeze", ["b", "ax"], ["b1"]),
        oh.make_node("Concat", ["b1", "minus1"], ["shape"], axis=0),
        oh.make_node("Reshape", ["x", "shape"], ["y"], name="the_reshape"),
        oh.make_node("ConstantOfShape", ["shape_c"], ["zeros"], value=numpy_helper.from_array(np.array([0.5], np.float32))),
        oh.make_node("Add", ["y", "zeros"], ["z"]),
    ]
    graph = oh.make_graph(
        nodes, "g", [oh.make_tensor_value_info("x", F32, [2, 3, 4])], [oh.make_tensor_value_info("z", F32, [2, 12])],
        initializer=[numpy_helper.from_array(i64(0), "ax"), numpy_helper.from_array(i64(-1), "minus1"),
                     numpy_helper.from_array(i64(1, 12), "shape_c")],
    )
    path = tmp_path / "m.onnx"
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]), path)
    om = load_onnx_module(path, loss="sum")
    assert [s.op_type for s in om.module.steps] == ["Reshape", "Add"]
    assert max_diff(om.module(*om.example_inputs), reference_output(path, om)) == 0.0
    assert not list(om.module.parameters())  # integer and folded constants are buffers


def test_symbolic_dims_need_input_shapes(tmp_path) -> None:
    graph = oh.make_graph(
        [oh.make_node("Relu", ["x"], ["y"])], "g",
        [oh.make_tensor_value_info("x", F32, ["batch", 3])], [oh.make_tensor_value_info("y", F32, ["batch", 3])],
    )
    path = tmp_path / "m.onnx"
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]), path)
    from poet_compiler.errors import FrontendError

    with pytest.raises(FrontendError, match=r"input 'x' dim 0 is symbolic \('batch'\)"):
        load_onnx_module(path)
    om = load_onnx_module(path, input_shapes={"x": (5, 3)})
    assert om.example_inputs[0].shape == (5, 3) and om.loss_fn.kind == "cross_entropy"
    with pytest.raises(FrontendError, match="dim 1 is fixed to 3"):
        load_onnx_module(path, input_shapes={"x": (5, 4)})
    assert torch.equal(om.module(*om.example_inputs), torch.relu(om.example_inputs[0]))
