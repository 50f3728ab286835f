"""The TrainingGraph IR: one training step as a DAG of schedulable nodes.

A :class:`Node` is the unit of scheduling (one op, or a fused group of ops) and
materializes exactly one output buffer of ``output_bytes``. Nodes are kept in a fixed
topological order: ``graph.nodes[i].id == i`` and every input id is smaller than the
node's own id. Stage ``t`` of a schedule is the stage in which node ``t`` is computed
for the first time, so this order is also the order of the schedule's stages.

The IR is plain frozen data; reading/writing the poet-graph/1 JSON format lives in
:mod:`poet_compiler.graph.io`, rule checking in :mod:`poet_compiler.graph.validate`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, get_args

import networkx as nx

Kind = Literal["forward", "loss", "backward", "update"]
OpClass = Literal["conv", "matmul", "elementwise", "norm", "reduction", "data", "other"]
KINDS: tuple[str, ...] = get_args(Kind)
OP_CLASSES: tuple[str, ...] = get_args(OpClass)
COST_FIELDS = ("compute_s", "compute_j", "page_in_s", "page_in_j", "page_out_s", "page_out_j")
#: The op of a node that stashes a generator's state for a random op (its one reader): a
#: pinned node, so a schedule may recompute the random op only while the stash is in RAM
#: (frontends/torch/rng.py). Coarsening never groups it with other nodes.
RNG_STATE_OP = "poet.rng_state"


@dataclass(frozen=True)
class NodeCost:
    """Explicit per-node costs from a graph file; they override any cost model.

    Each field may be missing (None); the device's cost model fills the gaps.
    """

    compute_s: float | None = None
    compute_j: float | None = None
    page_in_s: float | None = None
    page_in_j: float | None = None
    page_out_s: float | None = None
    page_out_j: float | None = None

    @property
    def complete(self) -> bool:
        return all(getattr(self, f) is not None for f in COST_FIELDS)

    def as_dict(self) -> dict[str, float]:
        return {f: getattr(self, f) for f in COST_FIELDS if getattr(self, f) is not None}


@dataclass(frozen=True)
class Node:
    """One schedulable operation and the buffer it produces."""

    id: int
    name: str
    kind: Kind
    op: str
    op_class: OpClass
    inputs: tuple[int, ...]
    output_bytes: int
    workspace_bytes: int = 0
    flops: int = 0
    bytes_accessed: int = 0
    pinned: bool = False
    cost: NodeCost | None = None
    # Update nodes only (docs/training.md): the nodes that read the value this node
    # overwrites in place; every compute of them (recomputations too) comes before it.
    after: tuple[int, ...] = ()
    # Where the node comes from (module path, ONNX node name, fused op list ...).
    # Serialized under the node's "extra" object, which the format reserves for this.
    extra: dict[str, Any] = field(default_factory=dict, compare=True, hash=False)

    @property
    def provenance(self) -> str:
        return str(self.extra.get("provenance", ""))


@dataclass(frozen=True, eq=True)
class TrainingGraph:
    """A training step: nodes in topological order plus graph-level memory figures."""

    name: str
    nodes: tuple[Node, ...]
    param_bytes: int = 0
    grad_bytes: int = 0
    optimizer_state_bytes: int = 0
    input_bytes: int = 0
    # The step's outputs held beside the arena, gradients aside: the loss and the buffers'
    # new values (BatchNorm running statistics). Parameters and optimizer state updated in
    # place are not counted again.
    step_output_bytes: int = 0
    extra: dict[str, Any] = field(default_factory=dict, hash=False)

    # ---- structure -------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def n(self) -> int:
        return len(self.nodes)

    @cached_property
    def consumers(self) -> tuple[tuple[int, ...], ...]:
        """``consumers[i]``: ids of the nodes that read node ``i``'s output, ascending."""
        users: list[list[int]] = [[] for _ in self.nodes]
        for node in self.nodes:
            for i in node.inputs:
                users[i].append(node.id)
        return tuple(tuple(sorted(set(u))) for u in users)

    @cached_property
    def edges(self) -> tuple[tuple[int, int], ...]:
        """All (producer, consumer) pairs, sorted."""
        return tuple(sorted({(i, n.id) for n in self.nodes for i in n.inputs}))

    @cached_property
    def sinks(self) -> tuple[int, ...]:
        """Nodes whose output nobody reads: the step's results (loss, gradients)."""
        return tuple(i for i, users in enumerate(self.consumers) if not users)

    @property
    def has_updates(self) -> bool:
        """The step applies its optimizer update (docs/training.md)."""
        return any(n.kind == "update" for n in self.nodes)

    @cached_property
    def last_compute_stage(self) -> tuple[int, ...]:
        """``last_compute_stage[i]``: the last stage in which node ``i`` may be computed.

        An update node runs once, in its own stage; a node that reads the old value of a
        parameter (in an update's ``after``) may not be recomputed after that update's
        stage (within the stage it runs first: computes go in id order). Others: the last.
        """
        last = [self.n - 1] * self.n
        for node in self.nodes:
            if node.kind == "update":
                last[node.id] = node.id
                for r in node.after:
                    last[r] = min(last[r], node.id)
        return tuple(last)

    def to_networkx(self) -> nx.DiGraph:
        g = nx.DiGraph()
        for node in self.nodes:
            g.add_node(node.id, name=node.name, output_bytes=node.output_bytes)
        g.add_edges_from(self.edges)
        return g

    # ---- memory figures --------------------------------------------------------
    @property
    def activation_bytes(self) -> int:
        return sum(n.output_bytes for n in self.nodes)

    @property
    def fixed_bytes(self) -> int:
        """Bytes the step keeps in RAM beside its arena for the whole step: parameters and
        buffers, gradients, optimizer state, the batch and the outputs. Counted against the
        RAM budget unless it covers activations only (docs/model.md, "RAM budget")."""
        return (self.param_bytes + self.grad_bytes + self.optimizer_state_bytes + self.input_bytes
                + self.step_output_bytes)

    def count(self, kind: str) -> int:
        return sum(1 for n in self.nodes if n.kind == kind)

    def summary(self) -> dict[str, Any]:
        """Key figures for printing: node counts per kind, bytes, FLOPs."""
        return {
            "name": self.name,
            "nodes": self.n,
            "forward": self.count("forward"),
            "loss": self.count("loss"),
            "backward": self.count("backward"),
            "update": self.count("update"),
            "edges": len(self.edges),
            "activation_bytes": self.activation_bytes,
            "max_node_bytes": max((n.output_bytes for n in self.nodes), default=0),
            "flops": sum(n.flops for n in self.nodes),
            "param_bytes": self.param_bytes,
            "input_bytes": self.input_bytes,
        }
