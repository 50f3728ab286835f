"""Griewank & Walther's binomial checkpointing (revolve) for training chains.

Revolve reverses a chain of ``L`` uniform steps with at most ``s`` checkpoints and the
fewest forward recomputations. To deliver states ``c+d, ..., c+1`` (in that order) from a
held state ``c`` with ``s`` free slots, either advance to ``c+d`` storing nothing and start
over for ``c+d-1 .. c+1``, or advance to ``c+m`` and store it, deliver ``c+d .. c+m+1`` from
it with ``s-1`` slots, use ``c+m``, free its slot and deliver ``c+m-1 .. c+1`` from ``c``
with ``s`` slots. :func:`revolve_table` gives the optimal cost and split ``m`` per ``(d, s)``.

In the stage model the forward nodes must form a path (each reads at most the previous
forward node) that precedes the rest; other graphs are reported "unsupported". The
forward sweep keeps revolve's nested split points. A backward stage that needs a dropped
forward tensor ``j`` recomputes from the nearest checkpoint ``c < j`` up to ``j`` and keeps
the split points the table chooses for the free slots. Loss/backward/pinned nodes are
never recomputed. Revolve assumes uniform step cost and size, so the number of slots is
searched: the least-energy plan that fits the budget and deadline is kept.
"""

from __future__ import annotations

import numpy as np

from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.baselines._common import Trial, assemble, forward_phase, heuristic, recomputable
from poet_compiler.solve.baselines.remat import plan_remat
from poet_compiler.solve.result import Result


def forward_chain(graph: TrainingGraph) -> list[int] | None:
    """Forward nodes in order if they form a chain preceding every other node, else None."""
    fwd = [node.id for node in graph.nodes if node.kind == "forward"]
    if not fwd or fwd != list(range(len(fwd))):
        return None
    for pos, v in enumerate(fwd):
        fw_inputs = [i for i in graph.nodes[v].inputs if graph.nodes[i].kind == "forward"]
        if fw_inputs != ([] if pos == 0 else [pos - 1]):
            return None
    return fwd


def revolve_table(length: int, slots: int) -> tuple[np.ndarray, np.ndarray]:
    """``cost[d, s]``: recomputations to deliver ``d`` states downwards with ``s`` slots;
    ``split[d, s]``: offset ``m`` of the checkpoint to store (0 = store none)."""
    cost = np.zeros((length + 1, slots + 1), dtype=np.int64)
    split = np.zeros((length + 1, slots + 1), dtype=np.int64)
    for d in range(1, length + 1):
        for s in range(slots + 1):
            best, arg = d + cost[d - 1, s], 0      # advance to c+d storing nothing
            if s >= 1 and d >= 2:
                m = np.arange(1, d)
                cand = m + cost[d - m, s - 1] + cost[m - 1, s]
                j = int(np.argmin(cand))
                if cand[j] < best:
                    best, arg = int(cand[j]), int(m[j])
            cost[d, s] = best
            split[d, s] = arg
    return cost, split


class RevolvePolicy:
    """Keeps the checkpoints revolve stores; recomputes from the nearest one."""

    def __init__(self, graph: TrainingGraph, chain: list[int], slots: int, split: np.ndarray) -> None:
        self.graph = graph
        self.chain = chain
        self.slots = slots
        self.split = split
        self.phase = forward_phase(graph)
        self.droppable = recomputable(graph)
        self.checkpoints: set[int] = set()
        self._place(-1, len(chain) - 1, slots)    # the first sweep's checkpoints

    def _place(self, c: int, j: int, free: int) -> None:
        """Store the nested split points revolve chooses between held ``c`` and ``j``."""
        while j - c >= 2 and free >= 1:
            m = int(self.split[min(j - c, self.split.shape[0] - 1), free])
            if m == 0:
                return
            self.checkpoints.add(c + m)
            c, free = c + m, free - 1

    def extra(self, t: int, missing: set[int], resident: set[int]) -> set[int]:
        chain_missing = [j for j in missing if j < len(self.chain) and self.droppable[j]]
        if chain_missing:
            j = max(chain_missing)
            self.checkpoints &= resident
            self._place(max((c for c in resident if c < j), default=-1), j, self.slots - len(self.checkpoints))
        return set()

    def keep(self, i: int, t: int, resident: set[int]) -> bool:
        if i in self.checkpoints:
            return True
        return bool(self.phase[t]) and any(c > t and self.phase[c] for c in self.graph.consumers[i])


def revolve_schedule(graph: TrainingGraph, chain: list[int], slots: int, split: np.ndarray) -> Schedule:
    return assemble(graph, plan_remat(graph, RevolvePolicy(graph, chain, slots, split)))


def slot_grid(length: int) -> list[int]:
    """Slot counts to try: all up to 16, then roughly geometric up to the chain length
    (capped at 96: beyond that revolve already stores nearly everything it wants)."""
    top = min(length, 96)
    out = set(range(0, min(top, 16) + 1))
    s = 16
    while s < top:
        out.add(s)
        s = int(s * 1.5)
    out.add(top)
    return sorted(out)


@heuristic("griewank", remat=True)
def griewank(trial: Trial) -> Result:
    graph = trial.problem.graph
    chain = forward_chain(graph)
    if chain is None:
        return trial.infeasible("unsupported graph: revolve needs the forward nodes to form a "
                                "chain that precedes the loss and backward nodes")
    slots = slot_grid(len(chain))
    _, split = revolve_table(len(chain), max(slots))
    for s in slots:
        trial.offer(revolve_schedule(graph, chain, s, split), s)
    return trial.finish_best(lambda s: f"{s} checkpoint slots")
