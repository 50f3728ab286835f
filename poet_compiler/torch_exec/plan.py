"""Static execution plan of a TracedModel: what each scheduling node runs, keeps and drops.

Both the interpreting executor (:mod:`poet_compiler.torch_exec.executor`) and the Python
generator (:mod:`poet_compiler.torch_exec.pygen`) follow this plan, so the two agree by
construction. It mirrors the memory accounting of the lowering
(:mod:`poet_compiler.frontends.torch.lowering`) and of module coarsening, so that the
tensors the executor really holds match the graph's ``output_bytes``/``workspace_bytes``:

* A node's *kept* values stay in the environment from its COMPUTE (or PAGE_IN) until
  its FREE: every FX value of the node that an FX node of another scheduling node reads
  (its interface), plus its *sinks* — values no op reads at all (parameter gradients),
  which the lowering counts as the node's buffer.
* A multi-output op read by another node (a *select* node picks batch-norm's saved
  statistics or max-pool's indices out of it) is kept as a tuple trimmed to the
  elements those other nodes read; the other elements are transient.
* Every other value is transient (the lowering's workspace: gradients and running
  statistics that only leave the graph, members of a coarsened group read only inside
  it): it is dropped right after its last use inside the node's COMPUTE.
* Graph outputs (loss, gradients, buffer updates) are taken when their FX node runs.
* An update node (docs/training.md) keeps nothing: its new parameter and state are
  graph outputs, taken when it runs, and written in place by the C runtime.
* A random op's state stash (``poet.rng_state``, frontends/torch/rng.py) is a sink: kept
  until FREE. A recomputation of a node replays each random op it runs from its stash
  (``replays``); its first computation draws from the generator.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from poet_compiler.errors import FrontendError
from poet_compiler.frontends.torch.opinfo import is_view
from poet_compiler.frontends.torch.rng import stash_of

if TYPE_CHECKING:
    from poet_compiler.frontends.torch.traced import TracedModel


@dataclass(frozen=True)
class NodePlan:
    """What COMPUTE of one scheduling node does, and what the node holds afterwards."""

    fx: tuple[str, ...]                       # FX nodes to run, in order
    drop_after: tuple[tuple[str, ...], ...]   # per FX step: transients dead after it
    kept: tuple[str, ...]                     # names held until FREE (node's buffer)
    trim: tuple[tuple[str, tuple[int, ...]], ...]  # tuple-valued kept names: elements kept
    outputs: tuple[tuple[str, int], ...]      # (FX name, position in the graph outputs)
    replays: tuple[tuple[str, str], ...] = ()  # (random FX op, its stash's FX name)


@dataclass(frozen=True)
class StepPlan:
    """The plan of every node, plus the prelude and the graph's output names."""

    nodes: tuple[NodePlan, ...]
    prelude: tuple[str, ...]
    prelude_outputs: tuple[tuple[str, int], ...]
    placeholders: tuple[str, ...]
    output_names: tuple[str, ...]
    fx_nodes: dict[str, torch.fx.Node]


def _is_alias(n: torch.fx.Node) -> bool:
    return n.op == "call_function" and (n.target is operator.getitem or is_view(n))


def build_plan(tm: TracedModel) -> StepPlan:
    """Derive the plan of ``tm`` from its FX graph and node lists."""
    graph = tm.gm.graph
    by_name = {n.name: n for n in graph.nodes}
    output_node = next(n for n in graph.nodes if n.op == "output")
    out_names = tuple(a.name for a in output_node.args[0])
    out_pos: dict[str, list[int]] = {}
    for k, name in enumerate(out_names):
        out_pos.setdefault(name, []).append(k)
    owner = tm.fx_owner

    # An op "reads" a value when it is a non-alias call_function user, directly or via aliases.
    op_read: dict[str, bool] = {}
    for n in reversed(list(graph.nodes)):
        if n.op != "call_function":
            continue
        op_read[n.name] = any(
            u.op == "call_function" and (not _is_alias(u) or op_read.get(u.name, False)) for u in n.users
        )

    nodes: list[NodePlan] = []
    for i, names in enumerate(tm.node_fx):
        for name in names:
            if name not in by_name:
                raise FrontendError(f"node {i}: FX node {name!r} is not in the traced graph")
        inside = set(names)
        kept: list[str] = []
        trim: list[tuple[str, tuple[int, ...]]] = []
        for name in names:
            n = by_name[name]
            external = [u for u in n.users if u.op == "call_function" and owner.get(u.name, -1) != i]
            val = n.meta.get("val")
            multi = isinstance(val, (list, tuple))
            if external:
                kept.append(name)
                if multi:
                    elems = sorted({int(u.args[1]) for u in external if u.target is operator.getitem})
                    trim.append((name, tuple(elems)))
                continue
            if _is_alias(n) and n.target is not operator.getitem:
                continue  # a view of a sink is the sink's storage: the sink itself is kept
            if n.target is operator.getitem:
                parent = n.args[0]
                # The primary output of a multi-output op that no op reads at all (e.g. the
                # weight gradient of the first convolution's backward): the lowering holds it.
                if (isinstance(parent, torch.fx.Node) and parent.name in inside and not _is_alias(parent)
                        and not op_read.get(parent.name, False)):
                    pval = parent.meta.get("val")
                    first = next((k for k, t in enumerate(pval) if isinstance(t, torch.Tensor)), None) \
                        if isinstance(pval, (list, tuple)) else None
                    if first is not None and int(n.args[1]) == first:
                        kept.append(name)
                continue
            if not multi and isinstance(val, torch.Tensor) and not op_read.get(name, False):
                kept.append(name)  # a sink: its value only leaves the graph
        if tm.graph.nodes[i].kind == "update":
            kept, trim = [], []
        keep = set(kept)
        # Last use of each value inside the node (index of the step after which it dies).
        last: dict[str, int] = {name: p for p, name in enumerate(names)}
        for p, name in enumerate(names):
            for a in by_name[name].all_input_nodes:
                if a.name in inside:
                    last[a.name] = max(last[a.name], p)
        drops: list[list[str]] = [[] for _ in names]
        for name, p in last.items():
            if name not in keep:
                drops[p].append(name)
        outputs = tuple((name, k) for name in names for k in out_pos.get(name, ()))
        replays = tuple((name, stash) for name in names if (stash := stash_of(by_name[name])) is not None)
        nodes.append(NodePlan(fx=tuple(names), drop_after=tuple(tuple(sorted(d)) for d in drops),
                              kept=tuple(kept), trim=tuple(trim), outputs=outputs, replays=replays))
    placeholders = tuple(n.name for n in graph.nodes if n.op == "placeholder")
    prelude_outputs = tuple((name, k) for name in (*placeholders, *tm.prelude_fx) for k in out_pos.get(name, ()))
    return StepPlan(nodes=tuple(nodes), prelude=tuple(tm.prelude_fx), prelude_outputs=prelude_outputs,
                    placeholders=placeholders, output_names=out_names, fx_nodes=by_name)


def trimmed(value: tuple, keep: tuple[int, ...]) -> tuple:
    """``value`` with every element not in ``keep`` replaced by None (so it can be freed)."""
    ks = set(keep)
    return tuple(v if k in ks else None for k, v in enumerate(value))


def constants(tm: TracedModel) -> dict[str, Any]:
    """Values of the graph's ``get_attr`` nodes (tensor constants), by FX name, in graph order."""
    out: dict[str, Any] = {}
    for n in tm.gm.graph.nodes:
        if n.op == "get_attr":
            value: Any = tm.gm
            for part in str(n.target).split("."):
                value = getattr(value, part)
            out[n.name] = value
    return out


def tensors_of(value: Any) -> list[torch.Tensor]:
    """The tensors of an FX value: itself, or the tensor elements of a multi-output op's tuple."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []
