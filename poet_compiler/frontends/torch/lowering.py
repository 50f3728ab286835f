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

import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from poet_compiler.errors import FrontendError
from poet_compiler.frontends.torch import opinfo, rng
from poet_compiler.frontends.torch.tracing import MODULE, PHASE, JointTrace, is_update
from poet_compiler.graph.ir import Node, TrainingGraph
from poet_compiler.graph.validate import validate


@dataclass
class Lowered:
    graph: TrainingGraph
    node_fx: tuple[tuple[str, ...], ...]
    prelude_fx: tuple[str, ...]
    fx_owner: dict[str, int] = field(default_factory=dict)


def _is_getitem(n: torch.fx.Node) -> bool:
    return n.op == "call_function" and n.target is operator.getitem


def lower(trace: JointTrace, name: str) -> Lowered:
    gm = trace.gm
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    output = next(n for n in nodes if n.op == "output")
    external = {n for n in nodes if n.op in ("placeholder", "get_attr")}

    # root[n]: the FX value whose storage n aliases: an op node, (op, index) for a
    # getitem of a multi-output op, or an external node. 'prelude' marks free nodes.
    root: dict[torch.fx.Node, Any] = {}
    prelude: list[torch.fx.Node] = []
    ops: list[torch.fx.Node] = []
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
            parent = n.args[0]
            if parent in prelude or opinfo.is_view(parent):
                root[n] = root[parent]
                if parent in prelude:
                    prelude.append(n)
            else:
                root[n] = (parent, int(n.args[1]))
            continue
        if opinfo.is_view(n):
            base = next((a for a in n.all_input_nodes), None)
            root[n] = root[base] if base is not None else n
            if base is None or all(_free(a, root, external, prelude) for a in n.all_input_nodes):
                prelude.append(n)
            continue
        vals = opinfo.tensors_in(n.meta.get("val"))
        if all(_free(a, root, external, prelude) for a in n.all_input_nodes) and n.all_input_nodes \
                and sum(t.numel() for t in vals) <= 1:
            prelude.append(n)
            root[n] = n
            continue
        root[n] = n
        ops.append(n)

    op_set = set(ops)

    def value_of(arg: torch.fx.Node) -> Any:
        """The (op, index) buffer an argument reads, or None for external/prelude."""
        r = root.get(arg)
        if r is None or (isinstance(r, torch.fx.Node) and r not in op_set):
            return None
        return r if isinstance(r, tuple) else (r, 0)

    # Readers of each (op, index) value: op nodes, plus a flag for graph outputs.
    readers: dict[tuple[torch.fx.Node, int], set[torch.fx.Node]] = {}
    for n in ops:
        for a in n.all_input_nodes:
            v = value_of(a)
            if v is not None:
                readers.setdefault(v, set()).add(n)

    sched: list[dict[str, Any]] = []
    value_node: dict[tuple[torch.fx.Node, int], int] = {}
    for n in ops:
        outs: Any = n.meta.get("val")
        multi = isinstance(outs, (list, tuple))
        out_list = list(outs) if multi else [outs]
        tensor_idx = [i for i, t in enumerate(out_list) if isinstance(t, torch.Tensor)]
        consumed = [i for i in tensor_idx if readers.get((n, i))]
        primary = consumed[0] if consumed else (tensor_idx[0] if tensor_idx else 0)
        size = {i: opinfo.tensor_bytes(out_list[i]) for i in tensor_idx}
        groups: dict[frozenset[torch.fx.Node], list[int]] = {}
        for i in consumed:
            if i != primary and readers[(n, i)] != readers.get((n, primary)):
                groups.setdefault(frozenset(readers[(n, i)]), []).append(i)
        selected = {i for g in groups.values() for i in g}
        held = [i for i in consumed] if consumed else [primary]
        out_bytes = sum(size.get(i, 0) for i in held)
        workspace = sum(size[i] for i in tensor_idx if i not in held)
        own_id = len(sched)
        for i in held:
            if i not in selected:
                value_node[(n, i)] = own_id
        in_bytes = sum(t.numel() * t.element_size() for a in n.all_input_nodes
                       for t in opinfo.tensors_in(a.meta.get("val")))
        sched.append({"fx": n, "op": opinfo.packet_name(n.target), "class": opinfo.op_class(n.target),
                      "bytes": out_bytes, "ws": workspace, "flops": opinfo.flops(n),
                      "accessed": in_bytes + sum(size.values()), "sig": opinfo.signature(n), "sel": None})
        for idxs in sorted(groups.values()):
            sid = len(sched)
            for i in idxs:
                value_node[(n, i)] = sid
            sel_bytes = sum(size[i] for i in idxs)
            # Its traffic: the selected outputs read out of the op's buffer and written to
            # its own, not the whole source buffer (bytes_accessed 0 would make the cost
            # model charge inputs + output).
            sched.append({"fx": n, "op": "getitem", "class": "data", "bytes": sel_bytes,
                          "ws": 0, "flops": 0, "accessed": 2 * sel_bytes, "sig": f"getitem{tuple(idxs)}",
                          "sel": tuple(idxs), "src": own_id})

    # FX nodes each scheduling node executes: its op, the getitems it keeps, the views on them.
    fx_owner: dict[str, int] = {}
    node_fx: list[list[str]] = [[] for _ in sched]
    for sid, s in enumerate(sched):
        if s["sel"] is None:
            node_fx[sid].append(s["fx"].name)
            fx_owner[s["fx"].name] = sid
    prelude_set = set(prelude)
    for n in nodes:
        if n.op != "call_function" or n in op_set or n in prelude_set:
            continue
        r = root.get(n)
        v = r if isinstance(r, tuple) else ((r, 0) if r in op_set else None)
        if v is None:
            continue
        owner = value_node.get(v)
        if owner is None:  # a transient output (gradient, running stat): read at the op's compute
            owner = value_node.get((v[0], _first_held(v[0], value_node)), None)
        if owner is None:
            raise FrontendError(f"internal: FX node {n.name} reads an output of {v[0].name} that no node holds")
        node_fx[owner].append(n.name)
        fx_owner[n.name] = owner

    P, B = len(trace.param_names), len(trace.buffer_names)
    sid_of = {s["fx"]: sid for sid, s in enumerate(sched) if s["sel"] is None}
    by_name = {n.name: n for n in nodes}
    param_readers: dict[torch.fx.Node, set[int]] = {}
    for n in ops:
        if is_update(n):
            continue
        for a in n.all_input_nodes:
            r = root.get(a)
            if isinstance(r, torch.fx.Node) and r in placeholders[:P]:
                param_readers.setdefault(r, set()).add(sid_of[n])

    graph_nodes: list[Node] = []
    for sid, s in enumerate(sched):
        fx: torch.fx.Node = s["fx"]
        custom = fx.meta.get("custom") or {}
        kind = custom.get(PHASE, "forward")
        prov = custom.get(MODULE, "")
        if s["sel"] is None:
            deps = {value_node[v] for a in fx.all_input_nodes if (v := value_of(a)) is not None}
            nm = f"{prov}/{fx.name}" if prov else fx.name
        else:
            deps = {s["src"]}
            nm = (f"{prov}/" if prov else "") + f"{fx.name}.out{'_'.join(map(str, s['sel']))}"
        stash = rng.stash_of(fx) if s["sel"] is None else None
        if stash is not None:
            # A random op reads its stash: recomputing it needs the state in RAM. Restoring
            # the state around a recomputation copies it in and back out.
            deps.add(sid_of[by_name[stash]])
            s["accessed"] += 2 * graph_bytes(by_name[stash])
        deps.discard(sid)
        after: tuple[int, ...] = ()
        if s["sel"] is None and is_update(fx):
            # In place on the parameter and its state: no arena bytes (docs/training.md).
            kind, s["bytes"], s["ws"] = "update", 0, 0
            param = fx.args[0]
            assert isinstance(param, torch.fx.Node)
            after = tuple(sorted(param_readers.get(param, set())))
            nm = f"update.{trace.param_names[placeholders.index(param)]}"
        graph_nodes.append(Node(
            id=sid, name=nm, kind=kind, op=s["op"], op_class=s["class"], inputs=tuple(sorted(deps)),
            output_bytes=int(s["bytes"]), workspace_bytes=int(s["ws"]), flops=int(s["flops"]),
            bytes_accessed=int(s["accessed"]), after=after, pinned=s["sel"] is None and rng.is_stash(fx),
            extra={"provenance": prov, "signature": s["sig"], "fx": list(node_fx[sid])},
        ))
    ph_bytes = [sum(opinfo.tensor_bytes(t) for t in opinfo.tensors_in(p.meta.get("val"))) for p in placeholders]
    S = len(trace.state_names)
    updates = any(n.kind == "update" for n in graph_nodes)
    # Outputs held beside the arena: the loss and new buffer values (a parameter or optimizer
    # state updated in place is its own placeholder's storage; gradients are grad_bytes).
    in_place = set(trace.param_names) | set(trace.state_names)
    outs = list(output.args[0])
    G = len(trace.grad_names)
    kept = [outs[0]] + [o for o, nm in zip(outs[1 + G:], trace.update_names) if nm not in in_place]
    step_output_bytes = sum(opinfo.tensor_bytes(t) for o in kept if isinstance(o, torch.fx.Node)
                            for t in opinfo.tensors_in(o.meta.get("val")))
    graph = TrainingGraph(
        name=name, nodes=tuple(graph_nodes),
        param_bytes=sum(ph_bytes[:P + B - S]),
        # With updates the gradients are scheduled nodes (in the arena), freed by their update.
        grad_bytes=0 if updates else sum(ph_bytes[:P]),
        optimizer_state_bytes=sum(ph_bytes[P + B - S:P + B]),
        input_bytes=sum(ph_bytes[P + B:]),
        step_output_bytes=step_output_bytes,
    )
    return Lowered(graph=validate(graph), node_fx=tuple(tuple(f) for f in node_fx),
                   prelude_fx=tuple(n.name for n in prelude), fx_owner=fx_owner)


def graph_bytes(n: torch.fx.Node) -> int:
    """Bytes of the tensors FX node ``n`` produces, from its metadata."""
    return sum(opinfo.tensor_bytes(t) for t in opinfo.tensors_in(n.meta.get("val")))


def _free(a: torch.fx.Node, root: dict[torch.fx.Node, Any], external: set[torch.fx.Node],
          prelude: list[torch.fx.Node]) -> bool:
    return a in external or a in prelude


def _first_held(op: torch.fx.Node, value_node: dict[tuple[torch.fx.Node, int], int]) -> int:
    return min((i for (o, i) in value_node if o is op), default=0)
