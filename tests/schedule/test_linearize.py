"""Linearizer: Algorithm 2 order on hand-made schedules, and the schedule rules."""

from __future__ import annotations

import numpy as np
import pytest

from poet_compiler.errors import ScheduleError
from poet_compiler.schedule.linearize import check_schedule, linearize
from poet_compiler.schedule.schedule import Schedule
from tests.support.graphs import chain_graph, forward_backward_chain, random_dag
from tests.support.schedules import random_schedule


def paging_schedule() -> Schedule:
    """f0 f1 loss b1 b0 (forward_backward_chain(2)): f0 paged out in stage 1, in in stage 2."""
    s = Schedule.empty(5)
    np.fill_diagonal(s.R, True)
    s.S_RAM[1, 0] = True
    s.M_out[1, 0] = True
    s.S_RAM[2, 1] = True
    s.S_AUX[2, 0] = s.S_AUX[3, 0] = s.S_AUX[4, 0] = True
    s.M_in[2, 0] = True
    s.S_RAM[3, 0] = s.S_RAM[3, 2] = True
    s.S_RAM[4, 3] = True
    return s


def listing(program) -> list[str]:
    return [str(ins) for ins in program]


def test_checkpoint_all_order():
    g = forward_backward_chain(2)
    prog = linearize(g, Schedule.checkpoint_all(g.n))
    assert listing(prog) == [
        "COMPUTE 0", "COMPUTE 1", "COMPUTE 2", "COMPUTE 3",
        "FREE 0", "FREE 1", "FREE 2",          # last stage: resident, unread, not kept
        "COMPUTE 4", "FREE 3", "FREE 4",
    ]
    assert prog.n_recompute == 0 and prog.arena_bytes is None


def test_paging_order_without_dma():
    """Synchronous transfers: page-out right after the last use, page-in right before
    the reader, each followed by its FENCE; the prefetch of stage 2 moves to stage 3."""
    g = forward_backward_chain(2)
    prog = linearize(g, paging_schedule())
    assert listing(prog) == [
        "COMPUTE 0", "COMPUTE 1", "PAGE_OUT 0", "FENCE", "FREE 0",
        "COMPUTE 2", "FREE 1",
        "PAGE_IN 0", "FENCE", "COMPUTE 3", "FREE 0", "FREE 2",
        "COMPUTE 4", "FREE 3", "FREE 4",
    ]


def test_page_in_read_in_its_own_stage_without_dma():
    g = forward_backward_chain(2)
    s = paging_schedule()
    s.M_in[2, 0] = False
    s.S_RAM[3, 0] = False
    s.M_in[3, 0] = True
    check_schedule(g, s)        # synchronous: usable at once
    prog = listing(linearize(g, s))
    assert prog[prog.index("PAGE_IN 0"):prog.index("COMPUTE 3") + 1] == ["PAGE_IN 0", "FENCE", "COMPUTE 3"]
    with pytest.raises(ScheduleError, match=r"stage 3, node 3 'b1': input node 0 'f0'.*next stage"):
        check_schedule(g, s, dma=True)


def test_page_out_of_a_recompute_without_dma():
    # chain 0-1-2-3: stage 3 recomputes 1 and pages it out after its last use (2).
    g = chain_graph(4)
    s = Schedule.empty(4)
    np.fill_diagonal(s.R, True)
    s.S_RAM[1, 0] = s.S_RAM[2, 0] = s.S_RAM[3, 0] = True
    s.S_RAM[2, 1] = True
    s.R[3, 1] = s.R[3, 2] = True
    s.M_out[3, 1] = True
    prog = listing(linearize(g, s))
    assert prog[prog.index("PAGE_OUT 1") - 1] == "COMPUTE 2"
    with pytest.raises(ScheduleError, match=r"M_out\[t,i\] requires S_RAM"):
        check_schedule(g, s, dma=True)


def test_paging_order_with_fences():
    g = forward_backward_chain(2)
    prog = linearize(g, paging_schedule(), dma=True)
    assert listing(prog) == [
        "COMPUTE 0",
        "FENCE", "PAGE_OUT 0", "COMPUTE 1", "FENCE", "FREE 0",
        "FENCE", "PAGE_IN 0", "COMPUTE 2", "FREE 1", "FENCE",
        "COMPUTE 3", "FREE 0", "FREE 2",
        "COMPUTE 4", "FREE 3", "FREE 4",
    ]


def test_recompute_order_and_frees():
    # chain 0-1-2-3: stage 3 recomputes 1 and 2 from resident 0 (2 dropped after stage 2).
    g = chain_graph(4)
    s = Schedule.empty(4)
    np.fill_diagonal(s.R, True)
    s.S_RAM[1, 0] = s.S_RAM[2, 0] = s.S_RAM[3, 0] = True
    s.S_RAM[2, 1] = True
    s.R[3, 1] = s.R[3, 2] = True
    assert listing(linearize(g, s)) == [
        "COMPUTE 0", "COMPUTE 1", "COMPUTE 2", "FREE 1", "FREE 2",
        "COMPUTE 1", "FREE 0", "COMPUTE 2", "FREE 1", "COMPUTE 3", "FREE 2", "FREE 3",
    ]


def test_unread_resident_is_freed_before_transfers():
    # Keep f1 into stage 3 (nothing reads it there) and page out loss during stage 3:
    # f1 is freed before the transfer is issued, loss only after the closing FENCE.
    g = forward_backward_chain(2)
    s = paging_schedule()
    s.S_RAM[3, 1] = True
    s.M_out[3, 2] = True
    s.S_AUX[4, 2] = True
    prog = listing(linearize(g, s, dma=True))
    assert prog[10:] == [
        "FREE 1", "PAGE_OUT 2", "COMPUTE 3", "FREE 0", "FENCE", "FREE 2",
        "COMPUTE 4", "FREE 3", "FREE 4",
    ]


@pytest.mark.parametrize(
    "edit, mode, message",
    [
        (lambda s: s.R.__setitem__((1, 3), True), "poet", "i > t"),
        (lambda s: s.R.__setitem__((2, 2), False), "poet", "R[t,t] must be 1"),
        (lambda s: s.S_RAM.__setitem__((4, 1), True), "poet", "RAM residency only from"),
        (lambda s: s.S_RAM.__setitem__((3, 0), False), "poet", "input node 0 'f0' is neither resident"),
        (lambda s: s.S_AUX.__setitem__((2, 0), False), "poet", "M_in[t,i] requires S_AUX"),
        (lambda s: s.S_AUX.__setitem__((1, 0), True), "poet", "flash residency only from"),
        (lambda s: s.M_out.__setitem__((2, 0), True), "poet", "M_out[t,i] requires S_RAM"),
        (lambda s: s.R.__setitem__((3, 0), True), "poet", "recomputing a tensor that is already resident"),
        (lambda s: None, "remat", "paging is not allowed in mode 'remat'"),
        (lambda s: s.R.__setitem__((4, 1), True), "paging", "input node 0 'f0' is neither"),
        (lambda s: None, "bogus", "unknown mode"),
    ],
)
def test_invalid_schedules_are_rejected(edit, mode, message):
    g = forward_backward_chain(2)
    s = paging_schedule()
    edit(s)
    with pytest.raises(ScheduleError, match=message.replace("[", r"\[").replace("]", r"\]")):
        check_schedule(g, s, mode)


def test_page_in_usable_only_next_stage():
    g = forward_backward_chain(2)
    s = paging_schedule()
    # Move the page-in of f0 to stage 3 itself: b1 reads it in the same stage -> rejected.
    s.M_in[2, 0] = False
    s.S_RAM[3, 0] = False
    s.M_in[3, 0] = True
    with pytest.raises(ScheduleError, match=r"stage 3, node 3 'b1': input node 0 'f0'.*next stage"):
        check_schedule(g, s, dma=True)


def test_mode_and_pinned_rules():
    g = chain_graph(3)
    s = Schedule.empty(3)
    np.fill_diagonal(s.R, True)
    s.S_RAM[1, 0] = True
    s.R[2, 0] = s.R[2, 1] = True
    check_schedule(g, s, "remat")
    with pytest.raises(ScheduleError, match="recomputation is not allowed in mode 'paging'"):
        check_schedule(g, s, "paging")
    with pytest.raises(ScheduleError, match="recomputation is not allowed in mode 'none'"):
        check_schedule(g, s, "none")


def test_pinned_node_cannot_be_recomputed_or_paged():
    g = chain_graph(3)
    nodes = (g.nodes[0].__class__(**{**g.nodes[0].__dict__, "pinned": True}), *g.nodes[1:])
    gp = g.__class__(name="pinned", nodes=nodes)
    s = Schedule.empty(3)
    np.fill_diagonal(s.R, True)
    s.S_RAM[1, 0] = True
    s.R[2, 0] = s.R[2, 1] = True
    check_schedule(g, s)
    with pytest.raises(ScheduleError, match="stage 2, node 0 'n0': pinned node is recomputed"):
        check_schedule(gp, s)
    s = Schedule.checkpoint_all(3)
    s.M_out[1, 0] = True
    with pytest.raises(ScheduleError, match="pinned node is paged out"):
        check_schedule(gp, s)


def test_shape_mismatch():
    with pytest.raises(ScheduleError, match="shape"):
        check_schedule(chain_graph(3), Schedule.checkpoint_all(4))


@pytest.mark.parametrize("mode", ["poet", "remat", "paging", "none"])
def test_random_valid_schedules_linearize_deterministically(mode):
    for seed in range(20):
        g = random_dag(seed, 8, pinned_prob=0.1)
        s = random_schedule(g, seed, mode)
        check_schedule(g, s, mode)
        assert linearize(g, s) == linearize(g, s.copy())
