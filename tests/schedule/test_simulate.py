"""Simulator: hand-computed figures, and every rule it must enforce."""

from __future__ import annotations

from dataclasses import replace

import pytest

from poet_compiler.errors import ScheduleError
from poet_compiler.schedule.arena import plan_arena
from poet_compiler.schedule.linearize import linearize
from poet_compiler.schedule.program import Instruction, Op, Program
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.schedule.simulate import simulate
from tests.schedule.test_linearize import paging_schedule
from tests.support.graphs import cost_table_from_graph, forward_backward_chain

G = forward_backward_chain(2)   # f0 f1 loss b1 b0, 10 bytes each, unit costs


def prog(*text: str, arena: int | None = None) -> Program:
    out = []
    for item in text:
        parts = item.split()
        op = Op[parts[0]]
        node = int(parts[1]) if len(parts) > 1 else -1
        offset = int(parts[2].lstrip("@")) if len(parts) > 2 else None
        out.append(Instruction(op, node, offset))
    return Program(n_nodes=G.n, instructions=tuple(out), arena_bytes=arena)


def test_checkpoint_all_figures():
    costs = cost_table_from_graph(G)
    sim = simulate(G, costs, linearize(G, Schedule.checkpoint_all(G.n)))
    assert sim.energy_j == 5.0 and sim.compute_j == 5.0 and sim.runtime_s == 5.0
    assert sim.peak_bytes == 40
    assert sim.timeline == (10, 20, 30, 40, 30, 20, 10, 20, 10, 0)
    assert (sim.n_compute, sim.n_recompute, sim.n_page_in, sim.n_page_out) == (5, 0, 0, 0)


@pytest.mark.parametrize(
    "dma, static_w, runtime, energy",
    [
        (False, 0.0, 6.0, 5.5),      # windows 1 + (1+.5) + 0 + (1+.5) + 2
        (True, 0.0, 5.0, 5.5),       # windows 1 + max(1,.5) + 0 + max(1,.5) + 2
        (False, 0.1, 6.0, 6.1),      # + static 0.1 W * 6 s
    ],
)
def test_paging_figures(dma, static_w, runtime, energy):
    costs = cost_table_from_graph(G, dma=dma, static_w=static_w)
    # The DMA-style program (stage-long transfers) on both kinds of device.
    sim = simulate(G, costs, linearize(G, paging_schedule(), dma=True))
    assert sim.runtime_s == pytest.approx(runtime)
    assert sim.energy_j == pytest.approx(energy)
    assert sim.static_j == pytest.approx(static_w * runtime)
    assert sim.peak_bytes == 30
    assert (sim.n_page_in, sim.n_page_out, sim.page_in_bytes, sim.page_out_bytes) == (1, 1, 10, 10)
    assert sim.timeline[:10] == (10, 10, 10, 20, 20, 10, 10, 20, 30, 20)


def test_workspace_counts_at_the_compute_only():
    nodes = list(G.nodes)
    nodes[1] = replace(nodes[1], workspace_bytes=25)
    g = replace(G, nodes=tuple(nodes))
    sim = simulate(g, cost_table_from_graph(g), linearize(g, Schedule.checkpoint_all(g.n)))
    assert sim.timeline[:3] == (10, 45, 30) and sim.peak_bytes == 45


ALL = ("COMPUTE 0", "COMPUTE 1", "COMPUTE 2", "COMPUTE 3", "COMPUTE 4")


@pytest.mark.parametrize(
    "program, message",
    [
        (("COMPUTE 0", "FREE 0", "COMPUTE 1"),
         r"instruction 2 \(COMPUTE 1 'f1'\): input 0 'f0' is not in RAM \(freed at instruction 1\)"),
        (("COMPUTE 1",), r"instruction 0 \(COMPUTE 1 'f1'\): input 0 'f0' is not in RAM \(never made resident\)"),
        (("COMPUTE 0", "COMPUTE 0"), r"instruction 1 .*double compute of a resident tensor"),
        (("COMPUTE 0", "FREE 0", "PAGE_IN 0"), r"instruction 2 \(PAGE_IN 0 'f0'\): page-in without a flash copy"),
        (("COMPUTE 0", "PAGE_OUT 0", "PAGE_IN 0"), r"page-in without a flash copy"),
        (("COMPUTE 0", "PAGE_OUT 0", "FREE 0"), r"instruction 2 \(FREE 0 'f0'\): free of a tensor that is still being paged out"),
        (("COMPUTE 0", "PAGE_OUT 0", "FENCE", "FREE 0", "PAGE_IN 0", "COMPUTE 1"),
         r"instruction 5 \(COMPUTE 1 'f1'\): input 0 'f0' is still being paged in"),
        (("COMPUTE 0", "PAGE_OUT 0", "FENCE", "FREE 0", "PAGE_IN 0", "FREE 0"), r"still being paged in"),
        (("COMPUTE 0", "FREE 0", "PAGE_OUT 0"), r"page-out of a tensor that is not in RAM \(freed at instruction 1\)"),
        (("COMPUTE 0", "PAGE_OUT 0", "PAGE_OUT 0"), r"already in flight"),
        (("COMPUTE 0", "FREE 0", "FREE 0"), r"instruction 2 \(FREE 0 'f0'\): free of a tensor that is not in RAM"),
        (("COMPUTE 0", "PAGE_OUT 0", *ALL[1:]), r"end of program: transfers of nodes \[0\] were never completed"),
        (ALL[:4], r"end of program: node 4 'b0' is never computed"),
        (("COMPUTE 7",), r"node 7 does not exist"),
    ],
)
def test_invalid_programs_are_rejected(program, message):
    with pytest.raises(ScheduleError, match=message):
        simulate(G, cost_table_from_graph(G), prog(*program))


def test_budget_overflow_names_where_and_by_how_much():
    p = linearize(G, Schedule.checkpoint_all(G.n))
    simulate(G, cost_table_from_graph(G), p, ram_budget_bytes=40)
    with pytest.raises(ScheduleError, match=r"instruction 3 \(COMPUTE 3 'b1'\): live bytes 40 exceed the RAM budget 35 by 5 bytes"):
        simulate(G, cost_table_from_graph(G), p, ram_budget_bytes=35)


def test_deadline():
    p = linearize(G, paging_schedule())
    costs = cost_table_from_graph(G)
    simulate(G, costs, p, deadline_s=6.0)
    with pytest.raises(ScheduleError, match=r"runtime 6 s exceeds the deadline 5.5 s by 0.5 s"):
        simulate(G, costs, p, deadline_s=5.5)


def test_arena_overlap_and_overflow_are_caught():
    costs = cost_table_from_graph(G)
    planned = plan_arena(G, linearize(G, paging_schedule()))
    simulate(G, costs, planned)
    # Put the second buffer where the first (still live) one is.
    ins = list(planned.instructions)
    k = next(j for j, x in enumerate(ins) if x.op is Op.COMPUTE and x.node == 1)
    first = ins[0].offset
    ins[k] = replace(ins[k], offset=first)
    with pytest.raises(ScheduleError, match=rf"instruction {k} \(COMPUTE 1 'f1'\): arena: .*overlaps live"):
        simulate(G, costs, replace(planned, instructions=tuple(ins)))
    with pytest.raises(ScheduleError, match=r"arena: .*outside the arena \[0, 25\)"):
        simulate(G, costs, replace(planned, arena_bytes=25))
    # A buffer with no offset in a planned program.
    ins = list(planned.instructions)
    ins[0] = replace(ins[0], offset=None)
    with pytest.raises(ScheduleError, match="no arena offset"):
        simulate(G, costs, replace(planned, instructions=tuple(ins)))


def test_arena_checks_workspace_region():
    nodes = list(G.nodes)
    nodes[1] = replace(nodes[1], workspace_bytes=5)
    g = replace(G, nodes=tuple(nodes))
    costs = cost_table_from_graph(g)
    # f0 at [15, 25); f1 at 0 with workspace [10, 15): fits. At 5, the workspace hits f0.
    ok = Program(g.n, (Instruction(Op.COMPUTE, 0, 15), Instruction(Op.COMPUTE, 1, 0), Instruction(Op.FREE, 0, 15),
                       Instruction(Op.COMPUTE, 2, 15), Instruction(Op.COMPUTE, 3, 30), Instruction(Op.COMPUTE, 4, 40)),
                 arena_bytes=50)
    with pytest.raises(ScheduleError, match="input 0 'f0' is not in RAM"):
        simulate(g, costs, ok)   # b1 reads f0, freed: the program is wrong, but the arena was fine
    bad = replace(ok, instructions=(Instruction(Op.COMPUTE, 0, 15), Instruction(Op.COMPUTE, 1, 6)))
    with pytest.raises(ScheduleError, match=r"output\+workspace of node 1 at \[6, 21\) overlaps"):
        simulate(g, costs, bad)
