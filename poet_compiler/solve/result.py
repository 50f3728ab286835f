"""Result: what every strategy returns — solver or heuristic — with simulator figures.

All figures (energy, time, peak RAM, counts) come from replaying the Program in the
independent simulator, never from a solver's objective value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from poet_compiler.schedule.program import Program
from poet_compiler.schedule.schedule import Schedule

Status = Literal["optimal", "feasible", "infeasible", "timeout"]


@dataclass
class Result:
    status: Status
    strategy: str
    mode: str
    ram_budget_bytes: int
    deadline_s: float | None
    program: Program | None = None
    schedule: Schedule | None = None
    energy_j: float | None = None
    runtime_s: float | None = None
    peak_ram_bytes: int | None = None
    arena_bytes: int | None = None
    lower_bound_j: float | None = None
    gap: float | None = None
    solve_time_s: float = 0.0
    n_nodes: int = 0
    n_compute: int = 0
    n_page_in: int = 0
    n_page_out: int = 0
    solver: str = "none"
    formulation: str = "none"
    message: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status in ("optimal", "feasible")

    REPORT_KEYS = (
        "status", "energy_j", "runtime_s", "peak_ram_bytes", "ram_budget_bytes", "deadline_s",
        "lower_bound_j", "gap", "solve_time_s", "n_nodes", "n_compute", "n_page_in",
        "n_page_out", "solver", "formulation", "mode", "strategy",
    )

    def report(self) -> dict[str, Any]:
        """The report object (sidecar JSON, --json): the keys of issue 4 plus extras."""
        out = {k: getattr(self, k) for k in self.REPORT_KEYS}
        out["arena_bytes"] = self.arena_bytes
        out["message"] = self.message
        out.update(self.extra)
        return out
