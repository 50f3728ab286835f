"""TrainingGraph IR: the value every frontend produces and every solver consumes."""

from poet_compiler.graph.io import (
    dumps,
    graph_from_dict,
    graph_to_dict,
    loads,
    read_graph,
    write_graph,
)
from poet_compiler.graph.ir import KINDS, OP_CLASSES, Node, NodeCost, TrainingGraph
from poet_compiler.graph.validate import validate

__all__ = [
    "KINDS", "OP_CLASSES", "Node", "NodeCost", "TrainingGraph", "validate",
    "dumps", "loads", "graph_from_dict", "graph_to_dict", "read_graph", "write_graph",
]
