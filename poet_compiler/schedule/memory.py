"""The memory formula of docs/model.md ("Memory inside a stage"), straight from the matrices.

``mem(t, k)`` is the RAM in use at compute point ``k`` of stage ``t``. It is written here
directly from the rules (not from the linearizer's bookkeeping), so that tests can check
the simulator's peak against it and the MILP formulations can be cross-checked with it.
:func:`stage_point_memory` works on one stage given as bit masks; the brute-force oracle
uses it too.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schedule.schedule import Schedule


def bits(mask: int) -> list[int]:
    """Node ids set in ``mask``, ascending."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def stage_point_memory(
    sizes: Sequence[int],
    workspace: Sequence[int],
    input_masks: Sequence[int],
    resident: int,
    computes: int,
    transfers: int,
    kept: int,
) -> list[tuple[int, int]]:
    """``[(k, mem(t,k)), ...]`` for every compute point of one stage, ``k`` ascending.

    Masks (bit ``i`` = node ``i``): ``resident`` = S_RAM[t], ``computes`` = R[t],
    ``transfers`` = M_in[t] | M_out[t], ``kept`` = S_RAM[t+1] (0 in the last stage).
    """
    order = bits(computes)
    # Last compute of the stage reading each tensor; a tensor computed in the stage is at
    # least "used" by its own compute (freed right after it if nothing reads it later).
    last_use: dict[int, int] = {i: -1 for i in bits(resident)}
    for k in order:
        last_use[k] = max(last_use.get(k, -1), k)
        for i in bits(input_masks[k]):
            last_use[i] = max(last_use.get(i, -1), k)
    held = kept | transfers
    out = []
    for k in order:
        alloc = transfers | (1 << k)
        for i in bits(resident | (computes & ((1 << k) - 1))):
            if (held >> i) & 1 or last_use[i] >= k:
                alloc |= 1 << i
        out.append((k, sum(sizes[i] for i in bits(alloc)) + workspace[k]))
    return out


def _mask(row: np.ndarray) -> int:
    return sum(1 << int(i) for i in np.flatnonzero(row))


def stage_memory(graph: TrainingGraph, schedule: Schedule) -> np.ndarray:
    """``mem[t, k]`` in bytes for every compute point (``R[t,k] = 1``), 0 elsewhere.

    The schedule's peak RAM is ``stage_memory(graph, schedule).max()``.
    """
    n = graph.n
    sizes = [node.output_bytes for node in graph.nodes]
    work = [node.workspace_bytes for node in graph.nodes]
    inputs = [sum(1 << i for i in node.inputs) for node in graph.nodes]
    R = np.asarray(schedule.R, dtype=bool)
    S = np.asarray(schedule.S_RAM, dtype=bool)
    transfer = np.asarray(schedule.M_in, dtype=bool) | np.asarray(schedule.M_out, dtype=bool)
    mem = np.zeros((n, n), dtype=np.int64)
    for t in range(n):
        kept = _mask(S[t + 1]) if t + 1 < n else 0
        for k, m in stage_point_memory(sizes, work, inputs, _mask(S[t]), _mask(R[t]), _mask(transfer[t]), kept):
            mem[t, k] = m
    return mem


def peak_memory(graph: TrainingGraph, schedule: Schedule) -> int:
    """Largest ``mem(t, k)`` of the schedule: what must fit the activation budget."""
    return int(stage_memory(graph, schedule).max()) if graph.n else 0
