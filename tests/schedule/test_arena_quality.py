"""Arena planner quality: never worse than the previous first-fit planner (kept here as
an independent reference), strictly better in aggregate, exact on small cases, valid
(the simulator checks every offset) and deterministic."""

from __future__ import annotations

import pytest

from poet_compiler.schedule import arena as A
from poet_compiler.schedule import packing
from poet_compiler.schedule.linearize import linearize
from poet_compiler.schedule.simulate import simulate
from tests.support.graphs import cost_table_from_graph, random_dag
from tests.support.schedules import random_schedule


def _reference_first_fit(buffers: list[A.Buffer]) -> int:
    """The earlier planner: first fit at the lowest offset in four fixed orders."""
    idx = list(range(len(buffers)))
    width = [b.size + b.workspace for b in buffers]
    life = [b.end - b.start for b in buffers]
    orders = [sorted(idx, key=lambda j: (-width[j], buffers[j].start)),
              sorted(idx, key=lambda j: (-width[j] * life[j], buffers[j].start)),
              sorted(idx, key=lambda j: (-life[j], -width[j], buffers[j].start)), idx]
    best = None
    for order in orders:
        offsets: dict[int, int] = {}
        arena = 0
        for j in order:
            b = buffers[j]
            spans = [(offsets[p], offsets[p] + packing.extent(buffers[p], b), packing.extent(b, buffers[p]))
                     for p in offsets if buffers[p].start < b.end and b.start < buffers[p].end]
            off = 0
            for cand in sorted({0, *(hi for _, hi, _ in spans)}):
                if all(cand + w <= lo or hi <= cand for lo, hi, w in spans if w > 0 and hi > lo):
                    off = cand
                    break
            offsets[j] = off
            arena = max(arena, off + width[j])
        best = arena if best is None else min(best, arena)
    return best or 0


def _programs():
    for seed in range(40):
        g = random_dag(seed, 12, workspace_prob=0.4, max_bytes=1000)
        mode = ("poet", "remat", "paging")[seed % 3]
        yield g, linearize(g, random_schedule(g, seed, mode))


def test_never_worse_than_first_fit_and_better_in_total() -> None:
    new_total = old_total = 0
    for g, program in _programs():
        planned = A.plan_arena(g, program)
        simulate(g, cost_table_from_graph(g), planned)          # no overlap, within the arena
        old = _reference_first_fit(A.buffers_of(g, program))
        assert planned.meta["peak_bytes"] <= planned.arena_bytes <= old
        new_total += planned.arena_bytes
        old_total += old
    assert new_total < old_total


def test_deterministic_and_effort_monotone() -> None:
    for g, program in list(_programs())[:10]:
        a = A.plan_arena(g, program)
        assert A.plan_arena(g, program) == a
        assert A.plan_arena(g, program, effort=4).arena_bytes <= a.arena_bytes


def test_exact_packing_reaches_the_peak_from_a_poor_hint() -> None:
    """a = [0,4) 4 B, b = [1,2) 2 B, c = [2,6) 2 B, d = [4,6) 4 B: peak 6 (a+b, a+c, c+d).
    Hinted with a valid but wasteful layout (everything 10 B up), CP-SAT packs to 6."""
    bufs = [A.Buffer(0, 0, 4, 4, 0), A.Buffer(1, 1, 2, 2, 0), A.Buffer(2, 2, 6, 2, 0), A.Buffer(3, 4, 6, 4, 0)]
    inst = packing.Instance(bufs)
    arena, offsets = inst.place([0, 1, 2, 3], False)
    poor = [o + 10 for o in offsets]
    assert inst.valid(poor)
    found = A._exact(inst, poor, arena + 10, A.peak_live_bytes(bufs), A.ExactSearch(1.0))
    assert found is not None and found[0] == A.peak_live_bytes(bufs) == 6
    assert inst.valid(found[1])


@pytest.mark.parametrize("seed", range(6))
def test_exact_layout_is_valid_and_not_above_hint(seed: int) -> None:
    g = random_dag(seed, 10, workspace_prob=0.5, max_bytes=500)
    program = linearize(g, random_schedule(g, seed, "poet"))
    bufs = A.buffers_of(g, program)
    inst = packing.Instance(bufs)
    arena, offsets = inst.place(list(range(len(bufs))), False)
    found = A._exact(inst, offsets, arena, A.peak_live_bytes(bufs), A.ExactSearch(1.0))
    assert found is not None, "CP-SAT found no layout within the hint's arena on a 10-node graph"
    assert inst.valid(found[1])
    assert A.peak_live_bytes(bufs) <= found[0] <= arena
