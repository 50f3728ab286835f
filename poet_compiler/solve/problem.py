"""Problem: one scheduling question — a graph, its costs, the budgets and the mode."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from poet_compiler.devices.costs import CostTable
from poet_compiler.graph.ir import TrainingGraph

Mode = Literal["poet", "remat", "paging", "none"]
MODES: tuple[str, ...] = ("poet", "remat", "paging", "none")


@dataclass(frozen=True)
class Problem:
    graph: TrainingGraph
    costs: CostTable
    ram_budget_bytes: int          # for activations (see count_fixed)
    deadline_s: float | None = None  # None: no deadline
    mode: Mode = "poet"
    count_fixed: bool = False      # also count params/grads/optimizer state/input in the budget
    options: dict[str, object] = field(default_factory=dict, compare=False, hash=False)

    @property
    def n(self) -> int:
        return self.graph.n

    @property
    def activation_budget(self) -> int:
        """Bytes available to the schedule's tensors at every point."""
        return self.ram_budget_bytes - (self.graph.fixed_bytes if self.count_fixed else 0)

    @property
    def allows_remat(self) -> bool:
        return self.mode in ("poet", "remat")

    @property
    def allows_paging(self) -> bool:
        return self.mode in ("poet", "paging")
