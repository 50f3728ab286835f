"""What a RAM budget covers: the arena, and what the step keeps beside it.

By default ``--ram`` is what the firmware gets on the device: the schedule's arena plus
everything the training step keeps in RAM for the whole step (:class:`FixedRam`):
parameters and buffers, gradients until their update, optimizer state, the batch, the
step's other outputs, and the device runtime's own reserve (stack, runtime state,
per-node tables: the profile's ``reserve``). The arena gets what is left
(``Problem.activation_budget``). ``--activations-only`` (``activations_only=True``) keeps
POET's convention, where the budget is the arena's alone: for comparisons with the paper
and its peers. docs/model.md, "RAM budget".
"""

from __future__ import annotations

from dataclasses import dataclass

from poet_compiler.devices.costs import CostTable
from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.units import format_bytes

#: The parts of :class:`FixedRam`, in report order, with their names in messages.
PARTS = (("params", "parameters"), ("grads", "gradients"), ("optimizer_state", "optimizer state"),
         ("batch", "batch"), ("outputs", "outputs"), ("reserve", "runtime reserve"))


@dataclass(frozen=True)
class FixedRam:
    """Bytes the step keeps in RAM beside its arena, by kind (all zero: nothing is
    counted beside the arena, the activation-only convention)."""

    params: int = 0            # parameters and buffers (frozen parameters included)
    grads: int = 0             # gradients kept until the caller's update (0 with update nodes)
    optimizer_state: int = 0
    batch: int = 0             # inputs and target
    outputs: int = 0           # the loss and new buffer values
    reserve: int = 0           # the device runtime's: stack, runtime state, per-node tables

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer_state + self.batch + self.outputs + self.reserve

    def describe(self) -> str:
        """``parameters 20.7 KiB + gradients 19 KiB + ... = 50.1 KiB`` (zero parts left out)."""
        parts = [f"{label} {format_bytes(getattr(self, key))}" for key, label in PARTS if getattr(self, key)]
        return f"{' + '.join(parts) or 'nothing'} = {format_bytes(self.total)}"

    def split(self, arena_bytes: int | None) -> dict[str, int | None]:
        """The RAM split as reported (``Compilation.report()["ram_split"]``): the arena, each
        part, and their total (None when there is no arena)."""
        out: dict[str, int | None] = {"arena": arena_bytes}
        out.update({key: getattr(self, key) for key, _ in PARTS})
        out["total"] = None if arena_bytes is None else arena_bytes + self.total
        return out


def fixed_ram(graph: TrainingGraph, costs: CostTable) -> FixedRam:
    """What ``graph`` keeps beside its arena on the device of ``costs``."""
    return FixedRam(params=graph.param_bytes, grads=graph.grad_bytes, optimizer_state=graph.optimizer_state_bytes,
                    batch=graph.input_bytes, outputs=graph.step_output_bytes, reserve=costs.reserve_bytes)


def counted_ram(graph: TrainingGraph, costs: CostTable, activations_only: bool) -> FixedRam:
    """What the RAM budget counts beside the arena: :func:`fixed_ram`, or nothing when the
    budget covers activations only."""
    return FixedRam() if activations_only else fixed_ram(graph, costs)
