"""The cost model: price every node of a TrainingGraph on a device -> CostTable.

Per node, with ``fig = profile.compute[node.op_class]`` and ``B`` the node's bytes of
memory traffic (``bytes_accessed``; when a graph leaves it 0, the bytes of its inputs'
outputs plus its own output — what it must at least read and write):

- compute time   = ``overhead + max(flops / fig.throughput_flops, B / memory.bandwidth_bps)``
  (a roofline; the overhead is the per-node call/dispatch cost, ``fig.op_overhead_s`` when
  the class has its own, else the profile's ``op_overhead_s``, so no node is free and a
  zero-FLOP data-movement node still costs its traffic);
- compute energy = ``flops * fig.energy_j_per_flop + B * memory.energy_j_per_byte``
  (dynamic energy of the work; static power is *not* folded in here — it is the
  CostTable's ``static_w``, charged over the schedule's total time, so time spent
  paging or waiting is charged too);
- page-in/out time   = ``latency_s + ceil(output_bytes / page_size_bytes) * page_size_bytes / bandwidth_bps``;
- page-in/out energy = that time * ``power_w``.

Precedence, field by field: an explicit ``node.cost`` value from a graph file > the
profile's measured ``op_table[node.extra["signature"]]`` (compute only) > the analytic
model above. Without a profile every node must carry all six explicit costs.
"""

from __future__ import annotations

import math
from dataclasses import replace

from poet_compiler.devices.costs import CostTable
from poet_compiler.devices.profile import DeviceProfile, PagingFigures
from poet_compiler.errors import ProfileError
from poet_compiler.graph.ir import COST_FIELDS, Node, TrainingGraph


def traffic_bytes(graph: TrainingGraph, node: Node) -> int:
    """Bytes a node reads and writes: its own figure, else inputs + output."""
    if node.bytes_accessed > 0:
        return node.bytes_accessed
    return node.output_bytes + sum(graph.nodes[i].output_bytes for i in node.inputs)


def analytic_compute(graph: TrainingGraph, node: Node, profile: DeviceProfile) -> tuple[float, float]:
    """(seconds, joules) of one node from the roofline model of the profile."""
    fig = getattr(profile.compute, node.op_class)
    traffic = traffic_bytes(graph, node)
    overhead = fig.op_overhead_s if fig.op_overhead_s is not None else profile.op_overhead_s
    time_s = overhead + max(node.flops / fig.throughput_flops, traffic / profile.memory.bandwidth_bps)
    energy_j = node.flops * fig.energy_j_per_flop + traffic * profile.memory.energy_j_per_byte
    return time_s, energy_j


def sector_bytes(n_bytes: int, page_size_bytes: int) -> int:
    """Bytes actually transferred: rounded up to whole sectors/pages."""
    return math.ceil(n_bytes / page_size_bytes) * page_size_bytes


def paging_cost(n_bytes: int, direction: PagingFigures, page_size_bytes: int) -> tuple[float, float]:
    """(seconds, joules) of moving ``n_bytes`` one way between RAM and flash."""
    time_s = direction.latency_s + sector_bytes(n_bytes, page_size_bytes) / direction.bandwidth_bps
    return time_s, time_s * direction.power_w


def node_costs(graph: TrainingGraph, node: Node, profile: DeviceProfile | None) -> dict[str, float]:
    """The six costs of one node, with the precedence explicit > op_table > analytic."""
    explicit = node.cost.as_dict() if node.cost is not None else {}
    if profile is None:
        missing = [f for f in COST_FIELDS if f not in explicit]
        if missing:
            raise ProfileError(
                f"node {node.id} ({node.name!r}) has no explicit {', '.join(missing)} cost; "
                "give --device so a profile's cost model can fill it"
            )
        return explicit
    out: dict[str, float] = {}
    if "compute_s" not in explicit or "compute_j" not in explicit:
        sig = node.extra.get("signature")
        measured = profile.op_table.get(sig) if isinstance(sig, str) else None
        if measured is not None:
            out["compute_s"], out["compute_j"] = measured.compute_s, measured.compute_j
        else:
            out["compute_s"], out["compute_j"] = analytic_compute(graph, node, profile)
    if not all(f in explicit for f in ("page_in_s", "page_in_j", "page_out_s", "page_out_j")):
        out["page_in_s"], out["page_in_j"] = paging_cost(node.output_bytes, profile.page_in, profile.page_size_bytes)
        out["page_out_s"], out["page_out_j"] = paging_cost(node.output_bytes, profile.page_out, profile.page_size_bytes)
    out.update(explicit)
    return out


def costs_for(graph: TrainingGraph, profile: DeviceProfile | None) -> CostTable:
    """The CostTable of ``graph`` on ``profile`` (or from the graph's explicit costs alone)."""
    rows = [node_costs(graph, node, profile) for node in graph.nodes]
    columns = {f: tuple(float(r[f]) for r in rows) for f in COST_FIELDS}
    base = CostTable(**columns)  # type: ignore[arg-type]  # the six per-node columns
    if profile is None:
        return base
    return replace(
        base,
        static_w=profile.static_power_w,
        dma=profile.dma,
        device=profile.name,
        ram_bytes=profile.ram_bytes,
        reserve_bytes=profile.reserve.bytes_for(graph.n) if profile.reserve is not None else 0,
        # a copy reads and writes each byte: twice the traffic (the compute model's B)
        move_s_per_byte=2.0 / profile.memory.bandwidth_bps,
        move_j_per_byte=2.0 * profile.memory.energy_j_per_byte,
    )


def step_cost(table: CostTable) -> dict[str, float]:
    """One training step with no remat and no paging: every node computed once.

    Time is the sum of compute times; energy is their dynamic energy plus static power
    over that time (the model of docs/model.md with no transfers).
    """
    time_s = table.compute_only_s
    dynamic_j = float(sum(table.compute_j))
    static_j = table.static_w * time_s
    return {"time_s": time_s, "dynamic_j": dynamic_j, "static_j": static_j, "energy_j": dynamic_j + static_j}
