"""The rules of a TrainingGraph (see docs/graph-format.md), checked in one place.

Every message names the node and the rule it breaks, so a user can fix a file by hand.
"""

from __future__ import annotations

import math

import networkx as nx

from poet_compiler.errors import GraphError
from poet_compiler.graph.ir import COST_FIELDS, KINDS, OP_CLASSES, TrainingGraph


def validate(graph: TrainingGraph) -> TrainingGraph:
    """Raise :class:`GraphError` on the first broken rule; return the graph otherwise."""
    if graph.n == 0:
        raise GraphError("graph has no nodes")
    _check_cycles(graph)
    seen: dict[str, int] = {}
    for pos, node in enumerate(graph.nodes):
        where = f"node {node.id} ({node.name!r})"
        if node.id != pos:
            raise GraphError(f"{where}: ids must be 0..n-1 in list order, found id {node.id} at position {pos}")
        if node.name in seen:
            raise GraphError(f"{where}: duplicate name, also used by node {seen[node.name]}")
        seen[node.name] = node.id
        if node.kind not in KINDS:
            raise GraphError(f"{where}: kind {node.kind!r} is not one of {', '.join(KINDS)}")
        if node.op_class not in OP_CLASSES:
            raise GraphError(f"{where}: op_class {node.op_class!r} is not one of {', '.join(OP_CLASSES)}")
        for i in node.inputs:
            if not 0 <= i < graph.n:
                raise GraphError(f"{where}: input {i} is dangling (no node has that id)")
            if i >= node.id:
                raise GraphError(
                    f"{where}: input {i} is not earlier in the list; nodes must be in topological order"
                )
        _check_update(graph, node.id, where)
        # An input may be listed more than once (x * x, POET's gradient layers): it is
        # one dependency and one resident buffer; everything downstream reads set(inputs).
        for attr in ("output_bytes", "workspace_bytes", "flops", "bytes_accessed"):
            if getattr(node, attr) < 0:
                raise GraphError(f"{where}: {attr} must be >= 0")
        if node.cost is not None:
            for f in COST_FIELDS:
                v = getattr(node.cost, f)
                if v is not None and (v < 0 or not math.isfinite(v)):
                    raise GraphError(f"{where}: cost.{f} must be a finite number >= 0")
    for attr in ("param_bytes", "grad_bytes", "optimizer_state_bytes", "input_bytes", "step_output_bytes"):
        if getattr(graph, attr) < 0:
            raise GraphError(f"graph {graph.name!r}: {attr} must be >= 0")
    return graph


def _check_update(graph: TrainingGraph, i: int, where: str) -> None:
    """The update-node rules of docs/training.md."""
    node = graph.nodes[i]
    if node.kind != "update":
        if node.after:
            raise GraphError(f"{where}: only update nodes have \"after\"")
        for j in node.inputs:
            if graph.nodes[j].kind == "update":
                raise GraphError(f"{where}: reads update node {j}, which writes in place and has no output")
        return
    if node.output_bytes or node.workspace_bytes:
        raise GraphError(f"{where}: an update writes its parameter in place: output_bytes and workspace_bytes "
                         "must be 0")
    if node.pinned:
        raise GraphError(f"{where}: an update node cannot be pinned (it is computed once, never kept)")
    for j in node.after:
        if not 0 <= j < node.id:
            raise GraphError(f"{where}: after {j} is not an earlier node")
        if graph.nodes[j].kind == "update":
            raise GraphError(f"{where}: after {j} is an update node")


def _check_cycles(graph: TrainingGraph) -> None:
    """Report a real cycle by names (a clearer message than 'not in topological order')."""
    g = nx.DiGraph()
    ids = {n.id for n in graph.nodes}
    names = {n.id: n.name for n in graph.nodes}
    g.add_nodes_from(ids)
    g.add_edges_from((i, n.id) for n in graph.nodes for i in n.inputs if i in ids)
    try:
        cycle = nx.find_cycle(g)
    except nx.NetworkXNoCycle:
        return
    path = " -> ".join(names[u] for u, _ in cycle) + f" -> {names[cycle[0][0]]}"
    raise GraphError(f"graph is not a DAG: cycle {path}")
