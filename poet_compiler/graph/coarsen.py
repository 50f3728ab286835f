"""Coarsening: group op-level nodes per leaf module to keep the solver's graph small.

A group is a maximal run of *consecutive* nodes (in the graph's topological order) with
the same kind and the same provenance (leaf module path). Contracting consecutive runs
of a topological order always leaves a DAG, and forward and backward ops of one module
land in different groups because their kinds differ.

Memory semantics of a group node (exact or conservative, never optimistic):
* ``output_bytes`` = bytes of the members read by a node outside the group, or that are
  sinks (the step's results): exactly what survives the group's computation.
* ``workspace_bytes`` = the group's internal peak minus ``output_bytes``, where the
  internal peak replays the members in order with free-after-last-use inside the group
  (members that leave the group never freed). Members computed later in the group are
  counted in ``output_bytes`` from the group's start, so the estimate errs high.

Granularities (:func:`groups_for`):
* ``op`` — no grouping; ``module`` — :func:`module_groups`;
* ``layer`` — :func:`layer_groups`: one group per *heavy* op (conv, matmul; consecutive
  heavy ops of one module, such as a linear layer's two backward matmuls or the two
  attention matmuls, count as one), plus the cheap ops around it, forward and backward
  separately, the loss ops as one group. Where a run of cheap ops between two heavy ops
  is cut is chosen by dynamic programming to minimise :func:`group_excess`;
* ``auto`` — ``layer``, then adjacent groups of one kind merged greedily by least added
  excess until at most :data:`AUTO_MAX_NODES` nodes remain (:func:`merge_groups`).

Why boundaries matter: a group node is one buffer, so everything it exports is allocated
from the group's start and freed together after the last reader of *any* member, and
its inputs stay allocated until the group's end. Relative to the op-level graph this
holds bytes longer than needed; :func:`group_excess` measures exactly that extra
byte-lifetime (in op positions) so that the grouping keeps the checkpoint-all peak at, or
close to, the op-level one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from poet_compiler.errors import FrontendError
from poet_compiler.graph.ir import RNG_STATE_OP, Node, TrainingGraph
from poet_compiler.graph.validate import validate

#: Every granularity :func:`groups_for` understands, finest first.
GRANULARITIES = ("op", "module", "layer", "auto")
#: Node-count target of the ``auto`` granularity (small enough for the exact MILP).
AUTO_MAX_NODES = 80
#: Op classes that anchor a layer: the ops whose cost dominates a layer's.
HEAVY_CLASSES = frozenset({"conv", "matmul"})
#: Default price of one more layer group, as a fraction of the op-level checkpoint-all
#: peak (see :func:`layer_groups`).
LAYER_SLACK = 0.02
#: Longest run of ops a dynamic-programming group may span (heavy spans excepted); it
#: bounds the work on long heavy-free stretches.
_MAX_SPAN = 64


def module_groups(graph: TrainingGraph) -> list[list[int]]:
    """Runs of consecutive node ids sharing (kind, provenance)."""
    groups: list[list[int]] = []
    key_prev: tuple[str, str] | None = None
    for n in graph.nodes:
        key = (n.kind, n.provenance)
        if groups and key == key_prev and n.provenance:
            groups[-1].append(n.id)
        else:
            groups.append([n.id])
        key_prev = key
    return groups


def _replay_peak(graph: TrainingGraph, start: int, end: int, exported: set[int]) -> int:
    """Peak of running nodes ``start..end`` in order, freeing a non-exported member after
    its last reader inside the range (exported members are never freed)."""
    nodes, consumers = graph.nodes, graph.consumers
    alive: dict[int, int] = {}
    total = peak = 0
    for i in range(start, end + 1):
        alive[i] = nodes[i].output_bytes
        total += alive[i]
        peak = max(peak, total + nodes[i].workspace_bytes)
        for j in list(alive):
            if j not in exported and not any(i < c <= end for c in consumers[j]):
                total -= alive.pop(j)
    return peak


def coarsen(graph: TrainingGraph, groups: list[list[int]]) -> TrainingGraph:
    """Contract each group (consecutive ids, covering every node once) into one node."""
    flat = [i for g in groups for i in g]
    if flat != list(range(graph.n)):
        raise ValueError("groups must be consecutive runs covering every node exactly once, in order")
    gid = {i: k for k, g in enumerate(groups) for i in g}
    consumers = graph.consumers
    nodes: list[Node] = []
    for k, members in enumerate(groups):
        mset = set(members)
        exported = [i for i in members if not consumers[i] or any(c not in mset for c in consumers[i])]
        out_bytes = sum(graph.nodes[i].output_bytes for i in exported)
        peak = max(_replay_peak(graph, members[0], members[-1], set(exported)), out_bytes)
        inputs = sorted({gid[j] for i in members for j in graph.nodes[i].inputs if gid[j] != k})
        first = graph.nodes[members[0]]
        ops = [graph.nodes[i].op for i in members]
        extra: dict[str, Any] = {"provenance": first.provenance, "members": [graph.nodes[i].name for i in members],
                                 "ops": ops}
        name = first.name if len(members) == 1 else f"{first.provenance or first.name}#{first.kind}{k}"
        classes = [graph.nodes[i].op_class for i in members]
        dominant = max(
            classes, key=lambda c: sum(graph.nodes[i].flops for i in members if graph.nodes[i].op_class == c)
        )
        nodes.append(Node(
            id=k, name=name, kind=first.kind, op="+".join(dict.fromkeys(ops)) if len(members) > 1 else first.op,
            op_class=dominant, inputs=tuple(inputs), output_bytes=out_bytes, workspace_bytes=peak - out_bytes,
            flops=sum(graph.nodes[i].flops for i in members),
            bytes_accessed=sum(graph.nodes[i].bytes_accessed for i in members),
            pinned=any(graph.nodes[i].pinned for i in members),
            after=tuple(sorted({gid[r] for i in members for r in graph.nodes[i].after})),
            extra=extra if len(members) > 1 else dict(first.extra),
        ))
    return validate(replace(graph, nodes=tuple(nodes)))


def coarsen_by_module(graph: TrainingGraph) -> tuple[TrainingGraph, list[list[int]]]:
    groups = module_groups(graph)
    return coarsen(graph, groups), groups


# ---- layer granularity ---------------------------------------------------------------

class _OpProfile:
    """Op-level checkpoint-all figures that :func:`group_excess` compares against."""

    def __init__(self, graph: TrainingGraph) -> None:
        n = graph.n
        # A tensor dies after its last reader; a sink right after it is computed.
        self.last = [max(users) if users else i for i, users in enumerate(graph.consumers)]
        dying = [0] * (n + 1)
        for j, p in enumerate(self.last):
            dying[p + 1] += graph.nodes[j].output_bytes
        # live_in[p]: bytes of tensors computed before p and still needed at p.
        self.live_in = [0] * (n + 1)
        for p in range(n):
            self.live_in[p + 1] = self.live_in[p] + graph.nodes[p].output_bytes - dying[p + 1]
        # mem[p]: memory at the compute point of p (docs/model.md, every stage = one op).
        self.mem = [self.live_in[p] + graph.nodes[p].output_bytes + graph.nodes[p].workspace_bytes for p in range(n)]


def group_excess(graph: TrainingGraph, start: int, end: int, profile: _OpProfile | None = None) -> int:
    """Bytes by which contracting nodes ``start..end`` raises checkpoint-all memory.

    Two terms, both against the op-level run with free-after-last-use:
    * at the group's compute point: every tensor alive at its start (inputs dying inside
      included) plus its internal peak (exported members counted from when they are
      computed), minus the op-level maximum over the members' compute points;
    * the bytes of every exported member that dies before the last exported member: the
      group buffer holds it, so it inflates the memory of the groups that run meanwhile
      (a parameter gradient next to a tensor read by the next layer, say).
    The op-level lifetimes of tensors outside the group stand in for the coarse ones, so
    the cost is local to the group and can drive dynamic programming.
    """
    prof = _OpProfile(graph) if profile is None else profile
    last = prof.last
    exported = [j for j in range(start, end + 1) if last[j] > end or not graph.consumers[j]]
    out_bytes = sum(graph.nodes[j].output_bytes for j in exported)
    peak = max(_replay_peak(graph, start, end, set(exported)), out_bytes)
    local = prof.live_in[start] + peak - max(prof.mem[start:end + 1])
    horizon = max((last[j] for j in exported), default=end)
    held = sum(graph.nodes[j].output_bytes for j in exported if last[j] < horizon)
    return max(local, 0) + held


def _kind_runs(graph: TrainingGraph) -> list[tuple[int, int]]:
    """Maximal runs ``(first, last)`` of consecutive nodes of one kind."""
    runs: list[tuple[int, int]] = []
    for n in graph.nodes:
        if runs and graph.nodes[runs[-1][1]].kind == n.kind:
            runs[-1] = (runs[-1][0], n.id)
        else:
            runs.append((n.id, n.id))
    return runs


def _heavy_units(graph: TrainingGraph, first: int, last: int) -> list[tuple[int, int]]:
    """Spans ``(a, b)`` of the heavy ops in ``first..last``; consecutive heavy ops of the
    same module form one span (no cut may fall inside it)."""
    units: list[tuple[int, int]] = []
    prev_prov: str | None = None
    for i in range(first, last + 1):
        node = graph.nodes[i]
        if node.op_class not in HEAVY_CLASSES:
            continue
        if units and node.provenance and node.provenance == prev_prov:
            units[-1] = (units[-1][0], i)
        else:
            units.append((i, i))
        prev_prov = node.provenance
    return units


def _split_run(graph: TrainingGraph, first: int, last: int, profile: _OpProfile, group_cost: int) -> list[int]:
    """Group starts inside ``first..last`` (excluding ``first``), by dynamic programming.

    Every group holds at most one heavy span and never splits one, so consecutive heavy
    spans are always separated. Minimised: the summed :func:`group_excess` plus
    ``group_cost`` per group, so an extra group (isolating parameter gradients, say) is
    made only when it saves more memory than ``group_cost``. Ties: fewer groups, then
    later cuts (cheap ops stay with the heavy op before them).
    """
    units = _heavy_units(graph, first, last)
    unit_of = {i: k for k, (a, b) in enumerate(units) for i in range(a, b + 1)}
    inside = {i for a, b in units for i in range(a + 1, b + 1)}  # no group may start here
    # best[c] = (cost, groups, -cuts...) of covering first..c-1 with groups.
    best: dict[int, tuple[int, int, tuple[int, ...]]] = {first: (0, 0, ())}
    for c in range(first + 1, last + 2):
        if c <= last and c in inside:
            continue
        options = []
        heavy: set[int] = set()
        lo = c - _MAX_SPAN
        if c - 1 in unit_of:  # a long heavy span still fits in one group
            lo = min(lo, units[unit_of[c - 1]][0])
        for start in range(c - 1, max(first, lo) - 1, -1):
            if start in unit_of:
                heavy.add(unit_of[start])
            if len(heavy) > 1:
                break
            if start not in best:
                continue
            cost, count, cuts = best[start]
            total = cost + group_excess(graph, start, c - 1, profile) + group_cost
            options.append((total, count + 1, tuple(-x for x in (*cuts, c)), (*cuts, c)))
        # Never empty: a one-op group, or the whole heavy span ending at c - 1, is allowed.
        total, count, _, cuts = min(options)
        best[c] = (total, count, cuts)
    return list(best[last + 1][2][:-1])


def layer_groups(graph: TrainingGraph, slack: float = LAYER_SLACK) -> list[list[int]]:
    """Layer-level groups: consecutive runs of one kind, at most one heavy span each.

    ``slack`` prices one group at that fraction of the op-level checkpoint-all peak: a
    run is cut once more only where that saves more memory (:func:`_split_run`). With
    ``slack=inf`` there is exactly one group per heavy span (plus the heavy-free runs).
    """
    if slack < 0:
        raise FrontendError(f"slack must be >= 0, got {slack}")
    profile = _OpProfile(graph)
    peak = max(profile.mem, default=0)
    group_cost = int(min(slack * peak, 2**62))
    groups: list[list[int]] = []
    for first, last in _kind_runs(graph):
        bounds = [first, *_split_run(graph, first, last, profile, group_cost), last + 1]
        groups.extend(list(range(s, e)) for s, e in zip(bounds, bounds[1:]))
    return groups


def merge_groups(graph: TrainingGraph, groups: list[list[int]], max_nodes: int) -> list[list[int]]:
    """Merge adjacent groups of one kind, cheapest added :func:`group_excess` first (ties:
    leftmost), until at most ``max_nodes`` groups remain or no merge is possible (groups of
    different kinds never merge, so the result may stay above ``max_nodes``)."""
    if max_nodes < 1:
        raise FrontendError(f"max_nodes must be >= 1, got {max_nodes}")
    profile = _OpProfile(graph)
    spans = [(g[0], g[-1]) for g in groups]
    own = [group_excess(graph, s, e, profile) for s, e in spans]

    def added(k: int) -> int | None:
        (s, _), (_, e) = spans[k], spans[k + 1]
        if graph.nodes[s].kind != graph.nodes[e].kind:
            return None
        return group_excess(graph, s, e, profile) - own[k] - own[k + 1]

    gains = [added(k) for k in range(len(spans) - 1)]
    while len(spans) > max_nodes:
        options = [(g, k) for k, g in enumerate(gains) if g is not None]
        if not options:
            break
        _, k = min(options)
        spans[k:k + 2] = [(spans[k][0], spans[k + 1][1])]
        own[k:k + 2] = [group_excess(graph, *spans[k], profile)]
        del gains[k]
        for j in (k - 1, k):
            if 0 <= j < len(spans) - 1:
                gains[j] = added(j)
    return [list(range(s, e + 1)) for s, e in spans]


def groups_for(graph: TrainingGraph, granularity: str, max_nodes: int | None = None) -> list[list[int]]:
    """Groups of an op-level graph at ``granularity`` (see :data:`GRANULARITIES`);
    ``max_nodes`` (default :data:`AUTO_MAX_NODES` for ``auto``) caps the node count by
    :func:`merge_groups` after layer grouping."""
    if granularity not in GRANULARITIES:
        raise FrontendError(f"granularity must be one of {', '.join(GRANULARITIES)}, got {granularity!r}")
    if granularity == "op":
        groups = [[i] for i in range(graph.n)]
    elif granularity == "module":
        groups = module_groups(graph)
    else:
        groups = layer_groups(graph)
    if granularity == "auto" and max_nodes is None:
        max_nodes = AUTO_MAX_NODES
    if max_nodes is not None:
        groups = merge_groups(graph, groups, max_nodes)
    return _split_stashes(graph, _split_updates(graph, groups))


def _split_updates(graph: TrainingGraph, groups: list[list[int]]) -> list[list[int]]:
    """Cut every group where it goes from update nodes to others or back: an update runs
    once and writes in place (docs/training.md), so it never shares a node with ops that
    may be recomputed or paged."""
    out: list[list[int]] = []
    for g in groups:
        run: list[int] = []
        for i in g:
            if run and (graph.nodes[i].kind == "update") != (graph.nodes[run[-1]].kind == "update"):
                out.append(run)
                run = []
            run.append(i)
        out.append(run)
    return out


def _split_stashes(graph: TrainingGraph, groups: list[list[int]]) -> list[list[int]]:
    """Give every random op's state stash a node of its own: grouped, it would run again
    with its group (a new state) and pin the whole group."""
    out: list[list[int]] = []
    for g in groups:
        run: list[int] = []
        for i in g:
            if graph.nodes[i].op == RNG_STATE_OP:
                if run:
                    out.append(run)
                out.append([i])
                run = []
            else:
                run.append(i)
        if run:
            out.append(run)
    return out


def coarsen_to(
    graph: TrainingGraph, granularity: str, max_nodes: int | None = None
) -> tuple[TrainingGraph, list[list[int]]]:
    """``graph`` contracted at ``granularity``, and the groups (op ids per new node)."""
    groups = groups_for(graph, granularity, max_nodes)
    if all(len(g) == 1 for g in groups):
        return graph, groups
    return coarsen(graph, groups), groups


def coarsen_traced(tm: Any, granularity: str = "module", max_nodes: int | None = None) -> Any:
    """Coarse version of an op-level TracedModel: a group's FX lists are concatenated in
    member order, so the executor runs a group exactly as its members in sequence."""
    if tm.granularity != "op":
        raise FrontendError(f"coarsen_traced needs an op-level TracedModel, got granularity {tm.granularity!r}")
    graph, groups = coarsen_to(tm.graph, granularity, max_nodes)
    node_fx = tuple(tuple(f for i in g for f in tm.node_fx[i]) for g in groups)
    owner = {f: k for k, fx in enumerate(node_fx) for f in fx}
    return replace(tm, graph=graph, node_fx=node_fx, fx_owner=owner, granularity=granularity)
