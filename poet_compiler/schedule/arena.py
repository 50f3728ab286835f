"""Static arena planner: every buffer of a Program gets a fixed offset in one RAM arena.

A microcontroller has no malloc, so the Program's buffers are laid out offline. This is
offline dynamic storage allocation: each buffer is an interval of instructions (from its
allocation — ``COMPUTE k`` or ``PAGE_IN i`` — to its ``FREE``, or the program's end) and
a size; buffers whose intervals overlap must not overlap in the arena. Minimizing the
arena is NP-hard, so we use the greedy of TFLite Micro's planner: place buffers one by
one, in some order, at the lowest offset that does not collide with any already-placed
buffer live at the same time; try several orders and keep the smallest arena (ties go to
the earlier order, so the result is deterministic).

Workspace convention (the simulator checks it): the workspace of ``COMPUTE k`` lies right
after its output buffer, at ``offset + output_bytes``, for the duration of that compute
only. So an output buffer is ``output_bytes + workspace_bytes`` wide against the buffers
live during its compute and ``output_bytes`` wide against those allocated later.

``FREE i`` and ``PAGE_OUT i`` carry the offset of the buffer they touch; ``FENCE`` none.
``program.meta`` receives ``peak_bytes`` (largest live bytes, workspace included),
``fragmentation`` (= arena_bytes / peak_bytes, >= 1) and ``arena_order`` (which order won).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from poet_compiler.errors import ScheduleError
from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schedule.program import Instruction, Op, Program


@dataclass(frozen=True)
class Buffer:
    """One allocation: live over instructions ``[start, end)``."""

    node: int
    start: int         # index of the allocating instruction
    end: int           # index of its FREE, or len(program) if never freed
    size: int          # output bytes
    workspace: int     # bytes after the output during the allocating compute only

    def live_at(self, idx: int) -> bool:
        return self.start <= idx < self.end


def buffers_of(graph: TrainingGraph, program: Program) -> list[Buffer]:
    """The Program's allocations in order of their allocating instruction."""
    open_: dict[int, tuple[int, int]] = {}      # node -> (start, workspace)
    out: list[Buffer] = []
    for idx, ins in enumerate(program.instructions):
        if ins.op in (Op.COMPUTE, Op.PAGE_IN):
            if ins.node in open_:
                raise ScheduleError(f"instruction {idx} ({ins}): node {ins.node} already has a live buffer")
            work = graph.nodes[ins.node].workspace_bytes if ins.op is Op.COMPUTE else 0
            open_[ins.node] = (idx, work)
        elif ins.op is Op.FREE:
            if ins.node not in open_:
                raise ScheduleError(f"instruction {idx} ({ins}): free of node {ins.node}, which has no live buffer")
            start, work = open_.pop(ins.node)
            out.append(Buffer(ins.node, start, idx, graph.nodes[ins.node].output_bytes, work))
    end = len(program.instructions)
    out.extend(Buffer(i, s, end, graph.nodes[i].output_bytes, w) for i, (s, w) in open_.items())
    out.sort(key=lambda b: b.start)
    return out


def peak_live_bytes(buffers: list[Buffer]) -> int:
    """Largest sum of live buffer bytes at any instruction, workspaces included."""
    events: dict[int, int] = {}
    for b in buffers:
        events[b.start] = events.get(b.start, 0) + b.size
        events[b.end] = events.get(b.end, 0) - b.size
    work_at = {b.start: b.workspace for b in buffers}
    live = peak = 0
    for idx in sorted(events.keys() | work_at.keys()):
        live += events.get(idx, 0)
        peak = max(peak, live + work_at.get(idx, 0))
    return peak


def _extent(b: Buffer, other: Buffer) -> int:
    """Width of ``b`` as ``other`` sees it: its workspace counts if ``other`` is live then."""
    return b.size + (b.workspace if other.live_at(b.start) else 0)


def _place(buffers: list[Buffer], order: list[int]) -> tuple[int, list[int]]:
    """First fit at the lowest offset, in ``order``; returns (arena bytes, offsets)."""
    offsets = [-1] * len(buffers)
    placed: list[int] = []
    arena = 0
    for j in order:
        b = buffers[j]
        conflicts = []
        for p in placed:
            c = buffers[p]
            if c.start < b.end and b.start < c.end:
                lo, width_c = offsets[p], _extent(c, b)
                if width_c > 0:
                    conflicts.append((lo, lo + width_c, _extent(b, c)))
        conflicts.sort()
        offset = 0
        if b.size + b.workspace > 0:
            candidates = [0] + [hi for _, hi, _ in conflicts]
            for cand in sorted(set(candidates)):
                if all(cand + width_b <= lo or hi <= cand for lo, hi, width_b in conflicts if width_b > 0):
                    offset = cand
                    break
        offsets[j] = offset
        placed.append(j)
        arena = max(arena, offset + b.size + b.workspace)
    return arena, offsets


def _orders(buffers: list[Buffer], extra: int) -> list[tuple[str, list[int]]]:
    idx = list(range(len(buffers)))
    width = [b.size + b.workspace for b in buffers]
    life = [b.end - b.start for b in buffers]
    orders = [
        ("size", sorted(idx, key=lambda j: (-width[j], buffers[j].start))),
        ("size*lifetime", sorted(idx, key=lambda j: (-width[j] * life[j], buffers[j].start))),
        ("lifetime", sorted(idx, key=lambda j: (-life[j], -width[j], buffers[j].start))),
        ("program", idx),
    ]
    rng = random.Random(0)   # fixed seed: same program, same layout
    for r in range(extra):
        # Perturbed size order: sort by size times a random factor in [0.5, 1.5).
        noise = [0.5 + rng.random() for _ in idx]
        orders.append((f"perturbed#{r}", sorted(idx, key=lambda j: (-width[j] * noise[j], j))))
    return orders


def plan_arena(graph: TrainingGraph, program: Program, *, effort: int = 0,
               budget_bytes: int | None = None) -> Program:
    """Return ``program`` with every buffer's offset and ``arena_bytes`` set.

    ``effort`` adds that many seeded perturbed orders to the four fixed ones; with a
    ``budget_bytes``, the search stops at the first layout that fits it.
    """
    buffers = buffers_of(graph, program)
    peak = peak_live_bytes(buffers)
    best: tuple[int, list[int], str] | None = None
    for name, order in _orders(buffers, effort):
        arena, offsets = _place(buffers, order)
        if best is None or arena < best[0]:
            best = (arena, offsets, name)
        if best[0] <= peak or (budget_bytes is not None and best[0] <= budget_bytes):
            break   # cannot do better than the peak, or good enough for the caller
    arena, offsets, name = best if best is not None else (0, [], "empty")
    at_start = {b.start: off for b, off in zip(buffers, offsets)}
    current: dict[int, int] = {}
    out: list[Instruction] = []
    for idx, ins in enumerate(program.instructions):
        if ins.op in (Op.COMPUTE, Op.PAGE_IN):
            current[ins.node] = at_start[idx]
            out.append(replace(ins, offset=at_start[idx]))
        elif ins.op in (Op.FREE, Op.PAGE_OUT):
            out.append(replace(ins, offset=current.get(ins.node)))
        else:
            out.append(replace(ins, offset=None))
    meta = dict(program.meta)
    meta.update(peak_bytes=peak, fragmentation=(arena / peak) if peak else 1.0, arena_order=name)
    return Program(n_nodes=program.n_nodes, instructions=tuple(out), arena_bytes=arena, meta=meta)
