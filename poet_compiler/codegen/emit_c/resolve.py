"""Resolve every FX value of a TracedModel to a device :class:`~.layout.Ref`.

See :mod:`poet_compiler.codegen.emit_c.layout` for the layout rules. The result also
says which static arrays the program needs (parameters, buffers, batch, outputs,
prelude values, scratch) and which graph outputs a node must copy out after it ran.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.fx

from poet_compiler.codegen.emit_c.errors import EmitError
from poet_compiler.codegen.emit_c.layout import (
    Ref,
    contiguous_strides,
    fx_val,
    held_elements,
    is_alias,
    out_elements,
    tensor_nbytes,
)
from poet_compiler.frontends.torch.rng import draws

if TYPE_CHECKING:
    from poet_compiler.frontends.torch.traced import TracedModel
    from poet_compiler.graph.ir import Node as GraphNode


@dataclass(frozen=True)
class StaticArray:
    """A C array outside the arena: parameters, buffers, batch, outputs, prelude values."""

    symbol: str
    ctype: str
    shape: tuple[int, ...]
    role: str          # param | buffer | state | input | target | output | prelude | scratch
    name: str          # parameter/buffer/output name, or the FX name
    fx: str = ""       # the placeholder/FX node it stands for

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass
class Resolved:
    refs: dict[str, Ref]
    element_refs: dict[tuple[str, int], Ref]
    arrays: list[StaticArray]
    # The graph's outputs in order: an ``out_<k>`` array, or for a value an update writes
    # in place (docs/training.md) the parameter's or state's own array.
    outputs: list[StaticArray] = field(default_factory=list)
    output_copies: dict[int, list[tuple[Ref, StaticArray]]] = field(default_factory=dict)  # node (-1: prelude)
    select_copies: dict[int, list[tuple[Ref, Ref]]] = field(default_factory=dict)          # select node -> copies


def _ctype(dtype: torch.dtype, role: str) -> str:
    if dtype == torch.float32:
        return "float"
    if dtype == torch.int64 and role == "target":
        return "int32_t"  # class indices: int32 on the device, converted when the batch is written
    if dtype == torch.int64:
        return "int64_t"
    raise EmitError(f"{role} of dtype {dtype} is not supported by the float32 reference kernels")


_DTYPE = {"float": torch.float32, "int32_t": torch.int32, "int64_t": torch.int64}


def _static_ref(arr: StaticArray) -> Ref:
    return Ref(arr.symbol, 0, 0, arr.shape, contiguous_strides(arr.shape), _DTYPE[arr.ctype])


def _updated_args(op: torch.fx.Node) -> list[torch.fx.Node]:
    """The placeholders an update op overwrites, in the order of its outputs: the
    parameter (argument 0), then its state (arguments 2, 3, ...)."""
    n_out = len(out_elements(op))
    args = [op.args[0], *op.args[2:1 + n_out]]
    if not all(isinstance(a, torch.fx.Node) and a.op == "placeholder" for a in args):
        raise EmitError(f"update {op.name}: its parameter and state must be placeholders")
    return args  # type: ignore[return-value]


def _in_place_outputs(tm: TracedModel, by_name: dict[str, torch.fx.Node],
                      arrays: dict[str, StaticArray]) -> dict[str, StaticArray]:
    """Graph outputs that an update wrote in place, by FX name: the array it wrote."""
    out: dict[str, StaticArray] = {}
    for node in tm.graph.nodes:
        if node.kind != "update":
            continue
        for name in tm.node_fx[node.id]:
            n = by_name[name]
            op = n.args[0] if n.target is operator.getitem else n
            if not isinstance(op, torch.fx.Node) or op.op != "call_function":
                continue
            e = int(n.args[1]) if n.target is operator.getitem else 0  # type: ignore[arg-type]
            out[name] = arrays[_updated_args(op)[e].name]
    return out


def resolve(tm: TracedModel) -> Resolved:
    """Where every FX value of ``tm`` lives, the static arrays the program needs and the
    copies its nodes make (module docstring). The arrays are listed in the order the C
    source declares them: placeholders, graph outputs, scratch, prelude values."""
    r = _Resolver(tm)
    r.placeholders()
    r.graph_outputs()
    for node in tm.graph.nodes:
        if node.op == "getitem":
            r.select_buffer(node)
        else:
            r.op_buffer(node)
    r.other_values()
    r.select_copies()
    r.output_copies()
    return r.res


class _Resolver:
    """The state :func:`resolve` builds up, one step per method."""

    def __init__(self, tm: TracedModel) -> None:
        self.tm = tm
        self.fx_nodes = list(tm.gm.graph.nodes)
        self.by_name = {n.name: n for n in self.fx_nodes}
        self.prelude = set(tm.prelude_fx)
        self.res = Resolved({}, {}, [])
        self.by_placeholder: dict[str, StaticArray] = {}
        self.out_names: list[str] = []
        self.first_out: dict[str, StaticArray] = {}
        self.ops = {n for n in self.fx_nodes if n.op == "call_function" and not is_alias(n)
                    and n.name not in self.prelude}

    def _add(self, arr: StaticArray) -> StaticArray:
        self.res.arrays.append(arr)
        return arr

    def placeholders(self) -> None:
        """Parameters, buffers (optimizer state at their tail), inputs, target: in that order."""
        tm, refs = self.tm, self.res.refs
        placeholders = [n for n in self.fx_nodes if n.op == "placeholder"]
        P, B, I = len(tm.param_names), len(tm.buffer_names), tm.n_inputs  # noqa: E741 - the P+B+I placeholder layout
        S = len(tm.state_names)  # optimizer state: the tail of the buffers
        for k, ph in enumerate(placeholders):
            val = fx_val(ph)
            if not isinstance(val, torch.Tensor):
                raise EmitError(f"placeholder {ph.name} is not a tensor")
            if k < P:
                role, name, sym = "param", tm.param_names[k], f"p_{k}"
            elif k < P + B - S:
                role, name, sym = "buffer", tm.buffer_names[k - P], f"b_{k - P}"
            elif k < P + B:
                role, name, sym = "state", tm.buffer_names[k - P], f"s_{k - (P + B - S)}"
            elif k < P + B + I:
                role, name, sym = "input", f"input{k - P - B}", f"in_{k - P - B}"
            else:
                role, name, sym = "target", "target", "target"
            arr = self._add(StaticArray(sym, _ctype(val.dtype, role), tuple(val.shape), role, name, ph.name))
            self.by_placeholder[ph.name] = arr
            refs[ph.name] = _static_ref(arr).view(val) if role != "target" else _static_ref(arr)
        for n in self.fx_nodes:
            if n.op == "get_attr":
                raise EmitError(f"constant tensor {n.target!r} in the graph: not supported by emit-c")
            if draws(n):
                raise EmitError(f"random op {n.target} (node {tm.fx_owner.get(n.name)}, {n.name}) draws random "
                                "numbers: the C runtime has no generator to draw or replay them (use a model "
                                "without dropout)")

    def graph_outputs(self) -> None:
        """Loss, gradients, buffer updates: each a static array ``out_<k>``, or the array
        an update wrote in place."""
        tm = self.tm
        out_node = next(n for n in self.fx_nodes if n.op == "output")
        for k, a in enumerate(out_node.args[0]):
            if not isinstance(a, torch.fx.Node):
                raise EmitError(f"graph output {k} is not a tensor")
            self.out_names.append(a.name)
        labels = ["loss", *tm.grad_names, *tm.update_names]
        in_place = _in_place_outputs(tm, self.by_name, self.by_placeholder)
        for k, out_name in enumerate(self.out_names):
            if out_name in in_place:
                self.res.outputs.append(in_place[out_name])
                continue
            val = fx_val(self.by_name[out_name])
            self.res.outputs.append(self._add(StaticArray(f"out_{k}", _ctype(val.dtype, "output"), tuple(val.shape),
                                                          "output", labels[k], out_name)))
        for k, out_name in enumerate(self.out_names):
            self.first_out.setdefault(out_name, self.res.outputs[k])

    def select_buffer(self, node: GraphNode) -> None:
        """A select node's buffer: copies of some outputs of its source op, packed."""
        picks = [self.by_name[f] for f in self.tm.node_fx[node.id] if self.by_name[f].target is operator.getitem]
        src = picks[0].args[0]
        off = 0
        for e in sorted({int(g.args[1]) for g in picks}):
            t = out_elements(src)[e]
            assert t is not None, f"select node {node.id} picks a non-tensor output"
            self.res.element_refs[(f"sel{node.id}", e)] = Ref(f"arena:{node.id}", off, 0, tuple(t.shape),
                                                              contiguous_strides(tuple(t.shape)), t.dtype)
            off += tensor_nbytes(t)
        if off != node.output_bytes:
            raise EmitError(f"node {node.id} ({node.name}): select layout of {off} B but the graph says "
                            f"{node.output_bytes} B")

    def op_buffer(self, node: GraphNode) -> None:
        """An op node's outputs: the ones it holds packed in its arena buffer, the others
        straight into the output array they are, else a static scratch array; an update's
        the arrays of the placeholders it overwrites."""
        element_refs = self.res.element_refs
        op = self.by_name[self.tm.node_fx[node.id][0]]
        if op not in self.ops:
            raise EmitError(f"node {node.id} ({node.name}): its first FX node {op.name} is not an op")
        if node.kind == "update":
            for e, arg in enumerate(_updated_args(op)):
                element_refs[(op.name, e)] = self.res.refs[arg.name]
            return
        elems = out_elements(op)
        off = 0
        for e in held_elements(op, self.ops):
            t = elems[e]
            assert t is not None, f"node {node.id} holds a non-tensor output"
            element_refs[(op.name, e)] = Ref(f"arena:{node.id}", off, 0, tuple(t.shape),
                                             contiguous_strides(tuple(t.shape)), t.dtype)
            off += tensor_nbytes(t)
        if off != node.output_bytes:
            raise EmitError(f"node {node.id} ({node.name}): layout of {off} B but the graph says "
                            f"{node.output_bytes} B")
        for e, t in enumerate(elems):
            if t is None or (op.name, e) in element_refs:
                continue
            getter = next((u for u in op.users if u.target is operator.getitem and int(u.args[1]) == e), None)
            direct = op if len(elems) == 1 else getter
            dest = self.first_out.get(direct.name) if direct is not None else None
            if dest is None or dest.shape != tuple(t.shape):
                dest = self._add(StaticArray(f"scratch_{op.name}_{e}", _ctype(t.dtype, "scratch"), tuple(t.shape),
                                             "scratch", f"{op.name}[{e}]"))
            element_refs[(op.name, e)] = _static_ref(dest)

    def other_values(self) -> None:
        """Every other FX value, in graph order: prelude values (a static array each),
        getitems of a multi-output op, views, single outputs."""
        refs, element_refs = self.res.refs, self.res.element_refs
        for n in self.fx_nodes:
            if n.op != "call_function":
                continue
            val = fx_val(n)
            if n.name in self.prelude and not is_alias(n):
                if not isinstance(val, torch.Tensor):
                    raise EmitError(f"prelude op {n.name} does not produce a tensor")
                pre = self.first_out.get(n.name)
                if pre is None:
                    pre = self._add(StaticArray(f"pre_{n.name}", _ctype(val.dtype, "prelude"), tuple(val.shape),
                                                "prelude", n.name))
                refs[n.name] = _static_ref(pre)
            elif n.target is operator.getitem and not is_alias(n.args[0]) \
                    and isinstance(fx_val(n.args[0]), (list, tuple)):
                src, e = n.args[0], int(n.args[1])
                owner = self.tm.fx_owner.get(n.name, -1)
                if owner >= 0 and self.tm.graph.nodes[owner].op == "getitem":
                    refs[n.name] = element_refs[(f"sel{owner}", e)]
                else:
                    refs[n.name] = element_refs[(src.name, e)]
            elif is_alias(n):
                base = n.args[0]
                if not isinstance(base, torch.fx.Node) or base.name not in refs:
                    raise EmitError(f"view {n.name} of an unknown value")
                if not isinstance(val, torch.Tensor):
                    raise EmitError(f"view {n.name} does not produce a tensor")
                refs[n.name] = refs[base.name].view(val)
            elif (n.name, 0) in element_refs and not isinstance(val, (list, tuple)):
                refs[n.name] = element_refs[(n.name, 0)]

    def select_copies(self) -> None:
        """Select nodes copy their picks out of the source node's buffer."""
        element_refs = self.res.element_refs
        for node in self.tm.graph.nodes:
            if node.op != "getitem":
                continue
            picks = [self.by_name[f] for f in self.tm.node_fx[node.id] if self.by_name[f].target is operator.getitem]
            src = picks[0].args[0]
            idxs = sorted({int(g.args[1]) for g in picks})
            self.res.select_copies[node.id] = [(element_refs[(src.name, e)], element_refs[(f"sel{node.id}", e)])
                                               for e in idxs]

    def output_copies(self) -> None:
        """Outputs not already written in place are copied by the node that computes them."""
        for k, name in enumerate(self.out_names):
            ref = self.res.refs.get(name)
            if ref is None:
                raise EmitError(f"graph output {name} has no storage")
            out = self.res.outputs[k]
            if ref.base == out.symbol:
                continue
            owner = self.tm.fx_owner.get(name, -1)
            self.res.output_copies.setdefault(owner, []).append((ref, out))
