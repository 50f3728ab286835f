"""A stage-by-stage rematerialization planner driven by a retention policy.

The planner walks the stages of docs/model.md in order with the set of tensors in RAM at
each stage start. Stage ``t`` computes node ``t`` and, in the same stage, recursively, any
input that is not resident (the only way the execution model allows). A :class:`Policy`
decides which extra nodes a stage recomputes with them (e.g. Chen's whole segment) and
which tensors stay in RAM into the next stage. The result is ``R``; ``assemble`` keeps each
tensor only up to its last need, so a policy may over-retain without costing memory.
Tensors the policy may not drop (pinned ones, backward results, ...) are retained for
the whole step while planning, so a recomputation always finds them.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from poet_compiler.errors import ScheduleError
from poet_compiler.graph.ir import TrainingGraph


class Policy(Protocol):
    droppable: np.ndarray
    """``droppable[i]``: the policy may evict ``i``."""

    def extra(self, t: int, missing: set[int], resident: set[int]) -> set[int]:
        """Nodes to recompute in stage ``t`` besides the ``missing`` inputs' closure."""
        ...

    def keep(self, i: int, t: int, resident: set[int]) -> bool:
        """Whether droppable tensor ``i``, in RAM at the end of stage ``t``, stays."""
        ...


def closure(graph: TrainingGraph, seeds: set[int], resident: set[int]) -> set[int]:
    """``seeds`` plus every non-resident input needed to compute them, recursively."""
    todo = list(seeds)
    out = set(seeds)
    while todo:
        k = todo.pop()
        for i in graph.nodes[k].inputs:
            if i not in resident and i not in out:
                out.add(i)
                todo.append(i)
    return out


def plan_remat(graph: TrainingGraph, policy: Policy) -> np.ndarray:
    """``R`` of the policy's schedule."""
    n = graph.n
    droppable = policy.droppable
    consumers = graph.consumers
    R = np.zeros((n, n), dtype=bool)
    resident: set[int] = set()
    for t in range(n):
        missing = {i for i in graph.nodes[t].inputs if i not in resident}
        seeds = {t} | missing | policy.extra(t, missing, resident)
        seeds = {k for k in seeds if k <= t and k not in resident}
        stage = closure(graph, seeds, resident)
        bad = [k for k in stage if k != t and not droppable[k]]
        if bad:   # a policy bug, not user input: the tensor should have been retained
            raise ScheduleError(f"stage {t}: planner would recompute non-droppable node {min(bad)}")
        R[t, sorted(stage)] = True
        resident |= stage
        resident = {
            i for i in resident
            if not droppable[i]
            or (any(c > t for c in consumers[i]) and policy.keep(i, t, resident))
        }
    return R
