"""Small poet-graph/1 graphs with explicit costs (device ``None``) for the viz/comparison tests."""

from __future__ import annotations

from typing import Any

from poet_compiler.graph.io import graph_from_dict
from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schedule.schedule import Schedule


def chain_dict(n_forward: int = 4, size: int = 1000, name: str = "tiny_chain") -> dict[str, Any]:
    """A forward chain, a loss and the mirrored backward chain (each grad reads its activation)."""
    nodes: list[dict[str, Any]] = []

    def add(name: str, kind: str, inputs: list[int], nbytes: int, flops: int) -> int:
        nid = len(nodes)
        nodes.append({
            "id": nid, "name": name, "kind": kind, "op": f"aten.{kind}", "op_class": "elementwise",
            "inputs": inputs, "output_bytes": nbytes, "workspace_bytes": 0, "flops": flops,
            "cost": {
                "compute_s": 1e-3 * (1 + nid % 3), "compute_j": 2e-3 * (1 + nid % 3),
                "page_in_s": 4e-4 + nbytes * 1e-7, "page_in_j": 1e-4 + nbytes * 1e-8,
                "page_out_s": 5e-4 + nbytes * 1e-7, "page_out_j": 1.2e-4 + nbytes * 1e-8,
            },
        })
        return nid

    fwd = [add("x", "forward", [], size, 10)]
    for k in range(1, n_forward):
        fwd.append(add(f"f{k}", "forward", [fwd[-1]], size + 100 * k, 1000))
    loss = add("loss", "loss", [fwd[-1]], 8, 10)
    grad = loss
    for k in range(n_forward - 1, 0, -1):
        grad = add(f"g{k}", "backward", [grad, fwd[k - 1]], size + 100 * k, 2000)
    return {"format": "poet-graph/1", "name": name, "nodes": nodes}


def chain(n_forward: int = 4, size: int = 1000, name: str = "tiny_chain") -> TrainingGraph:
    return graph_from_dict(chain_dict(n_forward, size, name), source=name)


def remat_and_paging_schedule(graph: TrainingGraph) -> Schedule:
    """A valid poet-mode schedule of ``chain(4)``: node 1 is paged out in stage 3 and back
    in in stage 4; node 2 is dropped after stage 3 and recomputed in stage 5."""
    import numpy as np

    from poet_compiler.schedule.schedule import Schedule

    assert graph.n == 8, "built for chain(4): x f1 f2 f3 loss g3 g2 g1"
    s = Schedule.empty(8)
    np.fill_diagonal(s.R, True)
    s.R[5, 2] = True
    s.S_RAM[1:8, 0] = True             # x is read by g1 at the very end
    s.S_RAM[[2, 3, 5, 6], 1] = True     # f1: read by f2, paged out in 3, back in for 5 and 6
    s.S_AUX[4:8, 1] = True
    s.M_out[3, 1] = True
    s.M_in[4, 1] = True
    s.S_RAM[3, 2] = True                # f2: read by f3, then dropped and recomputed in 5
    s.S_RAM[4, 3] = True
    s.S_RAM[5, 4] = True
    s.S_RAM[6, 5] = True
    s.S_RAM[7, 6] = True
    return s
