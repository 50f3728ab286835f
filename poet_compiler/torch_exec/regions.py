"""The checkpoint regions and policies that drop a set of forward values, and the plan
that drops and pages them (:func:`plan_from`, unsimulated); the rules are
:func:`~.plan_search.derive_plan`'s."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from poet_compiler.frontends.torch.opinfo import is_view
from poet_compiler.torch_exec.analysis import getitem_of
from poet_compiler.torch_exec.torch_plan import Region, TorchPlan

if TYPE_CHECKING:
    from poet_compiler.devices.costs import CostTable
    from poet_compiler.torch_exec.analysis import Analysis


def _regions_for(an: Analysis, dropped: set[int]) -> tuple[list[Region], list[str]]:
    """Regions and policies that drop exactly ``dropped`` (forward op nodes): see
    :func:`~.plan_search.derive_plan`."""
    notes: list[str] = []
    slices = _slices(an, _merged(_spans(an, dropped)))
    region_sets = [set(an.region_nodes(Region(ops=ops, recompute=frozenset()))) for ops in slices]
    region_of = {i: r for r, rs in enumerate(region_sets) for i in rs}
    final: list[Region] = []
    for r, ops in enumerate(slices):
        recompute = _recomputed_ops(an, r, region_sets[r], region_of, dropped, notes)
        # Views are free to run again; getitems are not ATen calls.
        node_ops = {an.op_of[i] for i in region_sets[r]}
        for name in ops:
            if is_view(an.fx[name]) and name not in node_ops:
                recompute.add(name)
        rng = any(an.is_random(name) for name in ops)
        final.append(Region(ops=ops, recompute=frozenset(recompute), rng=rng))
    return final, notes


def _spans(an: Analysis, dropped: set[int]) -> list[tuple[int, int]]:
    """The forward positions (first op, last op) of each group of values that must share
    a region, sorted: a dropped value with its select nodes, the forward autograd nodes
    that save them and the dropped values that read them, joined where they meet."""
    fwd = set(an.forward)
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
    return sorted((min(an.fwd_pos[an.op_of[i]] for i in m), max(an.fwd_pos[an.op_of[i]] for i in m))
                  for m in groups.values())


def _merged(spans: list[tuple[int, int]]) -> list[list[int]]:
    """Sorted spans merged where they overlap."""
    merged: list[list[int]] = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return merged


def _slices(an: Analysis, merged: list[list[int]]) -> list[tuple[str, ...]]:
    """Each span's forward ops, with the getitems right after its last op."""
    ops_all = an.fwd_ops
    slices: list[tuple[str, ...]] = []
    for lo, hi in merged:
        while hi + 1 < len(ops_all):
            gi = getitem_of(an.fx[ops_all[hi + 1]])
            if gi is None or an.fwd_pos.get(gi[0], -1) < lo:
                break
            hi += 1
        slices.append(tuple(ops_all[lo:hi + 1]))
    return slices


def _recomputed_ops(an: Analysis, r: int, inside: set[int], region_of: dict[int, int], dropped: set[int],
                    notes: list[str]) -> set[str]:
    """The ops of region ``r`` (its nodes ``inside``) that are ``MUST_RECOMPUTE``; a
    dropped value alive at the recomputation anyway is kept, with a note."""
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
    _cache_draws_after_a_cached_draw(an, list(by_op), last, recompute)
    return recompute


def _cache_draws_after_a_cached_draw(an: Analysis, ops: list[str], last: int, recompute: set[str]) -> None:
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
            first_use = min((an.backward_nodes_of[g][0] for g in an.saved_by[v] if an.backward_nodes_of.get(g)),
                            default=None)
            for b in an.backward:
                if b < t:
                    continue
                if first_use is not None and b >= first_use:
                    break
                g = an.autograd_node_of[b]
                if g in fwd and g not in region_of and an.backward_nodes_of[g][0] == b and an.autograd_op_of.get(b):
                    prefetch[v] = str(an.autograd_op_of[b])
                    break
    return TorchPlan(regions=tuple(regions), paged=frozenset(pages), dma=dma, prefetch=prefetch, notes=tuple(notes))



__all__ = ["plan_from"]
