"""The facts of a traced step that a PyTorch plan and its Program need.

Everything is at op granularity: a scheduling node is one ATen op (with the views and
``getitem``s that fold into it). The autograd node that ran each backward op is read from
the traced graph (``poet_grad_of`` / ``poet_grad_fn``, frontends/torch/tracing.py).
"""

from __future__ import annotations

import functools
import operator
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from poet_compiler.errors import InternalError, PoetError
from poet_compiler.frontends.torch.opinfo import is_view
from poet_compiler.frontends.torch.rng import draws, is_stash
from poet_compiler.frontends.torch.tracing import GRAD_FN, GRAD_OF, PHASE

if TYPE_CHECKING:
    from poet_compiler.frontends.torch.traced import TracedModel
    from poet_compiler.torch_exec.torch_plan import Region

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



def _check_plannable(tm: TracedModel) -> None:
    """Refuse a step ``checkpointed()`` cannot run: one not at op granularity, or with
    the optimizer's update in it."""
    if tm.granularity != "op":
        raise PoetError(f"{tm.graph.name}: checkpointed() needs a graph at op granularity "
                        f"(compiled at {tm.granularity!r}); compile with granularity='op'")
    if tm.graph.has_updates:
        raise PoetError(f"{tm.graph.name}: checkpointed() runs forward and backward through autograd and leaves "
                        "the update to your optimizer; compile without optimizer= and call opt.step()")


def _op_of(first: torch.fx.Node) -> str:
    """The op a node's first FX node stands for: itself, or the op a ``getitem`` selects from."""
    if first.target is operator.getitem and isinstance(first.args[0], torch.fx.Node):
        return first.args[0].name
    return first.name


def _creators(gm_nodes: list[torch.fx.Node]) -> dict[int, str]:
    """The FX op that created each autograd node, by the node's sequence number."""
    creator: dict[int, str] = {}
    for n in gm_nodes:
        c = n.meta.get("custom") or {}
        if GRAD_FN in c and n.op == "call_function" and n.target is not operator.getitem:
            creator.setdefault(int(c[GRAD_FN]), n.name)
    return creator


def _needed_ops(fx: dict[str, torch.fx.Node], roots: list[str]) -> set[str]:
    """The FX calls ``roots`` are computed from (themselves included)."""
    needed: set[str] = set()
    stack = [fx[r] for r in roots]
    while stack:
        n = stack.pop()
        if n.name in needed or n.op != "call_function":
            continue
        needed.add(n.name)
        stack.extend(n.all_input_nodes)
    return needed


class Analysis:
    """The facts of a traced step that the plan and its Program need (op granularity).

    Nodes are scheduling nodes (indices into ``graph.nodes``); an *autograd node* is named
    by the scheduling node of the op that created it. ``autograd_node_of[b]``: the
    autograd node that runs backward node ``b`` (:data:`NO_NODE`: none, the seed gradient
    or an engine accumulation), ``autograd_op_of[b]`` its creator's FX name;
    ``backward_nodes_of[g]``: the backward nodes autograd node ``g`` runs, in order;
    ``saves[g]`` / ``saved_by[v]``: the forward and loss values ``g`` saves, the autograd
    nodes saving ``v``; ``has_saves``: the autograd nodes that save any tensor at all.
    """

    def __init__(self, tm: TracedModel) -> None:
        _check_plannable(tm)
        self.tm = tm
        graph = tm.graph
        self.graph = graph
        gm_nodes = list(tm.gm.graph.nodes)
        self.fx: dict[str, torch.fx.Node] = {n.name: n for n in gm_nodes}
        self.order: dict[str, int] = {n.name: k for k, n in enumerate(gm_nodes)}
        self.prelude = set(tm.prelude_fx)
        self.owner = tm.fx_owner
        self.kind = [nd.kind for nd in graph.nodes]
        self.forward = [i for i, k in enumerate(self.kind) if k == "forward"]
        self.loss = [i for i, k in enumerate(self.kind) if k == "loss"]
        self.backward = [i for i, k in enumerate(self.kind) if k == "backward"]
        if self.forward != list(range(len(self.forward))) or \
                self.loss != list(range(len(self.forward), len(self.forward) + len(self.loss))):
            raise InternalError(f"{graph.name}: forward and loss nodes are not the graph's first nodes")
        # The op of each node: its first FX name (a select node: the op it selects from).
        self.op_of: list[str] = [_op_of(self.fx[names[0]]) for names in tm.node_fx]
        self.creator_op: dict[int, str] = _creators(gm_nodes)
        self.autograd_node_of: dict[int, int] = {}
        self.autograd_op_of: dict[int, str | None] = {}
        for b in self.backward:
            self.autograd_node_of[b], self.autograd_op_of[b] = self._autograd_node(tm.node_fx[b][0])
        self.backward_nodes_of: dict[int, list[int]] = defaultdict(list)
        for b in self.backward:
            if self.autograd_node_of[b] != NO_NODE:
                self.backward_nodes_of[self.autograd_node_of[b]].append(b)
        self.saves: dict[int, set[int]] = defaultdict(set)
        self.saved_by: dict[int, set[int]] = defaultdict(set)
        self._find_saved_values()
        self.has_saves: set[int] = self._autograd_nodes_saving(gm_nodes)
        self.readers: list[list[int]] = [[] for _ in graph.nodes]
        for k, nd in enumerate(graph.nodes):
            for v in nd.inputs:
                self.readers[v].append(k)
        out_node = next(n for n in gm_nodes if n.op == "output")
        outs = list(out_node.args[0])
        g_count = len(tm.grad_names)
        self.update_fx: list[str] = [outs[1 + g_count + k].name for k in range(len(tm.update_names))]
        self._find_forward_ops(gm_nodes)

    def _autograd_node(self, fx_name: str) -> tuple[int, str | None]:
        """(scheduling node of the op whose autograd node ran this backward op, its FX name)."""
        n = self.fx[fx_name]
        if n.target is operator.getitem and isinstance(n.args[0], torch.fx.Node):
            n = n.args[0]
        seq = (n.meta.get("custom") or {}).get(GRAD_OF)
        op = self.creator_op.get(int(seq)) if seq is not None else None
        if op is None:
            return NO_NODE, None
        return self.owner.get(op, NO_NODE), op

    def _find_saved_values(self) -> None:
        """``saves`` and ``saved_by``: what each backward node reads of the forward and loss."""
        for b in self.backward:
            g = self.autograd_node_of[b]
            if g == NO_NODE:
                continue
            for v in self.graph.nodes[b].inputs:
                if self.kind[v] in ("forward", "loss"):
                    self.saves[g].add(v)
                    self.saved_by[v].add(g)

    def _autograd_nodes_saving(self, gm_nodes: list[torch.fx.Node]) -> set[int]:
        """The autograd nodes that save any tensor at all (parameters and inputs count: a
        checkpoint packs them too), from the FX reads of their backward ops."""
        saving: set[int] = set()
        for n in gm_nodes:
            if n.op != "call_function" or _phase(n) != "backward":
                continue
            g, _ = self._autograd_node(n.name)
            if g == NO_NODE or g in saving:
                continue
            for a in n.all_input_nodes:
                if a.op in ("placeholder", "get_attr") or _phase(a) in ("forward", "loss"):
                    saving.add(g)
                    break
        return saving

    def _find_forward_ops(self, gm_nodes: list[torch.fx.Node]) -> None:
        """``fwd_ops``: the forward FX ops the module's forward runs, in order (prelude
        excluded: it is run before the regions that read it), with their positions
        ``fwd_pos``; ``prelude_fwd``: the forward prelude ops the step needs. Aliases
        nobody in the forward reads (the detach of a saved output) are what autograd did,
        not the module: left out."""
        tm = self.tm
        needed = _needed_ops(self.fx, [x for x, is_fx in zip(tm.out_leaves, tm.out_is_fx)
                                       if is_fx and x is not None] + self.update_fx)
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
            raise InternalError(f"{self.graph.name}: forward node {missing[0]} "
                                f"{self.graph.nodes[missing[0]].name!r} is not run by the module's forward")

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
        """The executor's plan (what each node keeps): torch_exec/plan.py."""
        from poet_compiler.torch_exec.plan import build_plan

        return build_plan(self.tm)

    # -- regions ------------------------------------------------------------------------
    def region_nodes(self, region: Region) -> list[int]:
        """Forward scheduling nodes whose op runs inside ``region``, in order."""
        inside = set(region.ops)
        return [i for i in self.forward if self.op_of[i] in inside]

    def is_random(self, name: str) -> bool:
        return draws(self.fx[name])


__all__ = ["NO_NODE", "Analysis", "getitem_of"]
