"""Verify a schedule on the real model: plain autograd vs the scheduled step, side by side.

:func:`verify` runs one training step of a TracedModel with ``loss.backward()`` on a copy
of its nn.Module and one with :class:`~poet_compiler.codegen.executor.ScheduledStep`
(same inputs, same seed), and collects what ``poetc verify`` prints: the max absolute
difference over all parameter gradients (and whether they are bitwise equal), the
measured peak of live activation bytes against the simulator's prediction and the
budget, and the page file's traffic against the schedule's paging volume.
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from poet_compiler.codegen.executor import ScheduledStep
from poet_compiler.devices.costs import CostTable
from poet_compiler.errors import ScheduleError
from poet_compiler.schedule.program import Program
from poet_compiler.schedule.simulate import simulate

if TYPE_CHECKING:
    from poet_compiler.frontends.torch.traced import TracedModel


@dataclass(frozen=True)
class Verification:
    """Figures of one verification; ``ok`` is what the exit code reports."""

    model: str
    n_nodes: int
    n_instructions: int
    n_grads: int
    grads_bitwise: bool
    max_abs_grad_diff: float
    loss_bitwise: bool
    buffers_bitwise: bool
    measured_peak_bytes: int
    simulated_peak_bytes: int
    arena_bytes: int | None
    ram_budget_bytes: int | None
    fixed_bytes_counted: int
    page_out_bytes: int
    page_in_bytes: int
    schedule_page_out_bytes: int
    schedule_page_in_bytes: int
    scheduled_wall_s: float
    autograd_wall_s: float

    @property
    def within_budget(self) -> bool:
        return self.ram_budget_bytes is None or \
            self.measured_peak_bytes + self.fixed_bytes_counted <= self.ram_budget_bytes

    @property
    def paging_matches(self) -> bool:
        return (self.page_out_bytes, self.page_in_bytes) == (self.schedule_page_out_bytes, self.schedule_page_in_bytes)

    @property
    def ok(self) -> bool:
        return self.grads_bitwise and self.within_budget

    def report(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(within_budget=self.within_budget, paging_matches=self.paging_matches, ok=self.ok)
        return out


def autograd_step(traced: "TracedModel", inputs: tuple[torch.Tensor, ...] | None = None,
                  target: torch.Tensor | None = None, seed: int = 0
                  ) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor], float]:
    """Plain ``loss.backward()`` on a copy of the module: (loss, grads, buffers, wall s)."""
    model = copy.deepcopy(traced.module)
    model.zero_grad(set_to_none=True)
    ins = traced.example_inputs if inputs is None else inputs
    tgt = traced.target if target is None else target
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    loss = traced.loss_fn(model(*ins), tgt)
    loss.backward()
    wall = time.perf_counter() - t0
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads, {n: b.detach() for n, b in model.named_buffers()}, wall


def verify(traced: "TracedModel", program: Program, costs: CostTable, *,
           ram_budget_bytes: int | None = None, count_fixed: bool = False,
           page_file: str | Path | None = None, seed: int = 0) -> Verification:
    """Run both steps and the simulator; raise ScheduleError if the program is invalid."""
    graph = traced.graph
    if program.n_nodes != graph.n:
        raise ScheduleError(f"the schedule is for a graph of {program.n_nodes} nodes but {graph.name!r} "
                            f"traces to {graph.n} nodes (another model, granularity or batch?)")
    sim = simulate(graph, costs, program)
    ref_loss, ref_grads, ref_buffers, auto_wall = autograd_step(traced, seed=seed)
    with ScheduledStep(traced, program, page_file=page_file) as step:
        torch.manual_seed(seed)
        loss, grads, updates = step.run_full()
        stats = step.last
    assert stats is not None
    names = sorted(set(grads) | set(ref_grads))
    bitwise = True
    max_diff = 0.0
    for name in names:
        a, b = grads.get(name), ref_grads.get(name)
        if a is None or b is None or a.shape != b.shape:
            bitwise, max_diff = False, float("inf")
            continue
        if not torch.equal(a, b):
            bitwise = False
        max_diff = max(max_diff, float((a.double() - b.double()).abs().max()) if a.numel() else 0.0)
    buffers_ok = all(name in ref_buffers and torch.equal(value, ref_buffers[name]) for name, value in updates.items())
    return Verification(
        model=graph.name, n_nodes=graph.n, n_instructions=len(program), n_grads=len(names),
        grads_bitwise=bitwise, max_abs_grad_diff=max_diff, loss_bitwise=bool(torch.equal(loss, ref_loss)),
        buffers_bitwise=buffers_ok,
        measured_peak_bytes=stats.peak_bytes, simulated_peak_bytes=sim.peak_bytes,
        arena_bytes=program.arena_bytes, ram_budget_bytes=ram_budget_bytes,
        fixed_bytes_counted=graph.fixed_bytes if count_fixed else 0,
        page_out_bytes=stats.page_out_bytes, page_in_bytes=stats.page_in_bytes,
        schedule_page_out_bytes=sim.page_out_bytes, schedule_page_in_bytes=sim.page_in_bytes,
        scheduled_wall_s=stats.wall_s, autograd_wall_s=auto_wall,
    )


__all__ = ["Verification", "autograd_step", "verify"]
