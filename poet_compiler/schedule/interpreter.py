"""One walk over a Program, one method per opcode (in the spirit of ``torch.fx.Interpreter``).

A pass that reads a Program subclasses :class:`ProgramInterpreter` and overrides the
opcodes it cares about, instead of writing its own loop with an ``if``/``elif`` on
:class:`~poet_compiler.schedule.program.Op`::

    class CountRecomputes(ProgramInterpreter):
        def start(self) -> None:
            self.seen, self.recomputes = set(), 0

        def compute(self, ins: Instruction) -> None:
            self.recomputes += ins.node in self.seen
            self.seen.add(ins.node)

        def finish(self) -> int:
            return self.recomputes

    CountRecomputes(program).run()

:meth:`ProgramInterpreter.run` calls :meth:`~ProgramInterpreter.start`, then
:meth:`~ProgramInterpreter.run_instruction` for every instruction in order, and returns
what :meth:`~ProgramInterpreter.finish` returns. :meth:`~ProgramInterpreter.run_instruction`
sets :attr:`~ProgramInterpreter.index` and calls :meth:`~ProgramInterpreter.before`, the
opcode's method and :meth:`~ProgramInterpreter.after`: a pass that does the same thing
around every instruction (check its operand, record a timeline) writes it once there. A
pass that has its answer before the end calls :meth:`~ProgramInterpreter.stop`; the walk
then ends after the current instruction, and :meth:`~ProgramInterpreter.finish` still
runs. The default methods do nothing: the walk defines no semantics of its own. The rules
of execution (what each instruction needs and does, time, energy, memory) are
docs/model.md's, and the simulator (:mod:`poet_compiler.schedule.simulate`), itself a
subclass, is their independent, executable judge.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from poet_compiler.errors import ScheduleError
from poet_compiler.schedule.program import Instruction, Op, Program


class ProgramInterpreter:
    """Walks ``instructions`` (a :class:`Program` or a plain sequence of instructions)."""

    def __init__(self, instructions: Program | Sequence[Instruction]) -> None:
        self.instructions: Sequence[Instruction] = (
            instructions.instructions if isinstance(instructions, Program) else instructions
        )
        self.index = -1      # index of the instruction being run (-1 before the walk)
        self.stopped = False  # set by stop(): run() ends after the current instruction
        self._dispatch: dict[Op, Callable[[Instruction], None]] = {
            Op.COMPUTE: self.compute,
            Op.PAGE_OUT: self.page_out,
            Op.PAGE_IN: self.page_in,
            Op.FREE: self.free,
            Op.FENCE: self.fence,
            Op.MOVE: self.move,
        }

    def run(self) -> Any:
        self.stopped = False
        self.start()
        for idx, ins in enumerate(self.instructions):
            self.run_instruction(idx, ins)
            if self.stopped:
                break
        return self.finish()

    def run_instruction(self, idx: int, ins: Instruction) -> None:
        """Run one instruction: :meth:`before`, its opcode's method, :meth:`after`."""
        self.index = idx
        handler = self._dispatch.get(ins.op)
        if handler is None:
            raise ScheduleError(f"instruction {idx} ({ins}): unknown opcode {ins.op!r}")
        self.before(ins)
        handler(ins)
        self.after(ins)

    def stop(self) -> None:
        """End the walk after the current instruction (:meth:`finish` still runs)."""
        self.stopped = True

    # -- hooks: override the ones a pass needs ----------------------------------------
    def start(self) -> None:
        """Before the first instruction."""

    def finish(self) -> Any:
        """After the last instruction; its value is :meth:`run`'s."""
        return None

    def before(self, ins: Instruction) -> None:
        """Before every instruction's own method (:attr:`index` is already set)."""

    def after(self, ins: Instruction) -> None:
        """After every instruction's own method."""

    def compute(self, ins: Instruction) -> None:
        """``COMPUTE ins.node``."""

    def page_out(self, ins: Instruction) -> None:
        """``PAGE_OUT ins.node``."""

    def page_in(self, ins: Instruction) -> None:
        """``PAGE_IN ins.node``."""

    def free(self, ins: Instruction) -> None:
        """``FREE ins.node``."""

    def fence(self, ins: Instruction) -> None:
        """``FENCE``."""

    def move(self, ins: Instruction) -> None:
        """``MOVE ins.node`` to arena offset ``ins.offset``."""
