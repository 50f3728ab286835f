"""Random layered DAGs: the shape of Moccasin's generator (BENCHMARKS.md's DAG cells).

Layers of ``width`` nodes, each node reading 1-3 nodes of the previous two layers; no
backward structure, so the chain-shaped heuristics do not apply and memory pressure is a
sliding window. :func:`layered_dag` gives the poet-graph/1 document the benchmarks write
(``bench/time_limit_bench.py``), :func:`layered_graph` the validated graph.
"""

from __future__ import annotations

import random

from poet_compiler.graph.io import graph_from_dict
from poet_compiler.graph.ir import TrainingGraph


def layered_dag(n: int = 500, width: int = 10, seed: int = 0) -> dict:
    """A random layered DAG in poet-graph/1 (the shape of Moccasin's generator): layers
    of ``width`` nodes, each node reading 1-3 nodes of the previous two layers; sizes
    1-100 units, random compute and paging costs, no backward structure."""
    rng = random.Random(seed)
    nodes = []
    for i in range(n):
        layer = i // width
        lo = max(0, (layer - 2) * width)
        hi = layer * width
        inputs = sorted(set(rng.sample(range(lo, hi), min(hi - lo, rng.randint(1, 3))))) if hi > 0 else []
        if i > 0 and not inputs:
            inputs = [i - 1]
        size = rng.randint(1, 100)
        nodes.append({
            "id": i, "name": f"n{i}", "kind": "forward" if i < n // 2 else "backward", "op": "rand.op",
            "op_class": "other", "inputs": inputs, "output_bytes": size, "workspace_bytes": 0,
            "pinned": False,
            "cost": {"compute_s": round(rng.uniform(0.5, 4.0), 3), "compute_j": round(rng.uniform(0.5, 4.0), 3),
                     "page_in_s": round(0.1 + size * 0.01, 3), "page_in_j": round(0.05 + size * 0.01, 3),
                     "page_out_s": round(0.1 + size * 0.01, 3), "page_out_j": round(0.05 + size * 0.01, 3)},
        })
    # Every node must be read by someone or be a sink the graph format accepts: keep it simple.
    return {"format": "poet-graph/1", "name": f"layered_{n}_{seed}", "nodes": nodes}


def layered_graph(n: int, width: int = 10, seed: int = 0) -> TrainingGraph:
    """:func:`layered_dag` as a validated :class:`TrainingGraph`."""
    return graph_from_dict(layered_dag(n, width, seed))
