"""What PyTorch's checkpointing does with a plan, written down as a Program.

One eager ``loss_fn(m(x), y).backward()`` of a :class:`~.torch_plan.TorchPlan`,
instruction by instruction, over the compiled graph's nodes (:func:`pytorch_program`), so
that the independent simulator (``schedule/simulate.py``) gives the plan's peak, time and
energy (:func:`simulate_plan`): the plan that runs is the one whose figures are reported,
not the schedule it came from.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import TYPE_CHECKING

from poet_compiler.errors import InternalError
from poet_compiler.schedule.program import Instruction, Op, Program
from poet_compiler.schedule.simulate import simulate
from poet_compiler.torch_exec.analysis import NO_NODE

if TYPE_CHECKING:
    from poet_compiler.devices.costs import CostTable
    from poet_compiler.torch_exec.analysis import Analysis
    from poet_compiler.torch_exec.torch_plan import TorchPlan


class _Builder:
    """Emits the instructions of one eager step of a plan (see the module docstring).

    Every live node carries the reasons it is alive; it is freed when the last one goes:
    ``("rd", k)`` forward reader ``k`` still to run, ``("G", g)`` saved by autograd node
    ``g`` (until its last backward op), ``("frame", r)`` input of region ``r`` (until the
    region's last saved tensor is used), ``("cache", r)`` cached by ``MUST_SAVE`` in ``r``,
    ``("rloc", r)`` a local of ``r``'s recomputation, ``("own", g)`` a value computed inside
    autograd node ``g`` (until it returns), ``("write",)`` a page-out in flight.
    """

    def __init__(self, an: Analysis, plan: TorchPlan) -> None:
        self.an, self.plan = an, plan
        self.out: list[Instruction] = []
        self.why: dict[int, set[tuple]] = defaultdict(set)
        self.live: set[int] = set()
        self.on_flash: set[int] = set()
        self.in_flight = False
        self.writing: list[int] = []

    # -- primitives --------------------------------------------------------------------
    def compute(self, i: int) -> None:
        if i in self.live:
            raise InternalError(f"plan model: node {i} {self.an.graph.nodes[i].name!r} computed while resident")
        self.out.append(Instruction(Op.COMPUTE, i))
        self.live.add(i)

    def hold(self, i: int, why: tuple) -> None:
        if i in self.live:
            self.why[i].add(why)

    def release(self, i: int, why: tuple) -> None:
        reasons = self.why.get(i)
        if reasons is not None:
            reasons.discard(why)
        self.settle(i)

    def settle(self, i: int) -> None:
        if i in self.live and not self.why.get(i):
            self.out.append(Instruction(Op.FREE, i))
            self.live.discard(i)
            self.why.pop(i, None)

    def fence(self) -> None:
        self.out.append(Instruction(Op.FENCE))
        self.in_flight = False
        for i in self.writing:
            self.on_flash.add(i)
            self.release(i, ("write",))
        self.writing = []

    def page_out(self, i: int) -> None:
        if self.plan.dma and self.in_flight:
            self.fence()          # the pager keeps one page-out in flight
        self.out.append(Instruction(Op.PAGE_OUT, i))
        self.writing.append(i)
        self.hold(i, ("write",))
        self.in_flight = True
        if not self.plan.dma:
            self.fence()

    def page_in(self, i: int) -> None:
        if i in self.live or i not in self.on_flash:
            return
        self.out.append(Instruction(Op.PAGE_IN, i))
        self.live.add(i)
        self.in_flight = True

    # -- the step ----------------------------------------------------------------------
    def run(self) -> Program:
        an, plan = self.an, self.plan
        regions = plan.regions
        self.region_of: dict[int, int] = {}
        self.policy_save: set[int] = set()
        for r, region in enumerate(regions):
            for i in an.region_nodes(region):
                self.region_of[i] = r
                if an.op_of[i] not in region.recompute:
                    self.policy_save.add(i)
        # Per region: its nodes, inputs, the autograd nodes whose saved tensors are its holders.
        self.r_nodes = [an.region_nodes(region) for region in regions]
        self.r_inputs: list[set[int]] = []
        self.input_of: dict[int, list[int]] = defaultdict(list)    # node -> regions it is an input of
        self.r_holders: list[set[int]] = []
        for nodes in self.r_nodes:
            inside = set(nodes)
            self.r_inputs.append({v for i in nodes for v in an.graph.nodes[i].inputs if v not in inside})
            for v in self.r_inputs[-1]:
                self.input_of[v].append(len(self.r_inputs) - 1)
            packing = [i for i in nodes if i in an.has_saves]
            self.r_holders.append({g for g in packing if an.backward_nodes_of.get(g)})
        self._forward()
        self._backward()
        for i in sorted(self.live):
            self.out.append(Instruction(Op.FREE, i))
        return Program(n_nodes=an.graph.n, instructions=tuple(self.out))

    def _forward(self) -> None:
        an = self.an
        started: set[int] = set()
        for i in an.forward + an.loss:
            r = self.region_of.get(i)
            if r is not None and r not in started:
                started.add(r)
                for v in self.r_inputs[r]:
                    self.hold(v, ("frame", r))
            self.compute(i)
            for r2 in self.input_of.get(i, ()):
                if r2 in started:     # a random op's stash, computed inside its region
                    self.hold(i, ("frame", r2))
            for k in an.readers[i]:
                # Forward readers hold it by reference; a backward op that no autograd
                # node runs (the seed gradient reads the loss) through the caller's.
                if an.kind[k] in ("forward", "loss") or an.autograd_node_of.get(k) == NO_NODE:
                    self.hold(i, ("rd", k))
            if r is not None and i in self.policy_save:
                self.hold(i, ("cache", r))
            # An autograd node outside any region keeps what it saves (paged: a handle),
            # from its op on (a select node, computed right after its op, from then).
            pairs = [(i, v) for v in an.saves.get(i, ()) if v < i] + \
                [(g, i) for g in an.saved_by.get(i, ()) if g <= i]
            for g, v in pairs:
                if g not in self.region_of and v not in self.plan.paged:
                    self.hold(v, ("G", g))
            if i in self.plan.paged:
                self.page_out(i)      # the pager writes a paged node as soon as its op returns
            for v in set(an.graph.nodes[i].inputs):
                self.release(v, ("rd", i))
            self.settle(i)
            if i == an.forward[-1]:
                # The end of the module's forward: page-outs are waited for; a region
                # without saved tensors has no frame left.
                if self.in_flight:
                    self.fence()
                for r2 in range(len(self.r_nodes)):
                    if not self.r_holders[r2]:
                        self._frame_dies(r2)

    def _frame_dies(self, r: int) -> None:
        for v in self.r_inputs[r]:
            self.release(v, ("frame", r))
        for v in self.r_nodes[r]:
            self.release(v, ("cache", r))

    def _recompute(self, r: int) -> None:
        an = self.an
        nodes = self.r_nodes[r]
        # Every op up to the early stop runs again (a select node with its op).
        last = an.rerun_until(nodes)
        run = [i for i in nodes if an.fwd_pos[an.op_of[i]] <= last]
        runset = set(run)
        last_use: dict[int, int] = {}
        for i in run:
            for v in an.graph.nodes[i].inputs:
                last_use[v] = i
        holders = self.r_holders[r]
        for i in run:
            if i not in self.policy_save:
                self.compute(i)
                self.hold(i, ("rloc", r))
            else:
                if i not in self.live:
                    raise InternalError(f"plan model: cached node {i} is not resident at its region's recompute")
                self.hold(i, ("rloc", r))
                self.release(i, ("cache", r))
            for g in an.saved_by.get(i, ()):
                if g in holders:       # every holder is packed again (the stop is at the last pack)
                    self.hold(i, ("G", g))
            for v in set(an.graph.nodes[i].inputs):
                if last_use.get(v) == i and v in runset:
                    self.release(v, ("rloc", r))
        for i in run:     # the early stop: the recomputation's locals are gone
            self.release(i, ("rloc", r))

    def _backward(self) -> None:
        an, plan = self.an, self.plan
        recomputed: set[int] = set()
        started: set[int] = set()
        frame_left = [set(h) for h in self.r_holders]
        prefetch_at: dict[int, list[int]] = defaultdict(list)
        for v, fx_name in plan.prefetch.items():
            prefetch_at[an.owner.get(fx_name, NO_NODE)].append(v)
        unpacked: set[int] = set()
        for b in an.backward:
            g = an.autograd_node_of[b]
            if g != NO_NODE and g not in started:
                started.add(g)
                for v in sorted(prefetch_at.get(g, ())):
                    self.page_in(v)
                r = self.region_of.get(g)
                if r is not None and g in self.r_holders[r] and r not in recomputed:
                    recomputed.add(r)
                    self._recompute(r)
                if r is None:
                    need = [v for v in an.saves.get(g, ()) if v in plan.paged and v not in unpacked]
                    if need:
                        for v in sorted(need):
                            self.page_in(v)
                        if self.in_flight:
                            self.fence()
                        for v in need:
                            unpacked.add(v)
                            for g2 in an.saved_by[v]:
                                if g2 not in self.region_of:
                                    self.hold(v, ("G", g2))
            self.compute(b)
            self.hold(b, ("own", g if g != NO_NODE else ("b", b)))
            for k in an.readers[b]:
                self.hold(b, ("rd", k))
            for v in set(an.graph.nodes[b].inputs):
                self.release(v, ("rd", b))
            if g == NO_NODE:
                self.release(b, ("own", ("b", b)))
            elif an.backward_nodes_of[g][-1] == b:
                self._autograd_node_done(g, frame_left)

    def _autograd_node_done(self, g: int, frame_left: list[set[int]]) -> None:
        an = self.an
        for b2 in an.backward_nodes_of[g]:
            self.release(b2, ("own", g))
        for v in an.saves.get(g, ()):
            self.release(v, ("G", g))
        r = self.region_of.get(g)
        if r is not None and g in frame_left[r]:
            frame_left[r].discard(g)
            if not frame_left[r]:
                self._frame_dies(r)


def pytorch_program(an: Analysis, plan: TorchPlan) -> Program:
    """What one eager ``loss_fn(m(x), y).backward()`` of ``plan`` does, over the graph's nodes."""
    return _Builder(an, plan).run()


def simulate_plan(an: Analysis, plan: TorchPlan, costs: CostTable) -> TorchPlan:
    """``plan`` with its Program and the independent simulator's replay of it."""
    program = pytorch_program(an, plan)
    return dataclasses.replace(plan, program=program, simulation=simulate(an.graph, costs, program))



__all__ = ["pytorch_program", "simulate_plan"]
