"""ONNX -> :class:`~poet_compiler.quant.float_graph.FloatGraph` (docs/int8.md, "Where the
scales come from").

Reads a float model (Conv, BatchNormalization folded into the Conv before it, Relu,
Clip(0, 6), MaxPool, AveragePool, GlobalAveragePool, Add, Flatten/Reshape, Gemm,
Identity/Dropout) and a QDQ model written by ``onnxruntime.quantization.quantize_static``
(the same ops between QuantizeLinear/DequantizeLinear pairs, weights per channel): the
Q/DQ pairs are folded away and their integers recorded in ``FloatGraph.fixed``. Anything
else raises :class:`QuantError` naming the node.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from poet_compiler.errors import PoetError
from poet_compiler.quant.float_graph import FAdd, FConv, FloatGraph, FNode, FPool, FView
from poet_compiler.quant.qmodel import QParams


class QuantError(PoetError):
    """A model int8 training cannot take (an unsupported op or pattern), in one line."""


def _attrs(node: onnx.NodeProto) -> dict[str, object]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _pair(v: object, default: int) -> tuple[int, int]:
    seq = list(v) if isinstance(v, list | tuple) else [default, default]
    return int(seq[0]), int(seq[1])


def _pads(node: onnx.NodeProto, attrs: dict[str, object]) -> tuple[int, int, int, int]:
    if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise QuantError(f"node {node.name or node.op_type} ({node.op_type}): auto_pad is not supported")
    p = list(attrs.get("pads", [0, 0, 0, 0]))  # type: ignore[call-overload]
    return int(p[0]), int(p[1]), int(p[2]), int(p[3])


class _Reader:
    def __init__(self, model: onnx.ModelProto) -> None:
        self.graph = model.graph
        self.init = {t.name: numpy_helper.to_array(t) for t in self.graph.initializer}
        for n in self.graph.node:
            if n.op_type == "Constant":
                self.init[n.output[0]] = numpy_helper.to_array(_attrs(n)["value"])  # type: ignore[arg-type]
        self.alias: dict[str, str] = {}
        self.nodes: list[FNode] = []
        self.qparams: dict[str, QParams] = {}
        self.dq_int: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # DQ output -> (ints, scale, zp)
        self.weights: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.biases: dict[str, np.ndarray] = {}

    def name(self, tensor: str) -> str:
        while tensor in self.alias:
            tensor = self.alias[tensor]
        return tensor

    def const(self, node: onnx.NodeProto, tensor: str) -> np.ndarray:
        tensor = self.name(tensor)  # the exporter shares equal initializers behind Identity nodes
        if tensor in self.dq_int:
            ints, scale, zp = self.dq_int[tensor]
            shape = (-1,) + (1,) * (ints.ndim - 1) if np.ndim(scale) else ()
            return ((ints.astype(np.float64) - np.reshape(zp, shape)) * np.reshape(scale, shape)).astype(np.float32)
        if tensor not in self.init:
            raise QuantError(f"node {node.name or node.op_type} ({node.op_type}): {tensor} must be a constant")
        return self.init[tensor]

    def producer_of(self, tensor: str) -> FNode | None:
        return next((n for n in self.nodes if n.output == tensor), None)

    def consumers(self, tensor: str) -> int:
        return sum(tensor in n.input for n in self.graph.node)


def _quant_linear(r: _Reader, node: onnx.NodeProto) -> None:
    src = node.input[0]
    scale = r.const(node, node.input[1])
    zp = r.init.get(node.input[2], np.zeros((), np.int8)) if len(node.input) > 2 else np.zeros((), np.int8)
    if node.op_type == "DequantizeLinear" and src in r.init:
        r.dq_int[node.output[0]] = (r.init[src], scale, zp)
        return
    if node.op_type == "QuantizeLinear":
        if np.ndim(scale) or zp.dtype != np.int8:
            raise QuantError(f"node {node.name} (QuantizeLinear): activations must be int8 per tensor")
        r.qparams[r.name(src)] = QParams(float(scale), int(zp))
    r.alias[node.output[0]] = r.name(src)


def _conv_like(r: _Reader, node: onnx.NodeProto, attrs: dict[str, object]) -> None:
    label = node.name or node.op_type
    w = r.const(node, node.input[1])
    b = r.const(node, node.input[2]) if len(node.input) > 2 and node.input[2] else np.zeros(w.shape[0], np.float32)
    if node.op_type == "Gemm":
        if attrs.get("transB", 0) != 1 or attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0 \
                or attrs.get("beta", 1.0) != 1.0:
            raise QuantError(f"node {label} (Gemm): only y = x W^T + b is supported")
        conv = FConv(label, r.name(node.input[0]), node.output[0], w.reshape(*w.shape, 1, 1).astype(np.float32),
                     b.astype(np.float32), linear=True, param_names=(node.input[1], node.input[2]))
    else:
        if any(d != 1 for d in attrs.get("dilations", [1, 1])):  # type: ignore[attr-defined]
            raise QuantError(f"node {label} (Conv): dilation is not supported")
        if w.ndim != 4:
            raise QuantError(f"node {label} (Conv): only 2-D convolution is supported")
        conv = FConv(label, r.name(node.input[0]), node.output[0], w.astype(np.float32), b.astype(np.float32),
                     _pair(attrs.get("strides"), 1), _pads(node, attrs), int(attrs.get("group", 1)),  # type: ignore[call-overload]
                     param_names=(node.input[1], node.input[2] if len(node.input) > 2 else ""))
    for t, key in ((node.input[1], "w"), (node.input[2] if len(node.input) > 2 else "", "b")):
        if t in r.dq_int:
            ints, scale, _ = r.dq_int[t]
            if key == "w":
                r.weights[label] = (ints.reshape(conv.weight.shape).astype(np.int8),
                                    np.broadcast_to(np.asarray(scale, np.float64), (w.shape[0],)).copy())
            else:
                r.biases[label] = ints.astype(np.int32)
    r.nodes.append(conv)


def _fold_bn(r: _Reader, node: onnx.NodeProto, attrs: dict[str, object]) -> None:
    prev = r.producer_of(r.name(node.input[0]))
    if not isinstance(prev, FConv) or prev.linear or prev.act != "none" or r.consumers(node.input[0]) != 1:
        raise QuantError(f"node {node.name or node.op_type} (BatchNormalization): only a BatchNormalization "
                         "right after a Conv is supported (it is folded into the Conv)")
    gamma, beta, mean, var = (r.const(node, t).astype(np.float64) for t in node.input[1:5])
    k = gamma / np.sqrt(var + float(attrs.get("epsilon", 1e-5)))  # type: ignore[arg-type]
    prev.weight = (prev.weight * k.reshape(-1, 1, 1, 1)).astype(np.float32)
    prev.bias = ((prev.bias - mean) * k + beta).astype(np.float32)
    prev.output = node.output[0]


def _activation(r: _Reader, node: onnx.NodeProto, act: str) -> None:
    prev = r.producer_of(r.name(node.input[0]))
    if not isinstance(prev, FConv | FAdd) or prev.act != "none" or r.consumers(node.input[0]) != 1:
        raise QuantError(f"node {node.name or node.op_type} ({node.op_type}): an activation must follow a "
                         "Conv, Gemm or Add whose output nothing else reads")
    prev.act = act
    r.alias[node.output[0]] = r.name(node.input[0])


def _clip_is_relu6(r: _Reader, node: onnx.NodeProto, attrs: dict[str, object]) -> bool:
    lo = float(r.const(node, node.input[1])) if len(node.input) > 1 and node.input[1] else attrs.get("min")
    hi = float(r.const(node, node.input[2])) if len(node.input) > 2 and node.input[2] else attrs.get("max")
    return lo == 0.0 and hi == 6.0


def _node(r: _Reader, node: onnx.NodeProto) -> None:
    op, label, attrs = node.op_type, node.name or node.op_type, _attrs(node)
    if op in ("QuantizeLinear", "DequantizeLinear"):
        _quant_linear(r, node)
    elif op in ("Identity", "Dropout"):
        r.alias[node.output[0]] = r.name(node.input[0])
    elif op in ("Conv", "Gemm"):
        _conv_like(r, node, attrs)
    elif op == "BatchNormalization":
        _fold_bn(r, node, attrs)
    elif op == "Relu" or (op == "Clip" and _clip_is_relu6(r, node, attrs)):
        _activation(r, node, "relu" if op == "Relu" else "relu6")
    elif op in ("MaxPool", "AveragePool"):
        if attrs.get("ceil_mode", 0) or any(d != 1 for d in attrs.get("dilations", [1, 1])):  # type: ignore[attr-defined]
            raise QuantError(f"node {label} ({op}): ceil_mode and dilation are not supported")
        kernel = _pair(attrs["kernel_shape"], 1)
        r.nodes.append(FPool(label, r.name(node.input[0]), node.output[0], "max" if op == "MaxPool" else "avg",
                             kernel, _pair(attrs.get("strides"), 1), _pads(node, attrs)))
    elif op == "GlobalAveragePool":
        r.nodes.append(FPool(label, r.name(node.input[0]), node.output[0], "avg", global_pool=True))
    elif op == "Add" and not any(t in r.init or t in r.dq_int for t in node.input):
        r.nodes.append(FAdd(label, (r.name(node.input[0]), r.name(node.input[1])), node.output[0]))
    elif op in ("Flatten", "Reshape"):
        r.nodes.append(FView(label, r.name(node.input[0]), node.output[0]))
    elif op == "Constant":
        return
    else:
        raise QuantError(f"node {label} ({op}): not supported by int8 training")


def read(source: str | Path | bytes) -> FloatGraph:
    """The float graph (and any QDQ integers) of an ONNX model file or its bytes."""
    from poet_compiler.quant.float_graph import Fixed

    try:
        model = onnx.load_from_string(source) if isinstance(source, bytes) else onnx.load(str(source))
    except Exception as exc:  # onnx raises DecodeError, OSError...; one line either way
        raise QuantError(f"{source if not isinstance(source, bytes) else 'model'}: not a readable ONNX file "
                         f"({type(exc).__name__})") from None
    r = _Reader(model)
    for node in model.graph.node:
        _node(r, node)
    inputs = [i for i in model.graph.input if i.name not in r.init]
    if len(inputs) != 1 or len(model.graph.output) != 1:
        raise QuantError("int8 training needs a model with one input and one output")
    dims = [d.dim_value for d in inputs[0].type.tensor_type.shape.dim]
    if any(d <= 0 for d in dims[1:]):
        raise QuantError(f"input {inputs[0].name}: every dimension but the batch must be fixed")
    out = r.name(model.graph.output[0].name)
    fixed = Fixed(r.qparams, r.weights, r.biases)
    return FloatGraph(r.nodes, inputs[0].name, out, tuple(dims[1:]), fixed)
