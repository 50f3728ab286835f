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
        self.fwd_ops: list[str] = [
            n.name for n in gm_nodes
            if n.op == "call_function" and _phase(n) == "forward" and n.name not in self.prelude
            and (n.name in needed or not _is_alias(n))
        ]
        self.prelude_fwd: list[str] = [name for name in tm.prelude_fx if _phase(self.fx[name]) == "forward"
                                       and name in needed]
        self.fwd_pos: dict[str, int] = {name: k for k, name in enumerate(self.fwd_ops)}
        missing = [i for i in self.forward if self.op_of[i] not in self.fwd_pos]
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
        """The executor's plan (what each node keeps): torch_exec/plan.py."""
        from poet_compiler.torch_exec.plan import build_plan

        return build_plan(self.tm)

    # -- regions ------------------------------------------------------------------------
    def region_nodes(self, region: Region) -> list[int]:
        """Forward scheduling nodes whose op runs inside ``region``, in order."""
        inside = set(region.ops)
        return [i for i in self.forward if self.op_of[i] in inside]

    def is_random(self, name: str) -> bool:
        target = self.fx[name].target
        return isinstance(target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in target.tags



__all__ = ["NO_NODE", "Analysis", "getitem_of"]
