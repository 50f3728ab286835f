"""Problem: one scheduling question — a graph, its costs, the budgets and the mode."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from poet_compiler.devices.costs import CostTable
from poet_compiler.errors import ScheduleError
from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schedule.linearize import linearize
from poet_compiler.schedule.program import Program
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.schedule.simulate import Simulation, simulate
from poet_compiler.solve.ram import FixedRam

Mode = Literal["poet", "remat", "paging", "none"]
MODES: tuple[str, ...] = ("poet", "remat", "paging", "none")


@dataclass(frozen=True)
class Problem:
    graph: TrainingGraph
    costs: CostTable
    ram_budget_bytes: int          # the arena plus what ``fixed`` counts beside it
    deadline_s: float | None = None  # None: no deadline
    mode: Mode = "poet"
    # What the budget counts beside the arena (solve/ram.py; the API and sweeps count the
    # graph's fixed bytes and the device's reserve unless activations only). Default:
    # nothing, the budget is the arena's.
    fixed: FixedRam = FixedRam()
    # "sync" or "stage" (see ``synchronous``); None: chosen from the device and budgets at
    # construction, then kept by every derived problem (``dataclasses.replace``), so that a
    # relaxed deadline in the infeasibility analysis does not change the semantics.
    transfers: Literal["sync", "stage"] | None = None

    def __post_init__(self) -> None:
        if self.transfers is None:
            object.__setattr__(self, "transfers", "stage" if self.costs.dma and self.time_matters else "sync")

    @property
    def n(self) -> int:
        return self.graph.n

    @property
    def time_matters(self) -> bool:
        """Time costs something: a deadline, or static power."""
        return self.deadline_s is not None or self.costs.static_w > 0

    @property
    def overlaps(self) -> bool:
        """The models may take a transfer's time as hidden behind compute: with DMA, except
        in the synchronous family where time matters (the second family ``solve_milp``
        searches on small graphs), whose Programs wait for each transfer, so that its time
        adds up and costs static power. Where time is free the synchronous family is only
        chosen because overlap buys nothing; bounds on the step time there (the least
        deadline of the infeasibility analysis) still let transfers overlap."""
        return self.costs.dma and not (self.synchronous and self.time_matters)

    @property
    def activation_budget(self) -> int:
        """Bytes available to the schedule's tensors at every point: the budget less what
        it counts beside the arena (may be negative: a budget below the fixed bytes)."""
        return self.ram_budget_bytes - self.fixed.total

    @property
    def allows_remat(self) -> bool:
        return self.mode in ("poet", "remat")

    @property
    def allows_paging(self) -> bool:
        return self.mode in ("poet", "paging")

    @property
    def synchronous(self) -> bool:
        """The schedule's transfers are synchronous (docs/model.md, "Which transfers"):
        always without DMA, and with DMA when time costs nothing (overlap then only costs
        RAM). Otherwise DMA transfers overlap their whole stage."""
        return self.transfers == "sync"


def simulate_schedule(problem: Problem, schedule: Schedule, **limits: object) -> Simulation:
    """Linearize ``schedule`` in the problem's mode and simulate it (``limits``: the
    simulator's ``ram_budget_bytes`` / ``deadline_s`` checks)."""
    return simulate(problem.graph, problem.costs,
                    linearize(problem.graph, schedule, mode=problem.mode, dma=not problem.synchronous),
                    **limits)  # type: ignore[arg-type]


def feasible_energy(problem: Problem, schedule: Schedule | Program | None) -> float | None:
    """The simulated energy of ``schedule`` (or of a Program, as strategies that emit
    instructions give it) if it is valid in the problem's mode and meets the activation
    budget (live bytes) and the deadline; None otherwise."""
    if schedule is None:
        return None
    try:
        program = schedule if isinstance(schedule, Program) else \
            linearize(problem.graph, schedule, mode=problem.mode, dma=not problem.synchronous)
        sim = simulate(problem.graph, problem.costs, program, ram_budget_bytes=problem.activation_budget,
                       deadline_s=problem.deadline_s)
    except ScheduleError:
        return None
    return sim.energy_j
