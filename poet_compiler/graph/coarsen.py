"""Coarsening: group op-level nodes per leaf module to keep the solver's graph small.

A group is a maximal run of *consecutive* nodes (in the graph's topological order) with
the same kind and the same provenance (leaf module path). Contracting consecutive runs
of a topological order always leaves a DAG, and forward and backward ops of one module
land in different groups because their kinds differ.

Memory semantics of a group node (exact or conservative, never optimistic):
* ``output_bytes`` = bytes of the members read by a node outside the group, or that are
  sinks (the step's results): exactly what survives the group's computation.
* ``workspace_bytes`` = the group's internal peak minus ``output_bytes``, where the
  internal peak replays the members in order with free-after-last-use inside the group
  (members that leave the group never freed). Members computed later in the group are
  counted in ``output_bytes`` from the group's start, so the estimate errs high.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from poet_compiler.graph.ir import Node, TrainingGraph
from poet_compiler.graph.validate import validate


def module_groups(graph: TrainingGraph) -> list[list[int]]:
    """Runs of consecutive node ids sharing (kind, provenance)."""
    groups: list[list[int]] = []
    key_prev: tuple[str, str] | None = None
    for n in graph.nodes:
        key = (n.kind, n.provenance)
        if groups and key == key_prev and n.provenance:
            groups[-1].append(n.id)
        else:
            groups.append([n.id])
        key_prev = key
    return groups


def coarsen(graph: TrainingGraph, groups: list[list[int]]) -> TrainingGraph:
    """Contract each group (consecutive ids, covering every node once) into one node."""
    flat = [i for g in groups for i in g]
    if flat != list(range(graph.n)):
        raise ValueError("groups must be consecutive runs covering every node exactly once, in order")
    gid = {i: k for k, g in enumerate(groups) for i in g}
    consumers = graph.consumers
    nodes: list[Node] = []
    for k, members in enumerate(groups):
        mset = set(members)
        exported = [i for i in members if not consumers[i] or any(c not in mset for c in consumers[i])]
        out_bytes = sum(graph.nodes[i].output_bytes for i in exported)
        peak = 0
        alive: dict[int, int] = {}
        for pos, i in enumerate(members):
            node = graph.nodes[i]
            alive[i] = node.output_bytes
            peak = max(peak, sum(alive.values()) + node.workspace_bytes)
            for j in list(alive):
                if j in exported:
                    continue
                later = [c for c in consumers[j] if c in mset and members.index(c) > pos]
                if not later:
                    del alive[j]
        peak = max(peak, out_bytes)
        inputs = sorted({gid[j] for i in members for j in graph.nodes[i].inputs if gid[j] != k})
        first = graph.nodes[members[0]]
        ops = [graph.nodes[i].op for i in members]
        extra: dict[str, Any] = {"provenance": first.provenance, "members": [graph.nodes[i].name for i in members],
                                 "ops": ops}
        name = first.name if len(members) == 1 else f"{first.provenance or first.name}#{first.kind}{k}"
        classes = [graph.nodes[i].op_class for i in members]
        dominant = max(classes, key=lambda c: sum(graph.nodes[i].flops for i in members if graph.nodes[i].op_class == c))
        nodes.append(Node(
            id=k, name=name, kind=first.kind, op="+".join(dict.fromkeys(ops)) if len(members) > 1 else first.op,
            op_class=dominant, inputs=tuple(inputs), output_bytes=out_bytes, workspace_bytes=peak - out_bytes,
            flops=sum(graph.nodes[i].flops for i in members),
            bytes_accessed=sum(graph.nodes[i].bytes_accessed for i in members),
            pinned=any(graph.nodes[i].pinned for i in members),
            extra=extra if len(members) > 1 else dict(first.extra),
        ))
    return validate(replace(graph, nodes=tuple(nodes)))


def coarsen_by_module(graph: TrainingGraph) -> tuple[TrainingGraph, list[list[int]]]:
    groups = module_groups(graph)
    return coarsen(graph, groups), groups


def coarsen_traced(tm: Any) -> Any:
    """Module-level version of a TracedModel: the group's FX lists are concatenated in
    member order, so the executor runs a group exactly as its members in sequence."""
    graph, groups = coarsen_by_module(tm.graph)
    node_fx = tuple(tuple(f for i in g for f in tm.node_fx[i]) for g in groups)
    owner = {f: k for k, fx in enumerate(node_fx) for f in fx}
    return replace(tm, graph=graph, node_fx=node_fx, fx_owner=owner, granularity="module")
