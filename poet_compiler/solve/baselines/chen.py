"""Chen et al. 2016 ("Training deep nets with sublinear memory cost"): segment checkpointing.

The forward nodes are cut into segments; the last node of each (its boundary) is kept for
the whole step, the other forward tensors are freed once the forward pass no longer reads
them. When the backward pass first needs a dropped tensor, the stage recomputes its *whole*
segment from the previous boundary and keeps the recomputed tensors until their last
backward use (Chen's "recompute the segment once during backward"). Backward, loss and
pinned nodes are never recomputed; the last segment is not dropped at all (its backward
starts right after the forward ends).

General DAGs: boundaries are *articulation nodes* of the forward phase, forward nodes
``v`` that no forward edge jumps over (``a < v < b``): every node of a chain, the block
outputs of a residual network. A graph with none uses any forward node (a topological
segmentation: a recompute then also recomputes what it needs from earlier segments).

* :func:`chen_sqrt_n`: ``round(sqrt(n_forward))`` segments of about equal node count.
* :func:`chen_greedy`: Chen's memory-budgeted greedy rule (add up the forward nodes'
  output bytes; past ``b`` at a candidate, make it a boundary and restart) over a grid of
  ``b``; the least-energy plan that fits the budget and deadline wins.

Both need recomputation: in modes ``paging`` and ``none`` they report infeasible.
"""

from __future__ import annotations

import math

import numpy as np

from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.baselines._common import Trial, assemble, forward_phase, heuristic, recomputable
from poet_compiler.solve.baselines.remat import plan_remat
from poet_compiler.solve.clock import past_step_deadline
from poet_compiler.solve.result import Result


def forward_nodes(graph: TrainingGraph) -> list[int]:
    """Droppable forward nodes, in topological order."""
    return [int(i) for i in np.flatnonzero(recomputable(graph))]


def articulation_nodes(graph: TrainingGraph) -> list[int]:
    """Forward nodes no forward-phase edge jumps over (valid segment boundaries)."""
    phase = forward_phase(graph)
    # cover[v] > 0 when some edge (a, b) between forward-phase nodes has a < v < b.
    cover = np.zeros(graph.n + 1, dtype=np.int64)
    for a, b in graph.edges:
        if phase[a] and phase[b] and b > a + 1:
            cover[a + 1] += 1
            cover[b] -= 1
    jumped = np.cumsum(cover)[: graph.n] > 0
    return [v for v in forward_nodes(graph) if not jumped[v]]


class SegmentPolicy:
    """Retention/recompute rules of segment checkpointing (see the module docstring)."""

    def __init__(self, graph: TrainingGraph, boundaries: list[int]) -> None:
        self.graph = graph
        self.phase = forward_phase(graph)
        bounds = set(boundaries)
        self.segment: dict[int, int] = {}
        self.members: dict[int, list[int]] = {}
        seg = 0
        for v in forward_nodes(graph):
            self.segment[v] = seg
            self.members.setdefault(seg, []).append(v)
            if v in bounds:
                seg += 1
        # Nodes after the last boundary form the last segment, which is never dropped.
        self.droppable = np.zeros(graph.n, dtype=bool)
        for v, s in self.segment.items():
            self.droppable[v] = v not in bounds and s != seg

    def extra(self, t: int, missing: set[int], resident: set[int]) -> set[int]:
        consumers = self.graph.consumers
        return {m for j in missing if j in self.segment for m in self.members[self.segment[j]]
                if m <= t and m not in resident and self.droppable[m]
                and any(c >= t and not self.phase[c] for c in consumers[m])}

    def keep(self, i: int, t: int, resident: set[int]) -> bool:
        if not self.phase[t]:
            return True   # backward: keep recomputed tensors until their last use
        return any(c > t and self.phase[c] for c in self.graph.consumers[i])


def segment_schedule(graph: TrainingGraph, boundaries: list[int]) -> Schedule:
    return assemble(graph, plan_remat(graph, SegmentPolicy(graph, boundaries)))


def _candidates(graph: TrainingGraph) -> list[int]:
    return articulation_nodes(graph) or forward_nodes(graph)


def sqrt_n_boundaries(graph: TrainingGraph) -> list[int]:
    """About ``sqrt(n)`` boundaries spread evenly over the forward nodes."""
    fwd = forward_nodes(graph)
    cand = _candidates(graph)
    if len(fwd) < 2 or not cand:
        return []
    k = max(1, round(math.sqrt(len(fwd))))
    pos = {v: p for p, v in enumerate(fwd)}
    return sorted({min(cand, key=lambda v: (abs(pos[v] - (j * len(fwd) / k - 1)), v)) for j in range(1, k)})


def greedy_boundaries(graph: TrainingGraph, b: float) -> list[int]:
    """Chen's greedy rule with segment byte budget ``b``."""
    cand = set(_candidates(graph))
    out, temp = [], 0
    for v in forward_nodes(graph):
        temp += graph.nodes[v].output_bytes
        if temp > b and v in cand:
            out.append(v)
            temp = 0
    return out


@heuristic("chen_sqrt_n", remat=True)
def chen_sqrt_n(trial: Trial) -> Result:
    bounds = sqrt_n_boundaries(trial.problem.graph)
    return trial.finish(segment_schedule(trial.problem.graph, bounds), note=f"{len(bounds) + 1} segments")


def greedy_grid(graph: TrainingGraph) -> list[float]:
    """Segment budgets to try: 24 points of a geometric grid from the largest tensor to the
    total, and Chen's own guess sqrt(x * y) with x = all bytes, y = the largest tensor."""
    sizes = [graph.nodes[v].output_bytes for v in forward_nodes(graph)]
    if not sizes:
        return [0.0]
    lo, hi = max(1, max(sizes)), max(1, sum(sizes))
    return sorted({float(lo), float(hi), math.sqrt(lo * hi)} | {lo * (hi / lo) ** (j / 23) for j in range(24)})


@heuristic("chen_greedy", remat=True)
def chen_greedy(trial: Trial) -> Result:
    graph = trial.problem.graph
    seen: set[tuple[int, ...]] = set()
    for b in greedy_grid(graph):
        if seen and past_step_deadline():   # the grid's budgets so far (at least one) are the answer
            break
        bounds = tuple(greedy_boundaries(graph, b))
        if bounds not in seen:
            seen.add(bounds)
            trial.offer(segment_schedule(graph, list(bounds)), len(bounds))
    return trial.finish_best(lambda k: f"{k + 1} segments, best of {len(seen)} budgets")
