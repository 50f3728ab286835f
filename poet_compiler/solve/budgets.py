"""Turn the user's budget text into numbers: ``256k``, ``50%`` (of the checkpoint-all
peak), ``120ms``, ``1.5x`` (of the compute-only time).

Relative budgets need the reference figures of the graph on the device, which come from
the same simulator every schedule goes through.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from poet_compiler.devices.costs import CostTable
from poet_compiler.errors import BudgetError
from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schedule.build import assemble
from poet_compiler.schedule.linearize import linearize
from poet_compiler.schedule.simulate import simulate
from poet_compiler.units import parse_duration, parse_relative, parse_size


@dataclass(frozen=True)
class Reference:
    """Checkpoint-all figures: the 100% of RAM budgets and the 1x of deadlines."""

    peak_bytes: int
    runtime_s: float
    energy_j: float


def reference(graph: TrainingGraph, costs: CostTable) -> Reference:
    """Figures of PyTorch's default: compute once, free each tensor after its last use."""
    sim = simulate(graph, costs, linearize(graph, assemble(graph, np.eye(graph.n, dtype=bool)), dma=costs.dma))
    return Reference(peak_bytes=sim.peak_bytes, runtime_s=sim.runtime_s, energy_j=sim.energy_j)


def resolve_ram(text: str | int | float | None, ref: Reference, costs: CostTable, fixed: int = 0) -> int:
    """Bytes for ``--ram``; None means the device's RAM size. A relative budget (``60%``)
    is that share of checkpoint-all's activation peak plus the ``fixed`` bytes the budget
    counts beside the arena (``FixedRam.total``: parameters, gradients, optimizer state,
    batch, outputs, runtime reserve; 0 with activations only), so that its arena gets the
    same bytes under either convention (solve/ram.py)."""
    if text is None:
        if costs.ram_bytes is None:
            raise BudgetError("no --ram given and the graph's costs name no device RAM size")
        return costs.ram_bytes
    if isinstance(text, str):
        frac = parse_relative(text, "%")
        if frac is not None:
            return max(1, fixed + int(ref.peak_bytes * frac))
    return parse_size(text, "RAM budget")


def resolve_deadline(text: str | float | None, ref: Reference, costs: CostTable) -> float | None:
    """Seconds for ``--deadline``; ``1.5x`` is relative to the compute-only step time."""
    if text is None:
        return None
    factor = parse_relative(text, "x") if isinstance(text, str) else None
    seconds = costs.compute_only_s * factor if factor is not None else parse_duration(text, "deadline")
    if seconds < costs.compute_only_s * (1 - 1e-9):
        raise BudgetError(
            f"deadline {text!r} = {seconds:.4g} s is below the compute-only minimum "
            f"{costs.compute_only_s:.4g} s (every node must run at least once); use >= 1x"
        )
    return seconds
