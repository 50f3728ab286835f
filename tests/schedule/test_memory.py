"""The stage memory formula of DMA schedules (stage-long transfers, docs/model.md)
equals the simulator's peak, stage by stage."""

from __future__ import annotations

import numpy as np
import pytest

from poet_compiler.schedule.linearize import linearize
from poet_compiler.schedule.memory import peak_memory, stage_memory
from poet_compiler.schedule.program import Op
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.schedule.simulate import simulate
from tests.schedule.test_linearize import paging_schedule
from tests.support.graphs import cost_table_from_graph, forward_backward_chain, random_dag
from tests.support.schedules import random_schedule


def compute_points(graph, schedule):
    """Live bytes at each COMPUTE of the DMA Program, in order: the simulator's view
    (schedule/memory.py is the stage formula of stage-long transfers)."""
    program = linearize(graph, schedule, dma=True)
    sim = simulate(graph, cost_table_from_graph(graph), program)
    return [m for ins, m in zip(program, sim.timeline) if ins.op is Op.COMPUTE], sim


def test_hand_schedule():
    g = forward_backward_chain(2)
    mem = stage_memory(g, paging_schedule())
    expected = np.zeros((5, 5), dtype=int)
    expected[0, 0], expected[1, 1], expected[2, 2], expected[3, 3], expected[4, 4] = 10, 20, 30, 30, 20
    assert np.array_equal(mem, expected)
    assert peak_memory(g, Schedule.checkpoint_all(5)) == 40


@pytest.mark.parametrize("mode", ["poet", "remat", "paging", "none"])
def test_formula_matches_simulator_at_every_compute(mode):
    for seed in range(40):
        g = random_dag(seed, 9, pinned_prob=0.1, workspace_prob=0.4)
        s = random_schedule(g, seed, mode)
        points, sim = compute_points(g, s)
        mem = stage_memory(g, s)
        assert points == [int(mem[t, k]) for t in range(g.n) for k in np.flatnonzero(s.R[t])]
        # The Program never holds more than at its compute points (frees precede transfers).
        assert sim.peak_bytes == int(mem.max())
