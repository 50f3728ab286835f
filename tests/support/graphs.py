"""Shared test graphs and problems: random DAGs with explicit costs, chains, training chains.

Everything here is deterministic in its seed and needs no device profile: costs come
from each node's explicit ``cost`` object via :func:`cost_table_from_graph`.
"""

from __future__ import annotations

import random

from poet_compiler.devices.costs import CostTable
from poet_compiler.graph.ir import Node, NodeCost, TrainingGraph
from poet_compiler.graph.validate import validate
from poet_compiler.solve.problem import Problem


def cost_table_from_graph(graph: TrainingGraph, static_w: float = 0.0, dma: bool = False) -> CostTable:
    """A CostTable from the graph's explicit per-node costs (every node must have them)."""
    fields = {f: [] for f in ("compute_s", "compute_j", "page_in_s", "page_in_j", "page_out_s", "page_out_j")}
    for node in graph.nodes:
        if node.cost is None or not node.cost.complete:
            raise ValueError(f"node {node.id} {node.name!r} has no complete explicit cost")
        for f, values in fields.items():
            values.append(float(getattr(node.cost, f)))
    return CostTable(**{f: tuple(v) for f, v in fields.items()}, static_w=static_w, dma=dma)


def _node(i: int, inputs: tuple[int, ...], size: int, rng: random.Random | None, *,
          kind: str = "forward", workspace: int = 0, pinned: bool = False, name: str | None = None) -> Node:
    if rng is None:   # fixed, easy-to-hand-compute costs
        cost = NodeCost(compute_s=1.0, compute_j=1.0, page_in_s=0.5, page_in_j=0.25, page_out_s=0.5, page_out_j=0.25)
    else:
        # Paging cost roughly proportional to size, with a fixed latency, like a real device.
        cost = NodeCost(
            compute_s=round(rng.uniform(0.5, 4.0), 3),
            compute_j=round(rng.uniform(0.5, 4.0), 3),
            page_in_s=round(0.1 + size * rng.uniform(0.005, 0.03), 3),
            page_in_j=round(0.05 + size * rng.uniform(0.005, 0.03), 3),
            page_out_s=round(0.1 + size * rng.uniform(0.005, 0.03), 3),
            page_out_j=round(0.05 + size * rng.uniform(0.005, 0.03), 3),
        )
    return Node(
        id=i, name=name or f"n{i}", kind=kind, op="test.op", op_class="other", inputs=tuple(sorted(inputs)),
        output_bytes=size, workspace_bytes=workspace, pinned=pinned, cost=cost,
    )


def random_dag(seed: int, n: int, *, max_inputs: int = 3, max_bytes: int = 100,
               workspace_prob: float = 0.2, pinned_prob: float = 0.0) -> TrainingGraph:
    """A connected random DAG of ``n`` nodes with random sizes, workspaces and costs.

    Node ``i > 0`` reads node ``i-1`` most of the time (training graphs are chain-like)
    plus up to ``max_inputs - 1`` random earlier nodes; node 0 is a source.
    """
    rng = random.Random(seed)
    nodes = []
    for i in range(n):
        inputs: set[int] = set()
        if i > 0:
            if rng.random() < 0.8:
                inputs.add(i - 1)
            for _ in range(rng.randint(0 if inputs else 1, max_inputs - 1)):
                inputs.add(rng.randrange(i))
        size = rng.randint(1, max_bytes)
        work = rng.randint(1, max_bytes // 2) if rng.random() < workspace_prob else 0
        kind = "forward" if i < n // 2 else ("loss" if i == n // 2 else "backward")
        nodes.append(_node(i, tuple(inputs), size, rng, kind=kind, workspace=work,
                           pinned=rng.random() < pinned_prob))
    return validate(TrainingGraph(name=f"random_{seed}_{n}", nodes=tuple(nodes)))


def chain_graph(n: int, size: int = 10) -> TrainingGraph:
    """``0 -> 1 -> ... -> n-1``, every node ``size`` bytes, unit costs."""
    nodes = tuple(_node(i, (i - 1,) if i else (), size, None) for i in range(n))
    return validate(TrainingGraph(name=f"chain_{n}", nodes=nodes))


def forward_backward_chain(n_fwd: int, size: int = 10) -> TrainingGraph:
    """A training-like graph: forward chain f0..f{n-1}, loss, backward chain.

    Backward node ``b_k`` (gradient w.r.t. forward ``k``'s input side) reads forward
    ``k-1`` (the saved activation) and ``b_{k+1}`` (the incoming gradient; the loss for
    the last forward). ``2 * n_fwd + 1`` nodes, unit costs.
    """
    nodes: list[Node] = []
    for k in range(n_fwd):
        nodes.append(_node(k, (k - 1,) if k else (), size, None, name=f"f{k}"))
    loss = n_fwd
    nodes.append(_node(loss, (n_fwd - 1,), size, None, kind="loss", name="loss"))
    prev = loss
    for k in range(n_fwd - 1, -1, -1):
        i = len(nodes)
        inputs = (prev,) + ((k - 1,) if k > 0 else ())
        nodes.append(_node(i, inputs, size, None, kind="backward", name=f"b{k}"))
        prev = i
    return validate(TrainingGraph(name=f"fwd_bwd_{n_fwd}", nodes=tuple(nodes)))


def working_set_floor(graph: TrainingGraph) -> int:
    """A lower bound on any schedule's peak: a node's output, workspace and inputs together."""
    return max(
        node.output_bytes + node.workspace_bytes + sum(graph.nodes[i].output_bytes for i in node.inputs)
        for node in graph.nodes
    )


def random_problem(seed: int, n: int, mode: str = "poet", *, deadline_prob: float = 0.3,
                   dma: bool | None = None, static_w: float | None = None,
                   budget_fraction: float | None = None, **dag_kwargs) -> Problem:
    """A random problem whose budget lies between the working-set floor and checkpoint-all's peak.

    Some budgets are infeasible in restricted modes (paging, none): that is intended,
    as the solvers must then agree that they are. A deadline, when drawn, lies between
    the compute-only time and 1.6x of it. ``budget_fraction`` fixes where the budget lies
    between the two (0 = floor, 1 = checkpoint-all's peak).
    """
    from poet_compiler.schedule.linearize import linearize
    from poet_compiler.schedule.schedule import Schedule
    from poet_compiler.schedule.simulate import simulate

    rng = random.Random(seed * 7919 + n)
    graph = random_dag(seed, n, **dag_kwargs)
    costs = cost_table_from_graph(
        graph,
        static_w=static_w if static_w is not None else rng.choice([0.0, 0.0, 0.1]),
        dma=bool(dma),   # synchronous unless asked: the oracle is exact and fast there
    )
    hi = simulate(graph, costs, linearize(graph, Schedule.checkpoint_all(n))).peak_bytes
    lo = min(working_set_floor(graph), hi)
    # Biased towards tight budgets, where recomputing and paging matter.
    fraction = rng.random() ** 2 if budget_fraction is None else budget_fraction
    budget = lo + int((hi - lo) * fraction)
    deadline = None
    if rng.random() < deadline_prob:
        deadline = round(costs.compute_only_s * rng.uniform(1.0, 1.6), 3)
    return Problem(graph=graph, costs=costs, ram_budget_bytes=budget, deadline_s=deadline, mode=mode)


def training_problem(seed: int, n_fwd: int, mode: str = "poet", *, dma: bool = False, static_w: float = 0.0,
                     deadline: bool = False, slack: float | None = None) -> Problem:
    """A random training-shaped problem: forward chain with skips, loss, backward nodes
    that read the incoming gradient and the saved activations (``2 * n_fwd + 1`` nodes).

    Sizes are 1-8 KiB, some nodes have a workspace; paging energy per byte is drawn from
    cheap to dear relative to compute. The budget is the largest single working set
    times ``1 + slack`` (``slack`` drawn from 0-30 % unless given), where recomputing
    and paging decide everything. With ``deadline``, 1.0-1.5x of the compute-only time.
    """
    rng = random.Random(f"{seed}/{n_fwd}/{mode}/{dma}/{static_w}/{deadline}")
    per_byte = rng.choice([0.02, 0.1, 0.3, 1.0]) / 1024    # J (and s) per byte of transfer
    kib = 1024

    def cost(size: int) -> NodeCost:
        return NodeCost(
            compute_s=round(rng.uniform(0.5, 4.0), 3), compute_j=round(rng.uniform(0.5, 4.0), 3),
            page_in_s=round(0.05 + size * per_byte * rng.uniform(0.5, 1.5), 4),
            page_in_j=round(0.05 + size * per_byte * rng.uniform(0.5, 1.5), 4),
            page_out_s=round(0.05 + size * per_byte * rng.uniform(0.5, 1.5), 4),
            page_out_j=round(0.05 + size * per_byte * rng.uniform(0.5, 1.5), 4),
        )

    nodes: list[Node] = []

    def add(inputs: tuple[int, ...], kind: str, name: str) -> int:
        size = rng.randint(1, 8) * kib
        work = rng.randint(1, 4) * kib if rng.random() < 0.25 else 0
        i = len(nodes)
        nodes.append(Node(id=i, name=name, kind=kind, op="test.op", op_class="other", inputs=tuple(sorted(set(inputs))),
                          output_bytes=size, workspace_bytes=work, cost=cost(size)))
        return i

    for k in range(n_fwd):
        ins = () if k == 0 else ((k - 1,) + ((k - 2,) if k >= 2 and rng.random() < 0.4 else ()))
        add(ins, "forward", f"f{k}")
    grad = add((n_fwd - 1,), "loss", "loss")
    for k in range(n_fwd - 1, -1, -1):
        saved = (k,) + ((k - 1,) if k > 0 and rng.random() < 0.5 else ())
        grad = add((grad,) + saved, "backward", f"b{k}")
    graph = validate(TrainingGraph(name=f"train_{seed}_{n_fwd}", nodes=tuple(nodes)))
    costs = cost_table_from_graph(graph, static_w=static_w, dma=dma)
    s = rng.uniform(0.0, 0.3) if slack is None else slack
    budget = int(working_set_floor(graph) * (1 + s))
    dl = round(costs.compute_only_s * rng.uniform(1.0, 1.5), 3) if deadline else None
    return Problem(graph=graph, costs=costs, ram_budget_bytes=budget, deadline_s=dl, mode=mode)
