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
from poet_compiler.schedule.interpreter import ProgramInterpreter
from poet_compiler.schedule.linearize import check_schedule
from poet_compiler.schedule.program import Instruction, Op, Program
from poet_compiler.schedule.schedule import Schedule


class _StageReader(ProgramInterpreter):
    """Replays ``program`` stage by stage and records each stage's decisions in the matrices."""

    # Neither a FENCE nor a MOVE is a decision of the matrices (a FENCE's place in a stage is
    # taken by before()).
    ignores = frozenset({Op.FENCE, Op.MOVE})

    def __init__(self, graph: TrainingGraph, program: Program, *, dma: bool) -> None:
        super().__init__(program)
        self.n = graph.n
        self.s = Schedule.empty(self.n)
        self.ram: set[int] = set()
        self.flash: set[int] = set()
        self.t = 0
        self.snapshot_due = False  # stage t has begun; its entry state is taken at its first real work
        self.carried: set[int] = set()   # paged out at the end of the last stage: resident into this one
        self.in_order = True             # False once a first computation comes out of id order
        # Without DMA a stage's page-outs follow the last use of their tensor, so the ones
        # right after a stage's last compute still belong to it, like its FREEs and FENCEs.
        self.tail_ops = (Op.FREE, Op.FENCE) if dma else (Op.FREE, Op.FENCE, Op.PAGE_OUT)

    def before(self, ins: Instruction) -> None:
        if self.snapshot_due and ins.op not in self.tail_ops:
            # The FREEs (and FENCE) right after a stage's last compute still belong to it.
            s, t = self.s, self.t
            for j in self.ram | self.carried:
                s.S_RAM[t, j] = True
            for j in self.flash:
                s.S_AUX[t, j] = True
            self.flash |= self.carried        # on flash from this stage's page-out on
            self.carried.clear()
            self.snapshot_due = False

    def compute(self, ins: Instruction) -> None:
        i = ins.node
        if i > self.t:
            self.in_order = False   # first computations out of id order: no stage structure
            self.stop()
            return
        self.s.R[self.t, i] = True
        self.ram.add(i)
        if i == self.t:
            self.t += 1
            if self.t == self.n:
                self.stop()   # every stage is read; what follows is the last stage's tail
                return
            self.snapshot_due = True

    def page_out(self, ins: Instruction) -> None:
        i, t = ins.node, self.t
        if self.snapshot_due and i == t - 1:
            # The stage's own node, paged out right after its compute: the same as
            # keeping it into the next stage and paging it out first thing there.
            self.s.M_out[t, i] = True
            self.carried.add(i)
        else:
            self.s.M_out[t - 1 if self.snapshot_due else t, i] = True
            self.flash.add(i)

    def page_in(self, ins: Instruction) -> None:
        self.s.M_in[self.t, ins.node] = True
        self.ram.add(ins.node)

    def free(self, ins: Instruction) -> None:
        self.ram.discard(ins.node)

    def finish(self) -> Schedule | None:
        """The matrices, or None when the program has no stage structure."""
        return self.s if self.in_order and self.t == self.n else None


def schedule_from_program(graph: TrainingGraph, program: Program, mode: str = "poet", *,
                          dma: bool = False) -> Schedule | None:
    """The stage matrices of ``program``, or None if the model cannot express it."""
    s = _StageReader(graph, program, dma=dma).run()
    if s is None:
        return None
    try:
        check_schedule(graph, s, mode, dma=dma)
    except ScheduleError:
        return None
    return s
