"""Run POET's published solver on one of POET's own examples, and write that example as a
poet-graph/1 file for poetc. Runs under a Python that imports POET's package (a checkout of
POET's public repository on PYTHONPATH) and PuLP, not under poetc's: bench/peers_poet.py
starts it. Prints one JSON row.

    python bench/poet_peer_driver.py MODEL PLATFORM RAM_BYTES RUNTIME_X GRAPH_OUT [TIME_LIMIT_S]

RAM_BYTES ``-``: write the graph only (its budget is then chosen from poetc's figures).

The graph keeps POET's costs: per node, compute time and energy from POET's layer model
and chipset (``make_dfgraph_costs``), paging energy from its page-in/out cost vectors, and
paging time from the chipset's latency and throughput (POET's solver charges none).
POET's solver is ``POETSolver(..., solver="pulp-cbc")`` with paging and remat on, one
thread; its energy is its objective, compute plus paging energy, as POET's ``solve`` reports.
"""

from __future__ import annotations

import json
import sys
import time
import types
from typing import Any


class _Unused:
    """Stands in for gurobipy, which POET's package imports at the top; the CBC path never calls it."""

    def __getattr__(self, name: str) -> _Unused:
        return _Unused()

    def __call__(self, *args: Any, **kwargs: Any) -> _Unused:
        return _Unused()


def _stub_gurobipy() -> None:
    mod = types.ModuleType("gurobipy")
    mod.GRB = _Unused()  # type: ignore[attr-defined]
    mod.GurobiError = Exception  # type: ignore[attr-defined]
    mod.__getattr__ = lambda name: _Unused()  # type: ignore[method-assign]
    sys.modules.setdefault("gurobipy", mod)


def poet_graph(name: str, g: Any, chipset: dict, cpu: Any, pin: Any, pout: Any) -> dict:
    """POET's DFGraph and cost vectors as poet-graph/1."""
    nodes = []
    for i in range(g.size):
        label = g.node_names[i]
        size = int(g.cost_ram[i])
        nodes.append({
            "id": i, "name": label, "kind": "forward" if i in g.vfwd else "backward",
            "op": label.split("_", 1)[1] if "_" in label else label, "op_class": "other",
            "inputs": [int(a) for a in g.args[i]], "output_bytes": size,
            "cost": {"compute_s": float(g.cost_cpu[i]), "compute_j": float(cpu[i, 0]),
                     "page_in_s": chipset["PAGEIN_LATENCY"] + size / chipset["PAGEIN_THROUGHPUT"],
                     "page_in_j": float(pin[i, 0]),
                     "page_out_s": chipset["PAGEOUT_LATENCY"] + size / chipset["PAGEOUT_THROUGHPUT"],
                     "page_out_j": float(pout[i, 0])},
        })
    return {"format": "poet-graph/1", "name": name,
            "extra": {"source": "POET reference repository layer list and chipset constants"}, "nodes": nodes}


def main(argv: list[str]) -> int:
    model, platform, runtime_x, graph_out = argv[0], argv[1], float(argv[3]), argv[4]
    limit = float(argv[5]) if len(argv) > 5 else None
    _stub_gurobipy()
    import numpy as np
    from poet.poet_solver import POETSolver
    from poet.util import get_chipset_and_net, make_dfgraph_costs

    chipset, net = get_chipset_and_net(platform=platform, model=model, batch_size=1)
    g, cpu, pin, pout = make_dfgraph_costs(net=net, device=chipset)
    with open(graph_out, "w") as fh:
        json.dump(poet_graph(f"poet_{model}_{platform}", g, chipset, cpu, pin, pout), fh, indent=1)
    if argv[2] == "-":
        print(json.dumps({"nodes": g.size}))
        return 0
    ram = float(argv[2])
    runtime_budget = runtime_x * sum(g.cost_cpu.values())
    t0 = time.perf_counter()
    solver = POETSolver(g=g, cpu_power_cost_vec_joule=cpu, pagein_power_cost_vec_joule=pin,
                        pageout_power_cost_vec_joule=pout, ram_budget_bytes=ram, runtime_budget_ms=runtime_budget,
                        paging=1, remat=1, solver="pulp-cbc", time_limit_s=limit, solve_threads=1)
    sol = solver.solve()
    # PuLP's status says "Optimal" for a CBC run stopped on its limit with a solution; its
    # sol_status tells the two apart (1: proven optimal, 2: a solution, not proven).
    import pulp

    status = {1: "optimal", 2: "feasible"}.get(solver.m.sol_status, pulp.LpSolution[solver.m.sol_status])
    row: dict[str, Any] = {"nodes": g.size, "feasible": bool(sol.feasible), "status": status,
                           "solve_s": round(time.perf_counter() - t0, 2)}
    if sol.feasible:
        row["energy_j"] = float(np.sum(sol.R @ cpu) + np.sum(sol.Min @ pin + sol.Mout @ pout))
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
