"""Read a Schedule back out of a Program (the inverse of linearization, where one exists).

Strategies that emit instructions directly (DTR's online eviction) can then warm-start
the MILP like any matrix strategy. Stage ``t`` of the program is the stretch that ends
with the first ``COMPUTE t``; the matrices record what the program did in it. Programs
that do things docs/model.md cannot express (a first computation out of id order, a
page-in read in its own stage) have no Schedule: :func:`schedule_from_program` returns
None for them.
"""

from __future__ import annotations

from poet_compiler.errors import ScheduleError
from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schedule.linearize import check_schedule
from poet_compiler.schedule.program import Op, Program
from poet_compiler.schedule.schedule import Schedule


def schedule_from_program(graph: TrainingGraph, program: Program, mode: str = "poet", *,
                          dma: bool = False) -> Schedule | None:
    """The stage matrices of ``program``, or None if the model cannot express it."""
    n = graph.n
    s = Schedule.empty(n)
    ram: set[int] = set()
    flash: set[int] = set()
    t = 0
    snapshot_due = False  # stage t has begun; its entry state is taken at its first real work
    carried: set[int] = set()   # paged out at the end of the last stage: resident into this one
    # Without DMA a stage's page-outs follow the last use of their tensor, so the ones
    # right after a stage's last compute still belong to it, like its FREEs and FENCEs.
    tail_ops = (Op.FREE, Op.FENCE) if dma else (Op.FREE, Op.FENCE, Op.PAGE_OUT)
    for ins in program:
        i = ins.node
        if snapshot_due and ins.op not in tail_ops:
            # The FREEs (and FENCE) right after a stage's last compute still belong to it.
            for j in ram | carried:
                s.S_RAM[t, j] = True
            for j in flash:
                s.S_AUX[t, j] = True
            flash |= carried        # on flash from this stage's page-out on
            carried.clear()
            snapshot_due = False
        if ins.op is Op.COMPUTE:
            if i > t:
                return None  # first computations out of id order: no stage structure
            s.R[t, i] = True
            ram.add(i)
            if i == t:
                t += 1
                if t == n:
                    break
                snapshot_due = True
        elif ins.op is Op.PAGE_OUT:
            if snapshot_due and i == t - 1:
                # The stage's own node, paged out right after its compute: the same as
                # keeping it into the next stage and paging it out first thing there.
                s.M_out[t, i] = True
                carried.add(i)
            else:
                s.M_out[t - 1 if snapshot_due else t, i] = True
                flash.add(i)
        elif ins.op is Op.PAGE_IN:
            s.M_in[t, i] = True
            ram.add(i)
        elif ins.op is Op.FREE:
            ram.discard(i)
    if t < n:
        return None
    try:
        check_schedule(graph, s, mode, dma=dma)
    except ScheduleError:
        return None
    return s
