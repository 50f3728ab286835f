"""Arena reserves: where a schedule's static arena overflowed, as a cut for the interval model.

A schedule whose live bytes fit the budget can still need a larger static arena
(fragmentation: the DAGs' arbitrary sizes leave gaps that no placement closes). Lowering
the whole budget by the overshoot (what :mod:`.milp` does for the stage models) costs
energy at every compute point, where only a few overflowed. Instead, this module reads
the planned arena back and says, per event of the interval model
(:func:`~poet_compiler.solve.formulation.interval.event`), how many bytes above the
budget the buffers live there were placed: the next solve keeps that much free at those
events only (a fixed demand in its cumulative). The search adds each round's overflow to
the reserves of earlier rounds, so a place that overflows again holds back more.

This is a heuristic cut: it removes the schedule just laid out, but also schedules that
another layout would have fitted, so a reserved model's bound is never a bound on the
problem (the interval search claims none anyway).
"""

from __future__ import annotations

import numpy as np

from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schedule.arena import buffers_of
from poet_compiler.schedule.program import Op, Program
from poet_compiler.solve.formulation.interval import Reserve, event


def instruction_events(program: Program) -> list[int]:
    """The interval model's event of each instruction of a linearized Program.

    A COMPUTE or PAGE_IN of node ``k`` in stage ``t`` (stage ``t``: the one whose first
    compute of node ``t`` comes next) is ``event(t, k)``, where the interval model starts
    that stay; any other instruction (FREE, PAGE_OUT, FENCE) belongs to the allocation
    before it."""
    n = program.n_nodes
    first_computed: set[int] = set()
    current = 0
    out: list[int] = []
    for ins in program.instructions:
        if ins.op in (Op.COMPUTE, Op.PAGE_IN):
            stage = len(first_computed)
            current = event(min(stage, n - 1), ins.node, n)
            if ins.op is Op.COMPUTE:
                first_computed.add(ins.node)
        out.append(current)
    return out


def overflow_by_event(graph: TrainingGraph, program: Program, budget: int) -> np.ndarray:
    """Bytes above ``budget`` at which the planned ``program`` placed a buffer live at
    each event (0 where the layout fits), over the events ``0 .. n·n``."""
    n = program.n_nodes
    out = np.zeros(n * n + 1, dtype=np.int64)
    events = instruction_events(program)
    offset_at = {k: ins.offset for k, ins in enumerate(program.instructions)
                 if ins.op in (Op.COMPUTE, Op.PAGE_IN)}
    for b in buffers_of(graph, program):
        off = offset_at.get(b.start)
        if off is None:
            continue
        first, last = events[b.start], events[max(b.start, b.end - 1)]
        over = off + b.size - budget
        if over > 0:
            seg = out[first:last + 1]
            np.maximum(seg, over, out=seg)
        over_work = over + b.workspace
        if b.workspace and over_work > 0:
            out[first] = max(out[first], over_work)
    return out


def as_reserves(profile: np.ndarray) -> list[Reserve]:
    """The runs of equal, positive demand of a per-event profile."""
    if not profile.size:
        return []
    bounds = np.concatenate(([0], np.flatnonzero(np.diff(profile)) + 1, [len(profile)]))
    return [Reserve(int(a), int(b), int(profile[a])) for a, b in zip(bounds[:-1], bounds[1:]) if profile[a] > 0]
