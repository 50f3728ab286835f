"""The plan PyTorch runs for a schedule: checkpoint regions, per-op policies, paged tensors.

``Compilation.checkpointed()`` (docs/pytorch.md) runs the forward under
``torch.utils.checkpoint`` with selective-checkpoint policies and saved-tensor hooks. That
machinery can run fewer schedules than poetc's Programs: a checkpoint region recomputes
its dropped values once, when backward first unpacks one of its saved tensors, and holds
its inputs until its last saved tensor is used; a value saved by an autograd node outside
any region is kept until that node has run. A :class:`TorchPlan` is what such a run does;
the modules beside this one make it:

* :mod:`.analysis`: the facts of the traced step a plan needs (which autograd node runs
  each backward op, what it saves);
* :mod:`.regions`: the regions and policies that drop a set of values (:func:`plan_from`);
* :mod:`.checkpoint_model`: what PyTorch then does, instruction by instruction, as a
  Program over the same graph, and the independent simulator's replay of it;
* :mod:`.plan_search`: the plan for a schedule, searched to fit the budget (:func:`derive_plan`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from poet_compiler.schedule.program import Program
    from poet_compiler.schedule.simulate import Simulation


@dataclass(frozen=True)
class Region:
    """One ``torch.utils.checkpoint`` call: ``ops`` (FX names, forward order) run inside
    it; the ops in ``recompute`` are ``MUST_RECOMPUTE``, the other ATen calls ``MUST_SAVE``."""

    ops: tuple[str, ...]
    recompute: frozenset[str]
    rng: bool = False            # a random op inside: the RNG state is stashed for the recompute


@dataclass(frozen=True)
class TorchPlan:
    """What ``checkpointed()`` runs, and the simulator's figures of it (a value: the
    search and the simulation make new plans, :func:`dataclasses.replace`).

    ``program`` is what PyTorch does, written over the compiled graph's nodes;
    ``simulation`` its replay. ``prefetch[i]`` (DMA devices): the FX op whose autograd
    node's pre-hook starts reading node ``i`` back, ahead of the first node that unpacks it.
    """

    regions: tuple[Region, ...]
    paged: frozenset[int]
    dma: bool
    prefetch: Mapping[int, str] = field(default_factory=dict)
    program: Program | None = None
    simulation: Simulation | None = None
    source_recomputes: int = 0     # recomputations in the schedule the plan came from
    # FX ops the schedule itself recomputes (its forward nodes computed again): under
    # torch.compile the partitioner places each recomputation where backward needs it, so
    # the compiled forward can follow the schedule rather than the eager plan.
    schedule_recompute: frozenset[str] = frozenset()
    notes: tuple[str, ...] = ()    # what the plan could not follow, one phrase each

    @property
    def peak_bytes(self) -> int:
        assert self.simulation is not None
        return self.simulation.peak_bytes

    @property
    def runtime_s(self) -> float:
        assert self.simulation is not None
        return self.simulation.runtime_s

    def summary(self) -> dict[str, Any]:
        sim = self.simulation
        return {
            "regions": len(self.regions),
            "recomputed_ops": sum(len(r.recompute) for r in self.regions),
            "paged_nodes": len(self.paged),
            "peak_bytes": sim.peak_bytes if sim else None,
            "runtime_s": sim.runtime_s if sim else None,
            "energy_j": sim.energy_j if sim else None,
            "n_recompute": sim.n_recompute if sim else None,
            "page_out_bytes": sim.page_out_bytes if sim else None,
        }



__all__ = ["Region", "TorchPlan"]
