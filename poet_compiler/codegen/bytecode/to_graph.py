"""What a decoded .poet file replays against: its graph (node table, sizes, workspaces)
and a cost table of zeros, for ``poetc plot`` on a .poet file (its memory over time)."""

from __future__ import annotations

from typing import Any

from poet_compiler.devices.costs import CostTable
from poet_compiler.graph.ir import KINDS, OP_CLASSES, Node, TrainingGraph


def graph_from_decoded(decoded: Any, name: str = "schedule") -> TrainingGraph:
    """A TrainingGraph from a decoded .poet file: node table, output sizes, workspace.

    Enough for drawing and for replaying live bytes in the simulator (costs play no part
    in memory). A stripped file has no names or inputs: nodes are named ``n<i>`` and
    the simulator then cannot check dependencies, only allocation.
    """
    n = decoded.program.n_nodes
    sizes = decoded.sizes or (0,) * n
    work = decoded.workspace or (0,) * n
    nodes = []
    for i in range(n):
        entry = decoded.nodes[i] if decoded.nodes is not None else None
        nodes.append(Node(
            id=i,
            name=entry.name if entry is not None else f"n{i}",
            kind=entry.kind if entry is not None and entry.kind in KINDS else "forward",
            op=entry.op if entry is not None else "?",
            op_class=entry.op_class if entry is not None and entry.op_class in OP_CLASSES else "other",
            inputs=tuple(entry.inputs) if entry is not None else (),
            output_bytes=int(sizes[i]),
            workspace_bytes=int(work[i]),
        ))
    return TrainingGraph(name=decoded.graph_name or name, nodes=tuple(nodes))


def zero_costs(n: int) -> CostTable:
    """A CostTable of zeros: replays a Program for its memory timeline only."""
    z = (0.0,) * n
    return CostTable(compute_s=z, compute_j=z, page_in_s=z, page_in_j=z, page_out_s=z, page_out_j=z)
