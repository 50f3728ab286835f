"""The plan PyTorch runs for a schedule: checkpoint regions, per-op policies, paged tensors.

``Compilation.checkpointed()`` (docs/pytorch.md) runs the forward under
``torch.utils.checkpoint`` with selective-checkpoint policies and saved-tensor hooks. That
machinery can run fewer schedules than poetc's Programs: a checkpoint region recomputes
its dropped values once, when backward first unpacks one of its saved tensors, and holds
its inputs until its last saved tensor is used; a value saved by an autograd node outside
any region is kept until that node has run. This module

* derives such a plan from any Program (:func:`derive_plan`): the values the schedule
  recomputes become ``MUST_RECOMPUTE`` ops in regions that also hold every op whose
  autograd node saves them, the values it pages become page-outs of saved-tensor hooks;
* writes down what PyTorch then does, instruction by instruction, as a Program over the
  same graph (:func:`pytorch_program`), so that the independent simulator
  (``schedule/simulate.py``) gives the plan's peak, time and energy: the plan that runs is
  the one whose figures are reported, not the schedule it came from.

This is a post-processing step outside the optimizer, by choice (docs/pytorch.md, "What
PyTorch can run"): the optimizer's stages stay as they are, and what is reported for the
PyTorch run is the simulator's replay of the plan that runs. The schedule's lower bound
stays a lower bound on the plan's energy (a plan is a Program).

Everything is at op granularity: a scheduling node is one ATen op (with the views and
``getitem``s that fold into it). The autograd node that ran each backward op is read from
the traced graph (``poet_grad_of`` / ``poet_grad_fn``, frontends/torch/tracing.py).
"""

from __future__ import annotations

import functools
import operator
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from poet_compiler.errors import InternalError, PoetError
from poet_compiler.frontends.torch.opinfo import is_view
from poet_compiler.frontends.torch.rng import draws, is_stash
from poet_compiler.frontends.torch.tracing import GRAD_FN, GRAD_OF, PHASE
from poet_compiler.schedule.program import Instruction, Op, Program
from poet_compiler.schedule.simulate import Simulation, simulate

if TYPE_CHECKING:
    from poet_compiler.devices.costs import CostTable
    from poet_compiler.frontends.torch.traced import TracedModel

#: Autograd nodes whose creator is not a scheduling node: prelude ops (views of parameters)
#: and backward ops that no autograd node ran (the seed gradient, engine accumulations).
NO_NODE = -1


def _phase(n: torch.fx.Node) -> str | None:
    return (n.meta.get("custom") or {}).get(PHASE)


def getitem_of(n: torch.fx.Node) -> tuple[str, int] | None:
    """(the multi-output op's FX name, the index) of a ``getitem`` node; None otherwise."""
    if n.op == "call_function" and n.target is operator.getitem and isinstance(n.args[0], torch.fx.Node) \
            and isinstance(n.args[1], int):
        return n.args[0].name, n.args[1]
    return None


def _is_alias(n: torch.fx.Node) -> bool:
    return n.op == "call_function" and (n.target is operator.getitem or is_view(n)
                                        or n.target is torch.ops.aten.detach.default)


@dataclass(frozen=True)
class Region:
    """One ``torch.utils.checkpoint`` call: ``ops`` (FX names, forward order) run inside
    it; the ops in ``recompute`` are ``MUST_RECOMPUTE``, the other ATen calls ``MUST_SAVE``."""

    ops: tuple[str, ...]
    recompute: frozenset[str]
    rng: bool = False            # a random op inside: the RNG state is stashed for the recompute


@dataclass
class TorchPlan:
    """What ``checkpointed()`` runs, and the simulator's figures of it.

    ``program`` is what PyTorch does, written over the compiled graph's nodes;
    ``simulation`` its replay. ``prefetch[i]`` (DMA devices): the FX op whose autograd
    node's pre-hook starts reading node ``i`` back, ahead of the first node that unpacks it.
    """

    regions: tuple[Region, ...]
    paged: frozenset[int]
    dma: bool
    prefetch: dict[int, str] = field(default_factory=dict)
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


class Analysis:
    """The facts of a traced step that the plan and its Program need (op granularity)."""

    def __init__(self, tm: TracedModel) -> None:
        if tm.granularity != "op":
            raise PoetError(f"{tm.graph.name}: checkpointed() needs a graph at op granularity "
                            f"(compiled at {tm.granularity!r}); compile with granularity='op'")
        if tm.graph.has_updates:
            raise PoetError(f"{tm.graph.name}: checkpointed() runs forward and backward through autograd and leaves "
                            "the update to your optimizer; compile without optimizer= and call opt.step()")
        self.tm = tm
        graph = tm.graph
        self.graph = graph
        gm_nodes = list(tm.gm.graph.nodes)
        self.fx: dict[str, torch.fx.Node] = {n.name: n for n in gm_nodes}
        self.order: dict[str, int] = {n.name: k for k, n in enumerate(gm_nodes)}
        self.prelude = set(tm.prelude_fx)
        owner = tm.fx_owner
        self.owner = owner
        kinds = [nd.kind for nd in graph.nodes]
        self.kind = kinds
        self.forward = [i for i, k in enumerate(kinds) if k == "forward"]
        self.loss = [i for i, k in enumerate(kinds) if k == "loss"]
        self.backward = [i for i, k in enumerate(kinds) if k == "backward"]
        if self.forward != list(range(len(self.forward))) or \
                self.loss != list(range(len(self.forward), len(self.forward) + len(self.loss))):
            raise InternalError(f"{graph.name}: forward and loss nodes are not the graph's first nodes")
        # The op of each node: its first FX name (a select node: the op it selects from).
        self.op_of: list[str] = []
        for names in tm.node_fx:
            first = self.fx[names[0]]
            if first.target is operator.getitem and isinstance(first.args[0], torch.fx.Node):
                self.op_of.append(first.args[0].name)
            else:
                self.op_of.append(names[0])
        # Autograd nodes: the op that created sequence number s, per scheduling node.
        creator: dict[int, str] = {}
        for n in gm_nodes:
            c = n.meta.get("custom") or {}
            if GRAD_FN in c and n.op == "call_function" and n.target is not operator.getitem:
                creator.setdefault(int(c[GRAD_FN]), n.name)
        self.creator_fx = creator

        def grad_node(fx_name: str) -> tuple[int, str | None]:
            """(scheduling node of the op whose autograd node ran this backward op, its FX name)."""
            n = self.fx[fx_name]
            if n.target is operator.getitem and isinstance(n.args[0], torch.fx.Node):
                n = n.args[0]
            seq = (n.meta.get("custom") or {}).get(GRAD_OF)
            op = creator.get(int(seq)) if seq is not None else None
            if op is None:
                return NO_NODE, None
            return owner.get(op, NO_NODE), op

        # G(b): the autograd node (by its creator's scheduling node) that runs backward node b.
        self.G: dict[int, int] = {}
        self.G_fx: dict[int, str | None] = {}
        for b in self.backward:
            g, op = grad_node(tm.node_fx[b][0])
            self.G[b], self.G_fx[b] = g, op
        # Backward nodes of each autograd node, in order; what it saves.
        self.bnodes: dict[int, list[int]] = defaultdict(list)
        for b in self.backward:
            if self.G[b] != NO_NODE:
                self.bnodes[self.G[b]].append(b)
        self.saves: dict[int, set[int]] = defaultdict(set)          # g -> forward/loss nodes it saves
        self.saved_by: dict[int, set[int]] = defaultdict(set)       # v -> autograd nodes saving v
        for b in self.backward:
            g = self.G[b]
            if g == NO_NODE:
                continue
            for v in graph.nodes[b].inputs:
                if kinds[v] in ("forward", "loss"):
                    self.saves[g].add(v)
                    self.saved_by[v].add(g)
        # Whether an autograd node saves any tensor at all (parameters and inputs count: a
        # checkpoint packs them too), from the FX reads of its backward ops.
        self.has_saves: set[int] = set()
        for n in gm_nodes:
            if n.op != "call_function" or _phase(n) != "backward":
                continue
            g, _ = grad_node(n.name)
            if g == NO_NODE or g in self.has_saves:
                continue
            for a in n.all_input_nodes:
                if a.op in ("placeholder", "get_attr") or _phase(a) in ("forward", "loss"):
                    self.has_saves.add(g)
                    break
        self.readers: list[list[int]] = [[] for _ in graph.nodes]
        for k, nd in enumerate(graph.nodes):
            for v in nd.inputs:
                self.readers[v].append(k)
        # The forward FX ops the module's forward runs, in order (prelude excluded: it is
        # run before the regions that read it). Aliases nobody in the forward reads (the
        # detach of a saved output) are what autograd did, not the module: left out.
        needed: set[str] = set()
        roots = [x for x, is_fx in zip(tm.out_leaves, tm.out_is_fx) if is_fx and x is not None]
        out_node = next(n for n in gm_nodes if n.op == "output")
        outs = list(out_node.args[0])
        g_count = len(tm.grad_names)
        self.update_fx: list[str] = [outs[1 + g_count + k].name for k in range(len(tm.update_names))]
        roots += self.update_fx
        stack = [self.fx[r] for r in roots]
        while stack:
            n = stack.pop()
            if n.name in needed or n.op != "call_function":
                continue
            needed.add(n.name)
            stack.extend(n.all_input_nodes)
        # A random op's state stash is poetc's (checkpoint stashes its own): not run.
        self.fwd_ops: list[str] = [
            n.name for n in gm_nodes
            if n.op == "call_function" and _phase(n) == "forward" and n.name not in self.prelude
            and (n.name in needed or not _is_alias(n)) and not is_stash(n)
        ]
        self.prelude_fwd: list[str] = [name for name in tm.prelude_fx if _phase(self.fx[name]) == "forward"
                                       and name in needed]
        self.fwd_pos: dict[str, int] = {name: k for k, name in enumerate(self.fwd_ops)}
        self.stashes = {i for i in self.forward if is_stash(self.fx[self.op_of[i]])}
        missing = [i for i in self.forward if self.op_of[i] not in self.fwd_pos and i not in self.stashes]
        if missing:
            raise InternalError(f"{graph.name}: forward node {missing[0]} {graph.nodes[missing[0]].name!r} "
                                "is not run by the module's forward")

    def rerun_until(self, nodes: list[int]) -> int:
        """Forward position of the last op a region of ``nodes`` runs again when recomputed
        (-1: none). Non-reentrant checkpointing stops at the last pack: an autograd node
        saves its op's inputs before the kernel runs and its outputs after, so the last
        packing op runs again only when it saves an output of its own."""
        packing = [i for i in nodes if i in self.has_saves]
        if not packing:
            return -1
        last = packing[-1]
        pos = self.fwd_pos[self.op_of[last]]
        own = any(self.op_of[v] == self.op_of[last] for v in self.saves.get(last, ()))
        return pos if own else pos - 1

    @functools.cached_property
    def step_plan(self) -> Any:
        """The executor's plan (what each node keeps): codegen/plan.py."""
        from poet_compiler.codegen.plan import build_plan

        return build_plan(self.tm)

    # -- regions ------------------------------------------------------------------------
    def region_nodes(self, region: Region) -> list[int]:
        """Forward scheduling nodes whose op runs inside ``region``, in order."""
        inside = set(region.ops)
        return [i for i in self.forward if self.op_of[i] in inside]

    def is_random(self, name: str) -> bool:
        return draws(self.fx[name])


# -- what PyTorch does, as a Program ------------------------------------------------------------
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
            self.r_holders.append({g for g in packing if an.bnodes.get(g)})
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
                if an.kind[k] in ("forward", "loss") or an.G.get(k) == NO_NODE:
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
            g = an.G[b]
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
            elif an.bnodes[g][-1] == b:
                self._autograd_node_done(g, frame_left)

    def _autograd_node_done(self, g: int, frame_left: list[set[int]]) -> None:
        an = self.an
        for b2 in an.bnodes[g]:
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
    """Fill in ``plan.program`` and ``plan.simulation`` (the independent simulator's replay)."""
    plan.program = pytorch_program(an, plan)
    plan.simulation = simulate(an.graph, costs, plan.program)
    return plan


# -- from a schedule to a plan ------------------------------------------------------------------
def _regions_for(an: Analysis, dropped: set[int]) -> tuple[list[Region], list[str]]:
    """Regions and policies that drop exactly ``dropped`` (forward op nodes): see
    :func:`derive_plan`."""
    fwd = set(an.forward)
    notes: list[str] = []
    parent = {i: i for i in an.forward}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(a: int, b: int) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    members: dict[int, set[int]] = {}
    for v in dropped:
        group = {v} | {k for k in an.readers[v] if an.op_of[k] == an.op_of[v]}     # its select nodes
        for x in list(group):
            group |= {g for g in an.saved_by.get(x, ()) if g in fwd}
            # A dropped value read by another dropped one is recomputed for it: in another
            # region it would be that region's input, held by its frame.
            group |= {k for k in an.readers[x] if k in dropped}
        for x in group:
            union(v, x)
        members[v] = group
    groups: dict[int, set[int]] = defaultdict(set)
    for v, group in members.items():
        groups[find(v)] |= group
    spans = sorted((min(an.fwd_pos[an.op_of[i]] for i in m), max(an.fwd_pos[an.op_of[i]] for i in m))
                   for m in groups.values())
    merged: list[list[int]] = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    ops_all = an.fwd_ops
    region_sets: list[set[int]] = []
    slices: list[tuple[str, ...]] = []
    for lo, hi in merged:
        # The getitems right after the last op belong with it.
        while hi + 1 < len(ops_all):
            gi = getitem_of(an.fx[ops_all[hi + 1]])
            if gi is None or an.fwd_pos.get(gi[0], -1) < lo:
                break
            hi += 1
        ops = tuple(ops_all[lo:hi + 1])
        slices.append(ops)
        region_sets.append(set(an.region_nodes(Region(ops=ops, recompute=frozenset()))))
    region_of = {i: r for r, rs in enumerate(region_sets) for i in rs}
    final: list[Region] = []
    for r, ops in enumerate(slices):
        inside = region_sets[r]
        nodes = sorted(inside)
        last = an.rerun_until(nodes)         # forward position of the last op run again
        recompute: set[str] = set()
        by_op: dict[str, list[int]] = defaultdict(list)      # an op and its select nodes
        for i in nodes:
            by_op[an.op_of[i]].append(i)
        # Last op first: whether an op is needed at the recomputation depends on whether
        # the ops after it that read it run again.
        for op, sel in reversed(list(by_op.items())):
            i = sel[0]
            # Alive at the recomputation anyway: saved outside this region (by an autograd
            # node there, or as another region's input): recomputing would make a copy.
            alive_anyway = any(g not in inside for s_ in sel for g in an.saved_by.get(s_, ())) or \
                any(region_of.get(k, r) != r for s_ in sel for k in an.readers[s_])
            if i in dropped and not alive_anyway:
                recompute.add(op)
                continue
            if i in dropped:
                notes.append(f"node {i} is alive at its region's recomputation: kept")
            if an.fwd_pos[op] > last:
                recompute.add(op)   # never run again (after the early stop), never cached
                continue
            needed = any(k in inside and an.fwd_pos[an.op_of[k]] <= last and an.op_of[k] in recompute
                         for s_ in sel for k in an.readers[s_]) \
                or any(g in inside for s_ in sel for g in an.saved_by.get(s_, ()))
            if needed or alive_anyway:
                continue      # MUST_SAVE
            recompute.add(op)
        _cache_draws_after_a_cached_draw(an, ops, last, recompute)
        # Views are free to run again; getitems are not ATen calls.
        node_ops = {an.op_of[i] for i in nodes}
        for name in ops:
            if is_view(an.fx[name]) and name not in node_ops:
                recompute.add(name)
        rng = any(an.is_random(name) for name in ops)
        final.append(Region(ops=ops, recompute=frozenset(recompute), rng=rng))
    return final, notes


def _cache_draws_after_a_cached_draw(an: Analysis, ops: tuple[str, ...], last: int, recompute: set[str]) -> None:
    """Make every random op after a cached one (``MUST_SAVE``) cached too. A region's
    recomputation restores the generator state of its start and runs its ops again, and a
    cached op does not draw: a random op after it that ran again would draw the cached
    one's numbers instead of its own."""
    cached = False
    for op in ops:
        if an.fwd_pos[op] > last or not an.is_random(op):
            continue
        if op not in recompute:
            cached = True
        elif cached:
            recompute.discard(op)


def plan_from(an: Analysis, dropped: set[int], paged: set[int], costs: CostTable,
              page_in_stage: dict[int, int] | None = None) -> TorchPlan:
    """The plan that drops ``dropped`` and pages ``paged`` (where hooks can), unsimulated."""
    regions, notes = _regions_for(an, dropped)
    fwd = set(an.forward)
    region_of = {i for region in regions for i in an.region_nodes(region)}
    readers_in_region = {v for i in region_of for v in an.graph.nodes[i].inputs}
    pages: set[int] = set()
    for v in sorted(paged):
        savers = an.saved_by.get(v, set())
        if v not in fwd or v in region_of or v in readers_in_region or not savers \
                or any(g not in fwd or g in region_of for g in savers) or an.op_of[v] != an.tm.node_fx[v][0]:
            notes.append(f"node {v} is paged by the schedule but held where hooks cannot page it: kept")
            continue
        pages.add(v)
    prefetch: dict[int, str] = {}
    dma = bool(costs.dma)
    if dma and page_in_stage:
        for v in sorted(pages):
            t = page_in_stage.get(v)
            if t is None:
                continue
            # The first autograd node (in backward order) at or after stage t whose creator
            # runs in the module's forward outside regions: its pre-hook starts the read.
            first_use = min((an.bnodes[g][0] for g in an.saved_by[v] if an.bnodes.get(g)), default=None)
            for b in an.backward:
                if b < t:
                    continue
                if first_use is not None and b >= first_use:
                    break
                g = an.G[b]
                if g in fwd and g not in region_of and an.bnodes[g][0] == b and an.G_fx.get(b):
                    prefetch[v] = str(an.G_fx[b])
                    break
    return TorchPlan(regions=tuple(regions), paged=frozenset(pages), dma=dma, prefetch=prefetch, notes=tuple(notes))


def _quick(an: Analysis, plan: TorchPlan, costs: CostTable) -> tuple[int, float]:
    """(peak bytes, energy) of ``plan``'s Program without the simulator's checks: what
    the search compares (the chosen plan is simulated)."""
    program = pytorch_program(an, plan)
    size = [nd.output_bytes for nd in an.graph.nodes]
    work = [nd.workspace_bytes for nd in an.graph.nodes]
    live = peak = 0
    energy = 0.0
    t = 0.0
    for ins in program.instructions:
        op = ins.op
        if op is Op.COMPUTE:
            i = ins.node
            live += size[i]
            peak = max(peak, live + work[i])
            energy += costs.compute_j[i]
            t += costs.compute_s[i]
        elif op is Op.FREE:
            live -= size[ins.node]
        elif op is Op.PAGE_IN:
            live += size[ins.node]
            peak = max(peak, live)
            energy += costs.page_in_j[ins.node]
            t += 0.0 if costs.dma else costs.page_in_s[ins.node]
        elif op is Op.PAGE_OUT:
            energy += costs.page_out_j[ins.node]
            t += 0.0 if costs.dma else costs.page_out_s[ins.node]
    # PyTorch's checkpoint machinery costs time per region that no node carries (Python:
    # the checkpoint call, the selective-checkpoint dispatch modes, the recomputation's
    # set-up); the search charges it at the step's mean power, so that of two plans
    # alike in RAM the one with fewer regions wins.
    busy = sum(costs.compute_s)
    watts = sum(costs.compute_j) / busy if busy > 0 else 0.0
    return peak, energy + costs.static_w * t + len(plan.regions) * REGION_OVERHEAD_S * (watts + costs.static_w)


#: Seconds one checkpoint region costs beyond its ops (forward and recomputation): a
#: region of four small ops under ``checkpoint(..., context_fn=<selective policy>)`` took
#: 445 us for forward and backward against 57 us plain (the 2-vCPU bench VM, torch 2.13, one
#: thread, idle; docs/pytorch.md).
REGION_OVERHEAD_S = 3.5e-4


#: Plans the search of :func:`derive_plan` may evaluate (each one a Program built and replayed).
SEARCH_EVALUATIONS = 4000


def derive_plan(an: Analysis, program: Program, costs: CostTable, budget: int | None = None) -> TorchPlan:
    """The plan PyTorch runs for ``program``, within ``budget`` activation bytes when it can.

    A plan is the set of forward values it drops (and the ones it pages):

    * a dropped value's op and every op whose autograd node saves it share one region
      (else that node would keep it), so do dropped values that are recomputed from one
      another (else the first would be the second's region input, kept by its frame);
      regions are the forward-order hulls of these groups, merged where they overlap;
    * in a region an op is ``MUST_RECOMPUTE`` when it is dropped, or when nothing needs it
      at the region's recomputation (or it is never run again, after the early stop), and
      ``MUST_SAVE`` otherwise (kept, or alive then anyway);
    * a paged value is paged by the saved-tensor hooks when only autograd nodes outside
      regions save it and no region reads it, else kept; with DMA its page-in starts at
      the stage where the schedule issues it.

    The schedule's recomputed and paged values are the first plan. PyTorch recomputes a
    region at once, so a schedule that recomputes a chain piece by piece can need more
    RAM as a plan: from that plan, from checkpoint-all and from paging every value the
    hooks can, a greedy search then drops or keeps, pages or keeps one value at a time
    (each plan's Program replayed): first the move that lowers the peak most until the
    plan fits ``budget``, then moves that lower the energy and keep it within. The plan
    with the least energy that fits (else the smallest) is simulated and returned; its
    figures are the simulator's.
    """
    graph = an.graph
    n_comp = [0] * graph.n
    paged_out: set[int] = set()
    page_in_stage: dict[int, int] = {}
    stage = 0
    last_fwd = an.forward[-1]
    for ins in program.instructions:
        if ins.op is Op.COMPUTE:
            n_comp[ins.node] += 1
            if n_comp[ins.node] == 1:
                stage = ins.node + 1
        elif ins.op is Op.PAGE_OUT:
            paged_out.add(ins.node)
        elif ins.op is Op.PAGE_IN and stage > last_fwd + 1:
            page_in_stage.setdefault(ins.node, stage)
    fwd = set(an.forward)
    droppable = {i for i in an.forward if an.op_of[i] == an.tm.node_fx[i][0] and not graph.nodes[i].pinned
                 and not any(g not in fwd for g in an.saved_by.get(i, ()))}
    seed = {i for i in droppable if n_comp[i] > 1 or any(n_comp[k] > 1 for k in an.readers[i]
                                                            if an.op_of[k] == an.op_of[i])}
    # Values the saved-tensor hooks can page: droppable ones that some autograd node saves.
    pageable = {i for i in droppable if an.saved_by.get(i)}
    State = tuple[frozenset[int], frozenset[int]]      # (dropped, paged)
    cache: dict[State, tuple[int, float]] = {}

    def score(st: State) -> tuple[int, float]:
        got = cache.get(st)
        if got is None:
            got = _quick(an, plan_from(an, set(st[0]), set(st[1] - st[0]), costs, page_in_stage), costs)
            cache[st] = got
        return got

    def better(a: tuple[int, float], b: tuple[int, float]) -> bool:
        """a beats b: within the budget with less energy, or nearer to it."""
        if budget is None:
            return a[1] < b[1]
        fa, fb = a[0] <= budget, b[0] <= budget
        if fa != fb:
            return fa
        return a[1] < b[1] if fa else (a[0], a[1]) < (b[0], b[1])

    def moves(st: State) -> list[State]:
        d, p = st
        out = [(d - {v}, p) if v in d else (d | {v}, p) for v in sorted(droppable) if v not in p]
        out += [(d, p - {v}) if v in p else (d, p | {v}) for v in sorted(pageable) if v not in d]
        return out

    def search(start: State) -> State:
        cur = start
        cur_s = score(cur)
        while len(cache) < SEARCH_EVALUATIONS:
            fits = budget is None or cur_s[0] <= budget
            best, best_s = None, None
            for cand in moves(cur):
                if fits and budget is not None and (cand[0] > cur[0] or cand[1] > cur[1]):
                    continue   # within budget: only keeping more can lower the energy
                s_ = score(cand)
                if (best_s is None or better(s_, best_s)) and better(s_, cur_s):
                    best, best_s = cand, s_
                if len(cache) >= SEARCH_EVALUATIONS:
                    break
            if best is None or best_s is None:
                break
            cur, cur_s = best, best_s
        return cur

    start = (frozenset(seed), frozenset(paged_out & fwd))
    results = [search(start)]
    if seed or start[1]:
        results.append(search((frozenset(), frozenset())))
    if pageable:
        results.append(search((frozenset(), frozenset(pageable))))
    chosen_st = results[0]
    for st in results[1:]:
        if better(score(st), score(chosen_st)):
            chosen_st = st
    chosen, paged = chosen_st
    plan = plan_from(an, set(chosen), set(paged - chosen), costs, page_in_stage)
    plan.source_recomputes = program.n_recompute
    plan.schedule_recompute = frozenset(an.op_of[i] for i in seed)
    return simulate_plan(an, plan, costs)


__all__ = ["Analysis", "Region", "TorchPlan", "derive_plan", "getitem_of", "plan_from", "pytorch_program",
           "simulate_plan"]
