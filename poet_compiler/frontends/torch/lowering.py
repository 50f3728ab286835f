"""Lower the functional joint FX graph to a TrainingGraph of scheduling nodes.

Rules (see also TracedModel's docstring):

* Placeholders (parameters, buffers, inputs, target) and constants are not nodes.
* View/alias ops own no storage: they fold into the node whose buffer they alias.
* The *prelude*: FX nodes that depend only on placeholders and own no storage (e.g.
  ``t(weight)``), or produce at most one element (e.g. ``num_batches_tracked + 1``).
  The executor runs them once up front; they are not scheduled.
* Every other op is a scheduling node. A multi-output op (``native_batch_norm``,
  ``max_pool2d_with_indices``, ``native_layer_norm``, ...) is ONE node for the op whose
  buffer holds every output that another op reads (they are allocated together and
  stay together); outputs that only leave the graph (gradients, new running stats) or
  are unused are transient, counted as ``workspace_bytes``. When a secondary output is
  read by different ops than the primary one (batch-norm's saved mean/invstd, max-pool
  indices, read only by the backward), a zero-FLOP *select* node ``<op>.out<j>`` is
  placed right after the op: it re-references those outputs so the op's node (with its
  large primary output) can be freed while the small saved outputs live on. Its
  ``bytes_accessed`` is twice the selected bytes (read from the op's buffer, written
  to its own). Memory is
  then over-estimated by the selected outputs' bytes while both nodes are resident,
  never under-estimated.
* An optimizer update op (``poet.*``, docs/training.md) is one node of kind ``update``
  that writes its parameter and state in place: no output or workspace bytes; its
  ``after`` lists the nodes whose ops read the parameter (through views too).
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from poet_compiler.errors import FrontendError
from poet_compiler.frontends.torch import opinfo, rng
from poet_compiler.frontends.torch.tracing import MODULE, PHASE, JointTrace, is_update
from poet_compiler.graph.ir import Node, OpClass, TrainingGraph
from poet_compiler.graph.validate import validate


@dataclass
class Lowered:
    graph: TrainingGraph
    node_fx: tuple[tuple[str, ...], ...]
    prelude_fx: tuple[str, ...]
    fx_owner: dict[str, int] = field(default_factory=dict)


# An (op, output index) value: the buffer of one output of a multi-output op.
Value = tuple[torch.fx.Node, int]


@dataclass(frozen=True)
class _Item:
    """One scheduling node before it is a graph Node: an op (``selected`` None) or the
    select node of some of an op's outputs (``selected``, copied out of node ``source``)."""

    fx: torch.fx.Node
    op: str
    op_class: OpClass
    output_bytes: int
    workspace_bytes: int
    flops: int
    bytes_accessed: int
    signature: str
    selected: tuple[int, ...] | None = None
    source: int = -1


def _is_getitem(n: torch.fx.Node) -> bool:
    return n.op == "call_function" and n.target is operator.getitem


def lower(trace: JointTrace, name: str) -> Lowered:
    """The TrainingGraph of ``trace`` (module docstring): FX nodes classified, multi-output
    ops split into an op and its select nodes, FX nodes assigned to their owners, then the
    graph's nodes and its fixed bytes."""
    nodes = list(trace.gm.graph.nodes)
    roots = _Roots.of(nodes)
    items, value_node = _items(roots)
    node_fx, fx_owner = _owners(nodes, roots, items, value_node)
    graph_nodes = _graph_nodes(trace, nodes, roots, items, value_node, node_fx)
    graph = _graph(trace, nodes, name, graph_nodes)
    return Lowered(graph=validate(graph), node_fx=tuple(tuple(f) for f in node_fx),
                   prelude_fx=tuple(n.name for n in roots.prelude), fx_owner=fx_owner)


@dataclass
class _Roots:
    """The FX nodes classified: ``root[n]``, the FX value whose storage ``n`` aliases (an
    op node, ``(op, index)`` for a getitem of a multi-output op, or an external node);
    the prelude; the ops that become scheduling nodes."""

    root: dict[torch.fx.Node, Any]
    prelude: list[torch.fx.Node]
    ops: list[torch.fx.Node]

    @classmethod
    def of(cls, nodes: list[torch.fx.Node]) -> _Roots:
        external = {n for n in nodes if n.op in ("placeholder", "get_attr")}
        out = cls({}, [], [])
        root, prelude = out.root, out.prelude

        def free(a: torch.fx.Node) -> bool:
            return a in external or a in prelude

        for n in nodes:
            if n.op in ("placeholder", "get_attr"):
                root[n] = n
                continue
            if n.op != "call_function":
                continue
            if opinfo.is_mutation(n):
                raise FrontendError(
                    f"op {n.name} ({opinfo.packet_name(n.target)}) mutates a tensor after functionalization"
                )
            if _is_getitem(n):
                parent: Any = n.args[0]   # FX arguments are untyped: a getitem's is its op
                if parent in prelude or opinfo.is_view(parent):
                    root[n] = root[parent]
                    if parent in prelude:
                        prelude.append(n)
                else:
                    root[n] = (parent, int(n.args[1]))  # type: ignore[arg-type]
                continue
            if opinfo.is_view(n):
                base = next((a for a in n.all_input_nodes), None)
                root[n] = root[base] if base is not None else n
                if base is None or all(free(a) for a in n.all_input_nodes):
                    prelude.append(n)
                continue
            vals = opinfo.tensors_in(n.meta.get("val"))
            if all(free(a) for a in n.all_input_nodes) and n.all_input_nodes and sum(t.numel() for t in vals) <= 1:
                prelude.append(n)
                root[n] = n
                continue
            root[n] = n
            out.ops.append(n)
        return out

    def value_of(self, arg: torch.fx.Node) -> Value | None:
        """The (op, index) buffer an argument reads, or None for external/prelude."""
        r = self.root.get(arg)
        if r is None or (isinstance(r, torch.fx.Node) and r not in self.op_set):
            return None
        return r if isinstance(r, tuple) else (r, 0)

    @functools.cached_property
    def op_set(self) -> set[torch.fx.Node]:
        return set(self.ops)


def _items(roots: _Roots) -> tuple[list[_Item], dict[Value, int]]:
    """The scheduling nodes, each op followed by its select nodes, and the node that holds
    each (op, index) value."""
    # Readers of each (op, index) value: the ops that read it.
    readers: dict[Value, set[torch.fx.Node]] = {}
    for n in roots.ops:
        for a in n.all_input_nodes:
            v = roots.value_of(a)
            if v is not None:
                readers.setdefault(v, set()).add(n)
    items: list[_Item] = []
    value_node: dict[Value, int] = {}
    for n in roots.ops:
        _add_op(n, readers, items, value_node)
    return items, value_node


def _add_op(n: torch.fx.Node, readers: dict[Value, set[torch.fx.Node]], items: list[_Item],
            value_node: dict[Value, int]) -> None:
    """Op ``n``'s node (holding every output some op reads; the rest is workspace), then a
    select node per group of secondary outputs read by other ops than its primary one."""
    outs: Any = n.meta.get("val")
    out_list = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    tensor_idx = [i for i, t in enumerate(out_list) if isinstance(t, torch.Tensor)]
    consumed = [i for i in tensor_idx if readers.get((n, i))]
    primary = consumed[0] if consumed else (tensor_idx[0] if tensor_idx else 0)
    size = {i: opinfo.tensor_bytes(out_list[i]) for i in tensor_idx}
    groups: dict[frozenset[torch.fx.Node], list[int]] = {}
    for i in consumed:
        if i != primary and readers[(n, i)] != readers.get((n, primary)):
            groups.setdefault(frozenset(readers[(n, i)]), []).append(i)
    selected = {i for g in groups.values() for i in g}
    held = list(consumed) if consumed else [primary]
    own_id = len(items)
    for i in held:
        if i not in selected:
            value_node[(n, i)] = own_id
    in_bytes = sum(t.numel() * t.element_size() for a in n.all_input_nodes
                   for t in opinfo.tensors_in(a.meta.get("val")))
    items.append(_Item(n, opinfo.packet_name(n.target), opinfo.op_class(n.target),
                       output_bytes=sum(size.get(i, 0) for i in held),
                       workspace_bytes=sum(size[i] for i in tensor_idx if i not in held), flops=opinfo.flops(n),
                       bytes_accessed=in_bytes + sum(size.values()), signature=opinfo.signature(n)))
    for idxs in sorted(groups.values()):
        sid = len(items)
        for i in idxs:
            value_node[(n, i)] = sid
        sel_bytes = sum(size[i] for i in idxs)
        # Its traffic: the selected outputs read out of the op's buffer and written to
        # its own, not the whole source buffer (bytes_accessed 0 would make the cost
        # model charge inputs + output).
        items.append(_Item(n, "getitem", "data", output_bytes=sel_bytes, workspace_bytes=0, flops=0,
                           bytes_accessed=2 * sel_bytes, signature=f"getitem{tuple(idxs)}", selected=tuple(idxs),
                           source=own_id))


def _owners(nodes: list[torch.fx.Node], roots: _Roots, items: list[_Item],
            value_node: dict[Value, int]) -> tuple[list[list[str]], dict[str, int]]:
    """The FX nodes each scheduling node executes (its op, the getitems it keeps, the
    views on them), and the owner of each FX node."""
    fx_owner: dict[str, int] = {}
    node_fx: list[list[str]] = [[] for _ in items]
    for sid, item in enumerate(items):
        if item.selected is None:
            node_fx[sid].append(item.fx.name)
            fx_owner[item.fx.name] = sid
    prelude_set = set(roots.prelude)
    for n in nodes:
        if n.op != "call_function" or n in roots.op_set or n in prelude_set:
            continue
        r = roots.root.get(n)
        v = r if isinstance(r, tuple) else ((r, 0) if r in roots.op_set else None)
        if v is None:
            continue
        owner = value_node.get(v)
        if owner is None:  # a transient output (gradient, running stat): read at the op's compute
            owner = value_node.get((v[0], _first_held(v[0], value_node)), None)
        if owner is None:
            raise FrontendError(f"internal: FX node {n.name} reads an output of {v[0].name} that no node holds")
        node_fx[owner].append(n.name)
        fx_owner[n.name] = owner
    return node_fx, fx_owner


def _param_readers(trace: JointTrace, placeholders: list[torch.fx.Node], roots: _Roots,
                   items: list[_Item]) -> dict[torch.fx.Node, set[int]]:
    """The nodes whose ops read each parameter (through views too), updates aside."""
    params = placeholders[:len(trace.param_names)]
    sid_of = {item.fx: sid for sid, item in enumerate(items) if item.selected is None}
    readers: dict[torch.fx.Node, set[int]] = {}
    for n in roots.ops:
        if is_update(n):
            continue
        for a in n.all_input_nodes:
            r = roots.root.get(a)
            if isinstance(r, torch.fx.Node) and r in params:
                readers.setdefault(r, set()).add(sid_of[n])
    return readers


def _graph_nodes(trace: JointTrace, nodes: list[torch.fx.Node], roots: _Roots, items: list[_Item],
                 value_node: dict[Value, int], node_fx: list[list[str]]) -> list[Node]:
    """The graph's nodes: names from the module path, inputs from the values read; an
    optimizer update (in place on its parameter and state: no arena bytes,
    docs/training.md) after every node that reads its parameter."""
    placeholders = [n for n in nodes if n.op == "placeholder"]
    param_readers = _param_readers(trace, placeholders, roots, items)
    sid_of = {item.fx: sid for sid, item in enumerate(items) if item.selected is None}
    by_name = {n.name: n for n in nodes}
    out: list[Node] = []
    for sid, item in enumerate(items):
        fx = item.fx
        custom = fx.meta.get("custom") or {}
        kind = custom.get(PHASE, "forward")
        prov = custom.get(MODULE, "")
        if item.selected is None:
            deps = {value_node[v] for a in fx.all_input_nodes if (v := roots.value_of(a)) is not None}
            nm = f"{prov}/{fx.name}" if prov else fx.name
        else:
            deps = {item.source}
            nm = (f"{prov}/" if prov else "") + f"{fx.name}.out{'_'.join(map(str, item.selected))}"
        bytes_accessed = item.bytes_accessed
        stash = rng.stash_of(fx) if item.selected is None else None
        if stash is not None:
            # A random op reads its stash: recomputing it needs the state in RAM. Restoring
            # the state around a recomputation copies it in and back out.
            deps.add(sid_of[by_name[stash]])
            bytes_accessed += 2 * graph_bytes(by_name[stash])
        deps.discard(sid)
        after: tuple[int, ...] = ()
        output_bytes, workspace_bytes = item.output_bytes, item.workspace_bytes
        if item.selected is None and is_update(fx):
            kind, output_bytes, workspace_bytes = "update", 0, 0
            param = fx.args[0]
            assert isinstance(param, torch.fx.Node)
            after = tuple(sorted(param_readers.get(param, set())))
            nm = f"update.{trace.param_names[placeholders.index(param)]}"
        out.append(Node(
            id=sid, name=nm, kind=kind, op=item.op, op_class=item.op_class, inputs=tuple(sorted(deps)),
            output_bytes=int(output_bytes), workspace_bytes=int(workspace_bytes), flops=int(item.flops),
            bytes_accessed=int(bytes_accessed), after=after, pinned=item.selected is None and rng.is_stash(fx),
            extra={"provenance": prov, "signature": item.signature, "fx": list(node_fx[sid])},
        ))
    return out


def _graph(trace: JointTrace, nodes: list[torch.fx.Node], name: str, graph_nodes: list[Node]) -> TrainingGraph:
    """The graph with its fixed bytes: parameters and buffers, gradients, optimizer state,
    the batch, and the outputs held beside the arena."""
    placeholders = [n for n in nodes if n.op == "placeholder"]
    output = next(n for n in nodes if n.op == "output")
    P, B = len(trace.param_names), len(trace.buffer_names)
    ph_bytes = [sum(opinfo.tensor_bytes(t) for t in opinfo.tensors_in(p.meta.get("val"))) for p in placeholders]
    S = len(trace.state_names)
    updates = any(n.kind == "update" for n in graph_nodes)
    # Outputs held beside the arena: the loss and new buffer values (a parameter or optimizer
    # state updated in place is its own placeholder's storage; gradients are grad_bytes).
    in_place = set(trace.param_names) | set(trace.state_names)
    outs: list[Any] = list(output.args[0])  # type: ignore[arg-type]
    G = len(trace.grad_names)
    kept = [outs[0]] + [o for o, nm in zip(outs[1 + G:], trace.update_names) if nm not in in_place]
    step_output_bytes = sum(opinfo.tensor_bytes(t) for o in kept if isinstance(o, torch.fx.Node)
                            for t in opinfo.tensors_in(o.meta.get("val")))
    return TrainingGraph(
        name=name, nodes=tuple(graph_nodes),
        param_bytes=sum(ph_bytes[:P + B - S]),
        # With updates the gradients are scheduled nodes (in the arena), freed by their update.
        grad_bytes=0 if updates else sum(ph_bytes[:P]),
        optimizer_state_bytes=sum(ph_bytes[P + B - S:P + B]),
        input_bytes=sum(ph_bytes[P + B:]),
        step_output_bytes=step_output_bytes,
    )


def graph_bytes(n: torch.fx.Node) -> int:
    """Bytes of the tensors FX node ``n`` produces, from its metadata."""
    return sum(opinfo.tensor_bytes(t) for t in opinfo.tensors_in(n.meta.get("val")))


def _first_held(op: torch.fx.Node, value_node: dict[Value, int]) -> int:
    return min((i for (o, i) in value_node if o is op), default=0)
