"""Conversion-time fusion: undo the exporters' decompositions of linear layers and GELU.

``torch.onnx.export`` writes ``nn.Linear`` on a 3-D input as ``MatMul(X, Transpose(W))``
followed by ``Add(bias, .)`` (or, with constant folding, ``MatMul(X, W^T)`` with the
transposed weight stored as a new initializer), and ``nn.GELU`` before opset 20 as its
formula (``x * 0.5 * (1 + erf(x / sqrt(2)))`` or the tanh approximation), in several
operand orders. Converted node by node, these give a training graph with more nodes and
roughly twice the saved activation bytes of the PyTorch model the file came from: every
intermediate of the formula is a tensor the backward pass keeps. This pass rewrites the
ONNX graph before conversion so that they convert to ``F.linear`` and ``F.gelu`` — the
same aten ops (addmm, gelu/gelu_backward) as tracing the PyTorch model directly.

Linear: ``MatMul(X, B)`` where B is ``Transpose(W)`` of a 2-D float initializer W
(already in F.linear's [out, in] orientation), or B is itself a 2-D float initializer
read only as a MatMul right operand (then its stored value is transposed to [out, in];
the name is kept and listed in :attr:`Fusions.transposed` so gradients can be mapped back
to the file's orientation), optionally followed by ``Add`` of a 1-D [out] float
initializer that reads nothing else of the product.

GELU: exporters order the formula's operands in many algebraically equal ways (Div by
sqrt(2) or Mul by 1/sqrt(2), x*x*x or Pow(x, 3), the 0.5 applied first or last...).
Rather than list every order, a candidate region is found structurally — the elementwise
nodes between one input x and one output y that pass through an Erf or Tanh, whose other
operands are all scalar constants and whose intermediates are read only inside the
region — and is accepted when its own arithmetic, evaluated in float64 on probe points
spanning [-6, 6], equals exact or tanh-approximated GELU to 1e-6 relative. The two GELUs
differ by up to 5e-4 there, so the check tells them apart; a region computing anything
else is left alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from .context import INTERNAL_DOMAIN

# The fused linear node (domain INTERNAL_DOMAIN, never accepted from a file: the loader
# refuses non-default domains before fusion runs): inputs X, W [out, in], optional b.
LINEAR_OP = "Linear"

# Elementwise ops a GELU region may contain, with their float64 semantics for the check.
_REGION_OPS: dict[str, Callable[..., torch.Tensor]] = {
    "Add": torch.add,
    "Sub": torch.sub,
    "Mul": torch.mul,
    "Div": torch.div,
    "Pow": torch.pow,
    "Erf": torch.erf,
    "Tanh": torch.tanh,
}
_MAX_REGION = 16  # nodes; the longest exporter form (tanh, x*x*x) has 9
_MAX_CHAIN = 5  # elementwise nodes after the Erf/Tanh before y
_PROBE = torch.linspace(-6.0, 6.0, 121, dtype=torch.float64)
_GELU_TOL = 1e-6
_TRANSPOSABLE = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16)


def _gelu_reference(approximate: str) -> torch.Tensor:
    x = _PROBE
    if approximate == "none":
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


@dataclass(frozen=True)
class Fusions:
    """The rewritten graph and what was fused."""

    graph: onnx.GraphProto
    linear: int = 0
    gelu: int = 0
    #: Initializers whose stored value was transposed to [out, in] for F.linear.
    transposed: frozenset[str] = frozenset()


class _Index:
    """Producers, consumers and constants of a node list (rebuilt after each pass)."""

    def __init__(self, graph: onnx.GraphProto, nodes: list[onnx.NodeProto]) -> None:
        self.nodes = nodes
        self.outputs = {o.name for o in graph.output}
        self.graph_inputs = {i.name for i in graph.input}
        self.inits = {i.name: i for i in graph.initializer}
        self.producer: dict[str, int] = {}
        self.consumers: dict[str, list[int]] = {}
        for k, n in enumerate(nodes):
            for o in n.output:
                if o:
                    self.producer[o] = k
            for i in n.input:
                if i:
                    self.consumers.setdefault(i, []).append(k)

    def node_of(self, value: str) -> onnx.NodeProto | None:
        k = self.producer.get(value)
        return None if k is None else self.nodes[k]

    def only_consumer(self, value: str) -> int | None:
        """The single node reading ``value``, if exactly one does and it is no graph output."""
        c = self.consumers.get(value, [])
        if len(c) != 1 or value in self.outputs:
            return None
        return c[0]

    def init(self, value: str) -> onnx.TensorProto | None:
        """The initializer named ``value`` (not one a caller may override as an input)."""
        if value in self.graph_inputs:
            return None
        return self.inits.get(value)

    def scalar(self, value: str) -> float | None:
        """The value of a one-element float/int constant (Constant node or initializer)."""
        t: np.ndarray | None = None
        init = self.init(value)
        if init is not None and init.data_location != onnx.TensorProto.EXTERNAL:
            t = numpy_helper.to_array(init)
        else:
            n = self.node_of(value)
            if n is not None and n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
                for a in n.attribute:
                    if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                        t = numpy_helper.to_array(a.t)
                    elif a.name == "value_float":
                        t = np.asarray(a.f)
                    elif a.name == "value_int":
                        t = np.asarray(a.i)
        if t is None or t.size != 1 or t.dtype.kind not in "fiu":
            return None
        return float(t.reshape(-1)[0])


def _is_default(n: onnx.NodeProto) -> bool:
    return n.domain in ("", "ai.onnx")


def fuse_graph(graph: onnx.GraphProto) -> Fusions:
    """``graph`` with linear layers and GELUs fused (a new GraphProto; the input is kept)."""
    nodes = list(graph.node)
    nodes, n_linear, transposed, dead_candidates = _fuse_linear(graph, nodes)
    nodes, n_gelu = _fuse_gelu(graph, nodes)
    nodes = _drop_dead(graph, nodes, dead_candidates)
    out = onnx.GraphProto()
    out.CopyFrom(graph)
    del out.node[:]
    out.node.extend(nodes)
    if transposed:
        for k, init in enumerate(out.initializer):
            if init.name in transposed:
                arr = numpy_helper.to_array(init)
                out.initializer[k].CopyFrom(numpy_helper.from_array(np.ascontiguousarray(arr.T), init.name))
    return Fusions(graph=out, linear=n_linear, gelu=n_gelu, transposed=frozenset(transposed))


# -- linear ---------------------------------------------------------------------------


def _float_matrix(init: onnx.TensorProto | None) -> bool:
    return (
        init is not None
        and len(init.dims) == 2
        and init.data_type in _TRANSPOSABLE
        and init.data_location != onnx.TensorProto.EXTERNAL
    )


def _transpose_2d(n: onnx.NodeProto) -> bool:
    perm = [list(a.ints) for a in n.attribute if a.name == "perm"]
    return n.op_type == "Transpose" and _is_default(n) and (not perm or perm[0] == [1, 0])


def _fuse_linear(
    graph: onnx.GraphProto, nodes: list[onnx.NodeProto]
) -> tuple[list[onnx.NodeProto], int, set[str], set[str]]:
    ix = _Index(graph, nodes)
    # Initializers read only as MatMul right operands may be stored transposed.
    direct_ok: set[str] = set()
    for name in ix.inits:
        uses = ix.consumers.get(name, [])
        if (
            _float_matrix(ix.init(name))
            and uses
            and name not in ix.outputs
            and all(
                nodes[k].op_type == "MatMul" and _is_default(nodes[k]) and list(nodes[k].input).count(name) == 1
                and nodes[k].input[1] == name
                for k in uses
            )
        ):
            direct_ok.add(name)

    replace: dict[int, onnx.NodeProto] = {}
    removed: set[int] = set()
    transposed: set[str] = set()
    transposes: set[str] = set()  # Transpose outputs that may now be dead
    for k, n in enumerate(nodes):
        if n.op_type != "MatMul" or not _is_default(n) or len(n.input) != 2:
            continue
        x, b = n.input
        if b in direct_ok:
            weight, out_dim = b, int(ix.inits[b].dims[1])
        else:
            t = ix.node_of(b)
            if t is None or not _transpose_2d(t) or not _float_matrix(ix.init(t.input[0])):
                continue
            weight, out_dim = t.input[0], int(ix.inits[t.input[0]].dims[0])
            transposes.add(b)
        y, bias = n.output[0], None
        add_k = ix.only_consumer(y)
        if add_k is not None:
            add = nodes[add_k]
            other = [v for v in add.input if v != y]
            if add.op_type == "Add" and _is_default(add) and len(other) == 1:
                bi = ix.init(other[0])
                if (bi is not None and list(bi.dims) == [out_dim] and bi.data_type == ix.inits[weight].data_type
                        and bi.data_location != onnx.TensorProto.EXTERNAL):
                    bias, y = other[0], add.output[0]
                    removed.add(add_k)
        if weight in direct_ok:
            transposed.add(weight)
        fused = onnx.helper.make_node(
            LINEAR_OP, [x, weight] + ([bias] if bias else []), [y], name=n.name or y, domain=INTERNAL_DOMAIN
        )
        replace[k] = fused
    out = [replace.get(k, n) for k, n in enumerate(nodes) if k not in removed]
    return out, len(replace), transposed, transposes


def _drop_dead(graph: onnx.GraphProto, nodes: list[onnx.NodeProto], candidates: set[str]) -> list[onnx.NodeProto]:
    """Remove the weight Transposes that fusion left without readers."""
    if not candidates:
        return nodes
    ix = _Index(graph, nodes)
    dead = {v for v in candidates if not ix.consumers.get(v) and v not in ix.outputs}
    return [n for n in nodes if not (n.op_type == "Transpose" and n.output[0] in dead)]


# -- GELU -----------------------------------------------------------------------------


def _fuse_gelu(graph: onnx.GraphProto, nodes: list[onnx.NodeProto]) -> tuple[list[onnx.NodeProto], int]:
    ix = _Index(graph, nodes)
    refs = {a: _gelu_reference(a) for a in ("none", "tanh")}
    taken: set[int] = set()
    replace: dict[int, onnx.NodeProto] = {}
    for k, n in enumerate(nodes):
        if n.op_type not in ("Erf", "Tanh") or not _is_default(n) or k in taken:
            continue
        match = _match_gelu(ix, k, refs, taken)
        if match is None:
            continue
        x, y_k, region, approximate = match
        taken.update(region)
        y = nodes[y_k].output[0]
        attrs = {"approximate": approximate} if approximate != "none" else {}
        replace[y_k] = onnx.helper.make_node("Gelu", [x], [y], name=nodes[y_k].name or y, **attrs)
    drop = taken - set(replace)
    out = [replace.get(k, n) for k, n in enumerate(nodes) if k not in drop]
    return out, len(replace)


def _match_gelu(
    ix: _Index, t_k: int, refs: dict[str, torch.Tensor], taken: set[int]
) -> tuple[str, int, list[int], str] | None:
    """(x, index of the node producing y, region node indices, approximate) or None."""
    chain: list[int] = []
    cur = ix.nodes[t_k].output[0]
    for _ in range(_MAX_CHAIN):
        c = ix.only_consumer(cur)
        if c is None or c in taken or not _elementwise(ix.nodes[c]):
            break
        chain.append(c)
        cur = ix.nodes[c].output[0]
        on_chain = {ix.nodes[t_k].output[0]} | {ix.nodes[j].output[0] for j in chain}
        for x in _x_candidates(ix, chain, on_chain):
            region = _region(ix, x, c, taken)
            if region is None or t_k not in region:
                continue
            approximate = _evaluate(ix, x, region, c, refs)
            if approximate is not None:
                return x, c, region, approximate
    return None


def _elementwise(n: onnx.NodeProto) -> bool:
    return n.op_type in _REGION_OPS and _is_default(n) and len(n.output) == 1


def _x_candidates(ix: _Index, chain: list[int], on_chain: set[str]) -> list[str]:
    """Values that may be GELU's input: the non-constant side operands of the chain after
    the Erf/Tanh, and the operands of a side Mul/Div (as in ``(x * 0.5) * (1 + erf)``)."""
    out: list[str] = []
    for j in chain:
        for v in ix.nodes[j].input:
            if not v or v in on_chain or ix.scalar(v) is not None:
                continue
            out.append(v)
            p = ix.node_of(v)
            if p is not None and p.op_type in ("Mul", "Div") and _is_default(p) and ix.only_consumer(v) == j:
                out.extend(u for u in p.input if u and ix.scalar(u) is None)
    return list(dict.fromkeys(out))


def _region(ix: _Index, x: str, y_k: int, taken: set[int]) -> list[int] | None:
    """The nodes between ``x`` and node ``y_k`` (sorted), if every operand on the way is
    x, a region value or a scalar constant, and no intermediate escapes the region."""
    region: set[int] = set()
    stack = [y_k]
    while stack:
        k = stack.pop()
        if k in region:
            continue
        n = ix.nodes[k]
        if k in taken or not _elementwise(n):
            return None
        region.add(k)
        if len(region) > _MAX_REGION:
            return None
        for v in n.input:
            if v == x or ix.scalar(v) is not None:
                continue
            p = ix.producer.get(v)
            if p is None:
                return None  # a graph input or non-scalar initializer other than x
            stack.append(p)
    for k in region:
        if k == y_k:
            continue
        o = ix.nodes[k].output[0]
        if o in ix.outputs or any(c not in region for c in ix.consumers.get(o, [])):
            return None
    return sorted(region)


def _evaluate(ix: _Index, x: str, region: Iterable[int], y_k: int, refs: dict[str, torch.Tensor]) -> str | None:
    """Run the region in float64 on the probe points; which GELU it is, if any."""
    env: dict[str, torch.Tensor] = {x: _PROBE}
    with torch.no_grad():
        for k in region:  # sorted node indices are a topological order
            n = ix.nodes[k]
            args = []
            for v in n.input:
                if v in env:
                    args.append(env[v])
                else:
                    s = ix.scalar(v)
                    if s is None:
                        return None
                    args.append(torch.tensor(s, dtype=torch.float64))
            if len(args) != (1 if n.op_type in ("Erf", "Tanh") else 2):
                return None
            env[n.output[0]] = _REGION_OPS[n.op_type](*args)
    y = env.get(ix.nodes[y_k].output[0])
    if y is None or y.shape != _PROBE.shape:
        return None
    for approximate, ref in refs.items():
        if bool(((y - ref).abs() <= _GELU_TOL * (1.0 + ref.abs())).all()):
            return approximate
    return None
