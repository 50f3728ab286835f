"""Verify a schedule on the real model: plain autograd vs the scheduled step, side by side.

:func:`verify` runs one training step of a TracedModel with ``loss.backward()`` on a copy
of its nn.Module and one with :class:`~poet_compiler.torch_exec.executor.ScheduledStep`
(same inputs, same seed), and collects what ``poetc verify`` prints: the max absolute
difference over all parameter gradients (and whether they are bitwise equal), the
measured peak of live activation bytes against the simulator's prediction and the
budget, whether the loss and the buffer updates are bitwise equal too, and the page
file's traffic against what the schedule's page-outs and page-ins must move.
:attr:`Verification.ok` is false when any of these differ.

A random op (dropout) draws the numbers eager PyTorch draws, in the traced step
(frontends/torch/rng.py), and a recomputation of it replays its first numbers from a
stashed generator state: the scheduled step is compared with eager autograd under the same
seed. Should the traced step, run whole, draw otherwise than eager (no case is known), the
reference is that traced step instead, and :attr:`Verification.reference` says so.

With an optimizer in the step (docs/training.md) the reference is ``steps`` iterations of
``loss.backward(); opt.step()`` with the same optimizer in torch.optim, on its
single-tensor path (``foreach=False``), and the figures are the parameters (frozen ones
included) and the optimizer state after them, against as many scheduled steps. The
update ops run the aten ops of that path in its order, so they are compared bitwise.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from poet_compiler.devices.costs import CostTable
from poet_compiler.errors import ScheduleError
from poet_compiler.graph.ir import RNG_STATE_OP, TrainingGraph
from poet_compiler.schedule.program import Op, Program
from poet_compiler.schedule.simulate import simulate
from poet_compiler.torch_exec.executor import ScheduledStep

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
    expected_page_out_bytes: int
    expected_page_in_bytes: int
    scheduled_wall_s: float
    autograd_wall_s: float
    optimizer: str | None = None       # the update in the step, as a spec
    steps: int = 1
    n_params: int = 0
    params_bitwise: bool = True        # every parameter after ``steps`` steps
    max_abs_param_diff: float = 0.0
    state_bitwise: bool = True         # the optimizer state after ``steps`` steps
    max_abs_state_diff: float = 0.0
    reference: str = "autograd"        # what the step is compared with: "autograd" or "traced step"
    reference_gap: float = 0.0         # traced step run whole vs autograd, max |diff| (reference "traced step")
    n_random: int = 0                  # random ops (nodes that read a stashed generator state)
    n_replays: int = 0                 # their recomputations, replayed from the stash

    @property
    def within_budget(self) -> bool:
        return self.ram_budget_bytes is None or \
            self.measured_peak_bytes + self.fixed_bytes_counted <= self.ram_budget_bytes

    @property
    def paging_matches(self) -> bool:
        """The page file saw exactly the bytes the schedule's PAGE_OUT/PAGE_IN name: the
        storages each paged node holds (:func:`expected_page_bytes`)."""
        return (self.page_out_bytes, self.page_in_bytes) == (self.expected_page_out_bytes, self.expected_page_in_bytes)

    @property
    def failures(self) -> list[str]:
        """What differs from plain autograd or from the schedule, one phrase each."""
        checks = [
            (self.grads_bitwise, "gradients differ from autograd"),
            (self.params_bitwise, "parameters after the steps differ from torch.optim's"),
            (self.state_bitwise, "optimizer state after the steps differs from torch.optim's"),
            (self.loss_bitwise, "loss differs from autograd"),
            (self.buffers_bitwise, "buffer updates differ from autograd"),
            (self.within_budget, "measured peak exceeds the budget"),
            # The page file is the device's flash: traffic other than the schedule's
            # means the executor did not run the schedule it was given.
            (self.paging_matches, "page file traffic differs from the schedule's paging volume"),
        ]
        return [what for good, what in checks if not good]

    @property
    def ok(self) -> bool:
        return not self.failures

    def report(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(within_budget=self.within_budget, paging_matches=self.paging_matches, ok=self.ok,
                   failures=self.failures)
        return out


def node_storage_bytes(traced: TracedModel) -> list[int]:
    """Bytes of the distinct storages each node holds from COMPUTE to FREE, from the
    traced graph's tensor metadata and the executor's plan — what one PAGE_OUT of the
    node writes and one PAGE_IN reads.

    This equals the node's ``output_bytes`` except where the graph counts a storage
    twice: a coarsened group holding a multi-output op and the select that picks its
    saved statistics keeps that storage once, and an op-level multi-output op keeps the
    elements its select reads.
    """
    from poet_compiler.torch_exec.plan import build_plan, tensors_of

    plan = build_plan(traced)
    sizes = []
    for npl in plan.nodes:
        keep = dict(npl.trim)
        storages: dict[int, int] = {}
        for name in npl.kept:
            val = plan.fx_nodes[name].meta.get("val")
            if name in keep and isinstance(val, (list, tuple)):
                val = tuple(v for k, v in enumerate(val) if k in keep[name])
            tensors = tensors_of(val)
            if val is None or (not tensors and name not in keep):
                return [n.output_bytes for n in traced.graph.nodes]  # no metadata: the graph's figure
            for t in tensors:
                st = t.untyped_storage()
                storages[id(st)] = st.nbytes()
        sizes.append(sum(storages.values()))
    return sizes


def expected_page_bytes(traced: TracedModel, program: Program) -> tuple[int, int]:
    """(bytes written, bytes read) that running ``program`` must cause in the page file."""
    size = node_storage_bytes(traced)
    out = sum(size[ins.node] for ins in program.instructions if ins.op is Op.PAGE_OUT)
    back = sum(size[ins.node] for ins in program.instructions if ins.op is Op.PAGE_IN)
    return out, back


def autograd_step(traced: TracedModel, inputs: tuple[torch.Tensor, ...] | None = None,
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


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


def torch_optim_steps(traced: TracedModel, steps: int, seed: int = 0
                      ) -> tuple[list[torch.Tensor], torch.nn.Module, torch.optim.Optimizer, float]:
    """``steps`` iterations of plain autograd and torch.optim (single-tensor path) on a copy
    of the module: (losses, module, optimizer, wall s)."""
    assert traced.optimizer is not None
    model = copy.deepcopy(traced.module)
    opt = traced.optimizer.to_torch([p for p in model.parameters() if p.requires_grad])
    losses = []
    t0 = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        torch.manual_seed(seed)
        loss = traced.loss_fn(model(*traced.example_inputs), traced.target)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return losses, model, opt, time.perf_counter() - t0


def _verify_training(traced: TracedModel, program: Program, sim: Any, *, ram_budget_bytes: int | None,
                     fixed_bytes: int, page_file: str | Path | None, seed: int, steps: int) -> Verification:
    spec = traced.optimizer
    assert spec is not None
    ref_losses, ref_model, opt, auto_wall = torch_optim_steps(traced, steps, seed)
    mine = dataclasses.replace(traced, module=copy.deepcopy(traced.module), opt_state={})
    losses, peak, out_b, in_b, wall = [], 0, 0, 0, 0.0
    with ScheduledStep(mine, program, page_file=page_file) as step:
        for _ in range(steps):
            torch.manual_seed(seed)
            losses.append(step.step())
            assert step.last is not None
            peak = max(peak, step.last.peak_bytes)
            out_b, in_b, wall = step.last.page_out_bytes, step.last.page_in_bytes, wall + step.last.wall_s
    ref_params = dict(ref_model.named_parameters())
    params = dict(mine.module.named_parameters())
    param_diff = max((_max_diff(p.detach(), ref_params[n].detach()) for n, p in params.items()), default=0.0)
    params_ok = all(torch.equal(p, ref_params[n]) for n, p in params.items())
    state_ok, state_diff = True, 0.0
    for name in traced.param_names:
        for s, want in spec.torch_state(opt, ref_params[name]).items():
            got = mine.opt_state[f"{name}@{s}"]
            state_ok = state_ok and bool(torch.equal(got, want))
            state_diff = max(state_diff, _max_diff(got, want))
    ref_buffers = dict(ref_model.named_buffers())
    buffers = dict(mine.module.named_buffers())
    buffers_ok = set(buffers) == set(ref_buffers) and all(torch.equal(v, ref_buffers[n]) for n, v in buffers.items())
    exp_out, exp_in = expected_page_bytes(traced, program) if program.n_page_out or program.n_page_in else (0, 0)
    graph = traced.graph
    return Verification(
        model=graph.name, n_nodes=graph.n, n_instructions=len(program), n_grads=0, grads_bitwise=True,
        max_abs_grad_diff=0.0, loss_bitwise=all(torch.equal(a, b) for a, b in zip(losses, ref_losses)),
        buffers_bitwise=buffers_ok, measured_peak_bytes=peak, simulated_peak_bytes=sim.peak_bytes,
        arena_bytes=program.arena_bytes, ram_budget_bytes=ram_budget_bytes,
        fixed_bytes_counted=fixed_bytes,
        page_out_bytes=out_b, page_in_bytes=in_b,
        schedule_page_out_bytes=sim.page_out_bytes, schedule_page_in_bytes=sim.page_in_bytes,
        expected_page_out_bytes=exp_out, expected_page_in_bytes=exp_in,
        scheduled_wall_s=wall, autograd_wall_s=auto_wall, optimizer=spec.describe(), steps=steps,
        n_params=len(params), params_bitwise=params_ok, max_abs_param_diff=param_diff,
        state_bitwise=state_ok, max_abs_state_diff=state_diff,
    )


def verify(traced: TracedModel, program: Program, costs: CostTable, *,
           ram_budget_bytes: int | None = None, fixed_bytes: int = 0,
           page_file: str | Path | None = None, seed: int = 0, steps: int = 3) -> Verification:
    """Run both steps and the simulator; raise ScheduleError if the program is invalid.
    ``fixed_bytes``: what ``ram_budget_bytes`` counts beside the live activations (the
    report's ``ram_split`` less the arena; 0 with activations only). ``steps``: with an
    optimizer in the step, how many steps of each are compared."""
    traced.require_weights("verify")
    graph = traced.graph
    if program.n_nodes != graph.n:
        raise ScheduleError(f"the schedule is for a graph of {program.n_nodes} nodes but {graph.name!r} "
                            f"traces to {graph.n} nodes (another model, granularity or batch?)")
    sim = simulate(graph, costs, program)
    if traced.optimizer is not None:
        return _verify_training(traced, program, sim, ram_budget_bytes=ram_budget_bytes, fixed_bytes=fixed_bytes,
                                page_file=page_file, seed=seed, steps=steps)
    ref_loss, ref_grads, ref_buffers, auto_wall = autograd_step(traced, seed=seed)
    with ScheduledStep(traced, program, page_file=page_file) as step:
        torch.manual_seed(seed)
        loss, grads, updates = step.run_full()
        stats = step.last
    assert stats is not None
    # Every buffer, updated or not, must end as autograd's copy left it.
    after = {name: b.detach() for name, b in traced.module.named_buffers()}
    after.update(updates)
    bitwise, max_diff = _compare(grads, ref_grads)
    randoms = random_nodes(graph)
    reference, gap = "autograd", 0.0
    if randoms and not bitwise:
        whole_loss, whole_grads, whole_buffers = traced_step(traced, seed)
        same_draws, gap = _compare(whole_grads, ref_grads)
        if not same_draws:
            reference, ref_loss, ref_grads = "traced step", whole_loss, whole_grads
            ref_buffers = {**ref_buffers, **whole_buffers}
            bitwise, max_diff = _compare(grads, ref_grads)
    names = sorted(set(grads) | set(ref_grads))
    exp_out, exp_in = expected_page_bytes(traced, program) if program.n_page_out or program.n_page_in else (0, 0)
    buffers_ok = set(after) == set(ref_buffers) and all(torch.equal(v, ref_buffers[n]) for n, v in after.items())
    return Verification(
        model=graph.name, n_nodes=graph.n, n_instructions=len(program), n_grads=len(names),
        grads_bitwise=bitwise, max_abs_grad_diff=max_diff, loss_bitwise=bool(torch.equal(loss, ref_loss)),
        buffers_bitwise=buffers_ok,
        measured_peak_bytes=stats.peak_bytes, simulated_peak_bytes=sim.peak_bytes,
        arena_bytes=program.arena_bytes, ram_budget_bytes=ram_budget_bytes,
        fixed_bytes_counted=fixed_bytes,
        page_out_bytes=stats.page_out_bytes, page_in_bytes=stats.page_in_bytes,
        schedule_page_out_bytes=sim.page_out_bytes, schedule_page_in_bytes=sim.page_in_bytes,
        expected_page_out_bytes=exp_out, expected_page_in_bytes=exp_in,
        scheduled_wall_s=stats.wall_s, autograd_wall_s=auto_wall, reference=reference, reference_gap=gap,
        n_random=len(randoms), n_replays=sum(ins.op is Op.COMPUTE and ins.node in randoms
                                             for ins in program.instructions) - len(randoms),
    )


def _compare(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> tuple[bool, float]:
    """(bitwise equal, max |diff|) of two gradient dicts (a missing or misshapen one: inf)."""
    bitwise, max_diff = True, 0.0
    for name in sorted(set(got) | set(want)):
        a, b = got.get(name), want.get(name)
        if a is None or b is None or a.shape != b.shape:
            bitwise, max_diff = False, float("inf")
            continue
        if not torch.equal(a, b):
            bitwise = False
        max_diff = max(max_diff, _max_diff(a, b))
    return bitwise, max_diff


def random_nodes(graph: TrainingGraph) -> set[int]:
    """Nodes that read a random op's stashed generator state: the random ops."""
    return {nd.id for nd in graph.nodes if any(graph.nodes[j].op == RNG_STATE_OP for j in nd.inputs)}


def traced_step(traced: TracedModel, seed: int) -> tuple[torch.Tensor, dict[str, torch.Tensor],
                                                         dict[str, torch.Tensor]]:
    """The traced joint graph run whole, as traced, under ``seed``: (loss, grads, buffer updates)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        outs = traced.gm(*traced.flat_args())
    g = len(traced.grad_names)
    return (outs[0], dict(zip(traced.grad_names, outs[1:1 + g])),
            dict(zip(traced.update_names, outs[1 + g:])))


__all__ = ["Verification", "autograd_step", "torch_optim_steps", "verify"]
