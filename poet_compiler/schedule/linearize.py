"""Schedule (matrices) -> Program (instructions), in the Algorithm 2 order of docs/model.md.

:func:`check_schedule` enforces the rules of the execution model on the matrices first,
so a Program is only ever built from a schedule that the model allows; every message
names the stage, the node and the rule.

One deliberate refinement of the documented order (reported to the model's owner): the
"free resident tensors nothing in the stage reads" step is emitted *before* the stage's
``PAGE_OUT``/``PAGE_IN`` instructions instead of after them. Those tensors are neither
kept nor in transfer, so freeing them first is always legal, and it is what makes the
live bytes at every instruction of the Program bounded by the per-compute-point formula
``mem(t, k)``: otherwise a page-in buffer and a tensor about to be freed are briefly live
together, and the Program would need more RAM than the formulation accounts for.
"""

from __future__ import annotations

import numpy as np

from poet_compiler.errors import ScheduleError
from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schedule.program import Instruction, Op, Program
from poet_compiler.schedule.schedule import Schedule

_MATRICES = ("R", "S_RAM", "S_AUX", "M_in", "M_out")
MODES = ("poet", "remat", "paging", "none")


def _name(graph: TrainingGraph, i: int) -> str:
    return f"node {i} {graph.nodes[i].name!r}"


def _first(mask: np.ndarray) -> tuple[int, int]:
    """(row, column) of the first True entry, in row-major order."""
    t, i = np.argwhere(mask)[0]
    return int(t), int(i)


def check_schedule(graph: TrainingGraph, schedule: Schedule, mode: str = "poet", *, dma: bool = False) -> None:
    """Raise :class:`ScheduleError` if the matrices break a rule of docs/model.md.

    Rules beyond the documented table (implied by the Program semantics, which cannot
    express them): a node is not computed in a stage where it is already resident
    (``R[t,i]`` with ``S_RAM[t,i]``) nor computed and paged in in the same stage.
    ``dma``: the stage-long transfers of a DMA device; otherwise transfers are
    synchronous (a page-in is readable in its own stage, a page-out may follow a
    recompute of the stage).
    """
    n = graph.n
    if mode not in MODES:
        raise ScheduleError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    mats: dict[str, np.ndarray] = {}
    for key in _MATRICES:
        m = np.asarray(getattr(schedule, key))
        if m.shape != (n, n):
            raise ScheduleError(f"schedule matrix {key} has shape {m.shape}, expected ({n}, {n}) for {n} nodes")
        mats[key] = m.astype(bool)
    R, S, A, Min, Mout = (mats[k] for k in _MATRICES)

    def fail(t: int, i: int, rule: str) -> None:
        raise ScheduleError(f"stage {t}, {_name(graph, i)}: {rule}")

    upper = np.triu(np.ones((n, n), dtype=bool), k=1)       # i > t
    upper_eq = np.triu(np.ones((n, n), dtype=bool), k=0)    # i >= t
    if (R & upper).any():
        fail(*_first(R & upper), "R[t,i] set for i > t (a node cannot run before its own stage)")
    diag = np.diag(R)
    if not diag.all():
        t = int(np.argmin(diag))
        fail(t, t, "R[t,t] must be 1 (stage t computes node t)")
    for key, m in (("S_RAM", S), ("S_AUX", A), ("M_in", Min), ("M_out", Mout)):
        if (m & upper_eq).any():
            fail(*_first(m & upper_eq), f"{key}[t,i] set for i >= t (only earlier nodes can be resident or paged)")
    if dma and (Mout & ~S).any():
        fail(*_first(Mout & ~S),
             "M_out[t,i] requires S_RAM[t,i] (with DMA only a tensor resident at stage start is paged out)")
    if not dma and (Mout & ~(S | R)).any():
        fail(*_first(Mout & ~(S | R)), "M_out[t,i] requires S_RAM[t,i] or R[t,i] (a page-out needs the tensor in RAM)")
    if (Min & ~A).any():
        fail(*_first(Min & ~A), "M_in[t,i] requires S_AUX[t,i] (page-in needs a flash copy)")
    if (Min & S).any():
        fail(*_first(Min & S), "M_in[t,i] requires S_RAM[t,i] = 0 (the tensor is already resident)")
    if (R & S).any():
        fail(*_first(R & S), "R[t,i] with S_RAM[t,i]: recomputing a tensor that is already resident")
    if (R & Min).any():
        fail(*_first(R & Min), "R[t,i] with M_in[t,i]: a tensor is computed and paged in in the same stage")
    for t in range(n - 1):
        bad = S[t + 1] & ~(S[t] | R[t] | Min[t])
        if bad.any():
            fail(t + 1, int(np.argmax(bad)),
                 "S_RAM[t,i] without S_RAM, R or M_in in stage t-1 "
                 "(RAM residency only from staying, computing or paging in)")
        bad = A[t + 1] & ~(A[t] | Mout[t])
        if bad.any():
            fail(t + 1, int(np.argmax(bad)),
                 "S_AUX[t,i] without S_AUX or M_out in stage t-1 (flash residency only from staying or paging out)")
    for t in range(n):
        for k in np.flatnonzero(R[t]):
            for i in graph.nodes[k].inputs:
                if not (R[t, i] or S[t, i] or (Min[t, i] and not dma)):
                    how = "paged in" if not dma else "paged in in an earlier stage (with DMA a page-in is usable " \
                          "from the next stage)"
                    raise ScheduleError(
                        f"stage {t}, {_name(graph, int(k))}: input {_name(graph, i)} is neither resident at stage "
                        f"start, computed earlier in the stage nor {how} (dependency rule)"
                    )
    off_diag = R & ~np.eye(n, dtype=bool)
    if mode in ("paging", "none") and off_diag.any():
        fail(*_first(off_diag), f"recomputation is not allowed in mode {mode!r}")
    if mode in ("remat", "none") and (Min | Mout).any():
        fail(*_first(Min | Mout), f"paging is not allowed in mode {mode!r}")
    pinned = np.array([node.pinned for node in graph.nodes], dtype=bool)
    if pinned.any():
        for key, m in (("recomputed", off_diag), ("paged in", Min), ("paged out", Mout)):
            bad = m & pinned[None, :]
            if bad.any():
                fail(*_first(bad), f"pinned node is {key} (pinned nodes are never paged nor recomputed)")


def _decisions(schedule: Schedule) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``R, S_RAM, M_in, M_out`` as boolean arrays (what both Program forms read)."""
    return tuple(np.asarray(getattr(schedule, k), dtype=bool)  # type: ignore[return-value]
                 for k in ("R", "S_RAM", "M_in", "M_out"))


def linearize(graph: TrainingGraph, schedule: Schedule, *, mode: str = "poet", dma: bool = False) -> Program:
    """Emit the Program of a valid schedule (checked with :func:`check_schedule` first):
    synchronous transfers (:func:`_linearize_sync`) unless ``dma``."""
    check_schedule(graph, schedule, mode, dma=dma)
    if not dma:
        return _linearize_sync(graph, schedule)
    n = graph.n
    R, S, Min, Mout = _decisions(schedule)
    out: list[Instruction] = []
    starts: list[int] = []   # index of each stage's first instruction (viz)
    for t in range(n):
        starts.append(len(out))
        computes = [int(k) for k in np.flatnonzero(R[t])]
        kept = S[t + 1] if t + 1 < n else np.zeros(n, dtype=bool)   # nothing is kept past the last stage
        transfer = Min[t] | Mout[t]
        resident = [int(i) for i in np.flatnonzero(S[t])]
        # Last compute of the stage that reads each tensor (-1: nothing in the stage reads it).
        last_read = [-1] * n
        for k in computes:
            for i in graph.nodes[k].inputs:
                last_read[i] = k
        frees_after: dict[int, list[int]] = {k: [] for k in computes}
        early_frees: list[int] = []
        for i in resident:
            if kept[i] or transfer[i]:
                continue
            if last_read[i] < 0:
                early_frees.append(i)
            else:
                frees_after[last_read[i]].append(i)
        for i in computes:
            if not (kept[i] or transfer[i]):
                frees_after[max(i, last_read[i])].append(i)

        has_transfers = bool(transfer.any())
        if has_transfers and (not out or out[-1].op is not Op.FENCE):
            out.append(Instruction(Op.FENCE))
        # Frees of unneeded residents precede the transfers (see the module docstring).
        out.extend(Instruction(Op.FREE, i) for i in early_frees)
        out.extend(Instruction(Op.PAGE_OUT, int(i)) for i in np.flatnonzero(Mout[t]))
        out.extend(Instruction(Op.PAGE_IN, int(i)) for i in np.flatnonzero(Min[t]))
        for k in computes:
            out.append(Instruction(Op.COMPUTE, k))
            out.extend(Instruction(Op.FREE, i) for i in sorted(frees_after[k]))
        if has_transfers:
            out.append(Instruction(Op.FENCE))
            out.extend(Instruction(Op.FREE, int(i)) for i in np.flatnonzero(transfer & ~kept))
    return Program(n_nodes=n, instructions=tuple(out), meta={"stage_starts": starts})


def _linearize_sync(graph: TrainingGraph, schedule: Schedule) -> Program:
    """The Program of a schedule on a device without DMA (docs/model.md, v2).

    Per stage, in this order: ``FREE`` residents nothing reads, keeps or pages out;
    ``PAGE_OUT`` (then ``FENCE``, then ``FREE`` unless kept) residents nothing reads that
    are paged out; then for each compute ``k`` ascending: ``PAGE_IN`` of its paged-in
    inputs not yet in RAM, ``FENCE``, ``COMPUTE k``, then for every tensor whose last use
    in the stage was ``k``: ``PAGE_OUT`` if paged out in the stage, ``FENCE``, ``FREE``
    unless kept. A transfer is followed by a ``FENCE`` at once: it is synchronous, so
    the same Program is also valid (and equally fast) on a runtime with DMA.

    A page-in nothing reads in its stage (a DMA-style prefetch kept into the next stage)
    is made right before its first reader in a later stage, or dropped if none reads it
    before it is freed: never more RAM, never more energy than the matrices say.
    """
    n = graph.n
    R, S, Min, Mout = _decisions(schedule)
    out: list[Instruction] = []
    deferred: set[int] = set()   # "resident" by the matrices, still on flash in fact
    starts: list[int] = []   # index of each stage's first instruction (viz)
    for t in range(n):
        starts.append(len(out))
        computes = [int(k) for k in np.flatnonzero(R[t])]
        kept = S[t + 1] if t + 1 < n else np.zeros(n, dtype=bool)
        last_read = [-1] * n
        for k in computes:
            for i in graph.nodes[k].inputs:
                last_read[i] = k
        resident = [int(i) for i in np.flatnonzero(S[t])]       # by the matrices
        to_page_in = {int(i) for i in np.flatnonzero(Min[t])} | (deferred & set(resident))
        page_out = {int(i) for i in np.flatnonzero(Mout[t])} - to_page_in   # a deferred copy is on flash
        for i in resident:
            if i in to_page_in or last_read[i] >= 0:
                continue
            if i in page_out:
                out += [Instruction(Op.PAGE_OUT, i), Instruction(Op.FENCE)]
            if not kept[i]:
                out.append(Instruction(Op.FREE, i))
        # Tensors in RAM (or brought in) before the computes are done after their last reader.
        done_after: dict[int, list[int]] = {k: [] for k in computes}
        for i in to_page_in.union(resident):
            if last_read[i] >= 0:
                done_after[last_read[i]].append(i)
        for k in computes:
            done_after[max(k, last_read[k])].append(k)
        arrived: set[int] = set()
        for k in computes:
            fetch = sorted({i for i in graph.nodes[k].inputs if i in to_page_in and i not in arrived})
            if fetch:
                out += [Instruction(Op.PAGE_IN, i) for i in fetch]
                out.append(Instruction(Op.FENCE))
                arrived.update(fetch)
            out.append(Instruction(Op.COMPUTE, k))
            done = sorted(done_after[k])
            outs = [i for i in done if i in page_out]
            if outs:
                out += [Instruction(Op.PAGE_OUT, i) for i in outs]
                out.append(Instruction(Op.FENCE))
            out += [Instruction(Op.FREE, i) for i in done if not kept[i]]
        # Page-ins nothing read in this stage: made later, before a reader, if kept.
        deferred = {i for i in to_page_in - arrived if kept[i]}
    return Program(n_nodes=n, instructions=tuple(out), meta={"stage_starts": starts})
