"""CostTable: what the solver needs to know about a (graph, device) pair, and nothing else.

Solvers and the simulator consume a CostTable; they never see a profile or torch. The
cost model (:mod:`poet_compiler.devices.cost_model`) builds one from a TrainingGraph
and a DeviceProfile; explicit ``cost`` objects in a graph file take precedence.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CostTable:
    """Per-node costs (seconds, joules) and the device facts the schedule depends on."""

    compute_s: tuple[float, ...]
    compute_j: tuple[float, ...]
    page_in_s: tuple[float, ...]
    page_in_j: tuple[float, ...]
    page_out_s: tuple[float, ...]
    page_out_j: tuple[float, ...]
    static_w: float = 0.0      # drawn for the whole step: adds static_w * time to energy
    dma: bool = False          # paging overlaps compute (stage time = max instead of sum)
    device: str = "explicit"   # profile name, or "explicit" when the graph carried every cost
    ram_bytes: int | None = None  # device RAM, the default budget when none is given
    # RAM the device runtime keeps for itself with this graph (stack, runtime state, per-node
    # tables: the profile's ``reserve``); counted against the budget unless activations only.
    reserve_bytes: int = 0
    # A MOVE (arena compaction) copies a buffer inside RAM: it reads and writes every byte
    # at the profile's memory rates. A graph with explicit costs and no profile gives no
    # memory rates, so its moves cost nothing (the report still counts them).
    move_s_per_byte: float = 0.0
    move_j_per_byte: float = 0.0

    def __post_init__(self) -> None:
        n = len(self.compute_s)
        for name in ("compute_j", "page_in_s", "page_in_j", "page_out_s", "page_out_j"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"CostTable.{name} has {len(getattr(self, name))} entries, expected {n}")

    @property
    def n(self) -> int:
        return len(self.compute_s)

    @property
    def compute_only_s(self) -> float:
        """Time of computing every node once with no paging: the smallest possible deadline."""
        return float(sum(self.compute_s))

    def move_s(self, n_bytes: int) -> float:
        return n_bytes * self.move_s_per_byte

    def move_j(self, n_bytes: int) -> float:
        return n_bytes * self.move_j_per_byte

    @property
    def compute_only_j(self) -> float:
        return float(sum(self.compute_j)) + self.static_w * self.compute_only_s
