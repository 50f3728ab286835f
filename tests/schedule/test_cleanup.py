"""Cleanup removes pointless work and never makes energy, time or peak worse."""

from __future__ import annotations

import itertools

import pytest

from poet_compiler.schedule.cleanup import remove_pointless_work
from poet_compiler.schedule.linearize import linearize
from poet_compiler.schedule.program import Instruction, Op, Program
from poet_compiler.schedule.simulate import simulate
from tests.schedule.test_linearize import paging_schedule
from tests.support.graphs import cost_table_from_graph, forward_backward_chain, random_dag
from tests.support.schedules import random_schedule


def test_hand_program():
    g = forward_backward_chain(2)
    costs = cost_table_from_graph(g)
    prog = linearize(g, paging_schedule(), dma=True)
    clean = remove_pointless_work(g, prog)
    # Only the FENCE that closed an empty window (after "FREE 0") goes; the paging stays.
    assert [str(i) for i in clean] == [
        "COMPUTE 0", "FENCE", "PAGE_OUT 0", "COMPUTE 1", "FENCE", "FREE 0",
        "PAGE_IN 0", "COMPUTE 2", "FREE 1", "FENCE",
        "COMPUTE 3", "FREE 0", "FREE 2", "COMPUTE 4", "FREE 3", "FREE 4",
    ]
    before, after = simulate(g, costs, prog), simulate(g, costs, clean)
    assert (after.energy_j, after.runtime_s, after.peak_bytes) == (before.energy_j, before.runtime_s, before.peak_bytes)


def test_removes_unused_transfers_and_recompute():
    g = forward_backward_chain(2)
    ins = [Instruction(Op[x.split()[0]], int(x.split()[1]) if " " in x else -1) for x in (
        "COMPUTE 0", "FENCE", "PAGE_OUT 0", "COMPUTE 1", "FENCE",       # page-out never paged back in
        "COMPUTE 2", "FREE 1", "COMPUTE 1", "FREE 1",                   # recompute nobody reads
        "COMPUTE 3", "FREE 0", "FREE 2", "COMPUTE 4", "FREE 3", "FREE 4",
    )]
    prog = Program(g.n, tuple(ins))
    clean = remove_pointless_work(g, prog)
    assert [str(i) for i in clean] == [
        "COMPUTE 0", "COMPUTE 1", "COMPUTE 2", "FREE 1",
        "COMPUTE 3", "FREE 0", "FREE 2", "COMPUTE 4", "FREE 3", "FREE 4",
    ]
    costs = cost_table_from_graph(g, dma=True)
    assert simulate(g, costs, clean).energy_j == simulate(g, costs, prog).energy_j - 1.25


@pytest.mark.parametrize("mode, dma", list(itertools.product(["poet", "remat", "paging"], [False, True])))
def test_never_worse_on_random_schedules(mode, dma):
    removed = 0
    for seed in range(40):
        g = random_dag(seed, 9, workspace_prob=0.3)
        costs = cost_table_from_graph(g, dma=dma, static_w=0.05)
        prog = linearize(g, random_schedule(g, seed, mode))
        clean = remove_pointless_work(g, prog)
        before, after = simulate(g, costs, prog), simulate(g, costs, clean)
        assert after.energy_j <= before.energy_j + 1e-12
        assert after.runtime_s <= before.runtime_s + 1e-12
        assert after.peak_bytes <= before.peak_bytes
        assert after.n_compute >= g.n
        assert remove_pointless_work(g, clean) == clean     # a fixpoint
        removed += len(prog) - len(clean)
    assert removed > 0


def test_a_cleaned_program_has_no_stale_stage_starts():
    """The linearizer records each stage's first instruction; once cleanup removes
    instructions those indices are stale, so viz draws the stages from the cleaned
    instructions themselves (as for a Program without the record)."""
    from poet_compiler.viz import stage_starts

    checked = 0
    for seed in range(40):
        g = random_dag(seed, 9, workspace_prob=0.3)
        prog = linearize(g, random_schedule(g, seed, "poet"), dma=True)
        clean = remove_pointless_work(g, prog)
        if len(clean) == len(prog):
            continue
        assert stage_starts(clean) == stage_starts(Program(clean.n_nodes, clean.instructions))
        checked += 1
    assert checked > 0
