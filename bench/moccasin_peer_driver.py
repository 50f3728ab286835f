"""Run Moccasin on one of its own inputs, and write that input as a poet-graph/1 file for
poetc. Runs under a Python that imports Moccasin's package (``src`` of a checkout of
Moccasin's public repository on PYTHONPATH) with networkx and OR-Tools, not under
poetc's: bench/peers_dags.py starts it. Prints one JSON row.

    python bench/moccasin_peer_driver.py GRAPH_JSON MEM_MULTIPLIER SECONDS GRAPH_OUT

SECONDS 0 writes the graph and prints the budget without running Moccasin (poetc's benches
on Moccasin's inputs: bench/time_limit_bench.py --moccasin).

As Moccasin's ``main.py`` does: the graph is read with networkx (``out_cost`` and
``duration`` of the random layered graphs renamed ``cost_ram`` and ``cost_cpu``), the
budget is ``ceil(MEM_MULTIPLIER x`` the peak memory of the graph's topological order, by
Moccasin's own ``get_mem_from_schedule``), and ``remat`` runs with the settings of
``main.py`` (C = 2 copies, stages, reservoir), minimizing the schedule's duration. Its two
phases get SECONDS / 2 each, on 2 CP-SAT workers (``main.py`` asks for 16) so that both
tools use the machine's 2 cores.

The poet-graph/1 file: nodes in Moccasin's topological order, ``output_bytes`` =
``cost_ram``, ``compute_s`` = ``compute_j`` = ``cost_cpu`` (so poetc's energy in
``--mode remat`` is Moccasin's schedule duration), paging costs that ``--mode remat``
never uses.
"""

from __future__ import annotations

import json
import math
import sys
import time
import types
from typing import Any


def load(path: str) -> Any:
    import networkx as nx

    with open(path) as fh:
        data = json.load(fh)
    layered = "random_layered" in path
    g = nx.node_link_graph(data, multigraph=False, directed=True,
                           edges="links", source="0" if layered else "source", target="1" if layered else "target")
    if g.graph["name"].startswith("random_layered"):
        for _, d in g.nodes(data=True):
            d["cost_ram"] = d.pop("out_cost")
            d["cost_cpu"] = d.pop("duration")
    return g


def poet_graph(g: Any, order: list) -> dict:
    index = {v: i for i, v in enumerate(order)}
    nodes = []
    for i, v in enumerate(order):
        d = g.nodes[v]
        size, cpu = int(d["cost_ram"]), float(d["cost_cpu"])
        nodes.append({
            "id": i, "name": f"n{v}", "kind": "backward" if d.get("backward") else "forward", "op": "moccasin.node",
            "op_class": "other", "inputs": sorted(index[u] for u in g.predecessors(v)), "output_bytes": size,
            "cost": {"compute_s": cpu, "compute_j": cpu, "page_in_s": 1.0 + size, "page_in_j": 1.0 + size,
                     "page_out_s": 1.0 + size, "page_out_j": 1.0 + size},
        })
    return {"format": "poet-graph/1", "name": g.graph["name"][:60],
            "extra": {"source": "Moccasin's input graph, costs as given (cost_ram, cost_cpu)"}, "nodes": nodes}


def two_workers() -> None:
    """Moccasin's remat sets 16 CP-SAT workers on its solver; hold them to 2."""
    from ortools.sat.python import cp_model

    class Solver(cp_model.CpSolver):
        def Solve(self, *args: Any, **kwargs: Any) -> Any:  # noqa: N802 - OR-Tools' name
            self.parameters.num_search_workers = 2
            return super().Solve(*args, **kwargs)

        def SolveWithSolutionCallback(self, *args: Any, **kwargs: Any) -> Any:  # noqa: N802
            self.parameters.num_search_workers = 2
            return super().SolveWithSolutionCallback(*args, **kwargs)

    cp_model.CpSolver = Solver  # type: ignore[misc]


def main(argv: list[str]) -> int:
    path, multiplier, seconds, graph_out = argv[0], float(argv[1]), float(argv[2]), argv[3]
    import tempfile

    import networkx as nx

    two_workers()
    # Moccasin's cp.py imports rockmate's schedule types for a converter remat does not use.
    rockmate = types.ModuleType("rockmate.def_op")
    rockmate.RunOp = rockmate.DelOp = rockmate.OpSchedule = object  # type: ignore[attr-defined]
    sys.modules.setdefault("rockmate", types.ModuleType("rockmate"))
    sys.modules.setdefault("rockmate.def_op", rockmate)
    from moccasin.cp import remat
    from moccasin.util import get_mem_from_schedule

    g = load(path)
    order = g.graph["order"] if "order" in g.graph else list(nx.topological_sort(g))
    topo_mem, topo_cpu = get_mem_from_schedule(g, order)
    budget = math.ceil(topo_mem * multiplier)
    with open(graph_out, "w") as fh:
        json.dump(poet_graph(g, order), fh)
    row: dict[str, Any] = {"nodes": g.number_of_nodes(), "topo_mem": topo_mem, "topo_cpu": topo_cpu, "budget": budget}
    if seconds <= 0:
        print(json.dumps(row))
        return 0
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as log_dir:
        res = remat(G=g, B=budget, C=2, timeout=seconds / 2, discretized=True, reservoir=True, use_end_global=False,
                    use_stage=True, topo_order=order, phase1=True, use_interval_length_domain=True, use_gcd=True,
                    reservoir_option=2, log_dir=log_dir)
    row.update(status=res.get("status"), duration=res.get("obj_val"), mem_footprint=res.get("mem_footprint"),
               mem_schedule=res.get("mem_schedule"), solve_s=round(time.perf_counter() - t0, 1))
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
