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
runs. The walk defines no semantics of its own. The rules of execution (what each
instruction needs and does, time, energy, memory) are docs/model.md's, and the simulator
(:mod:`poet_compiler.schedule.simulate`), itself a subclass, is their independent,
executable judge.

Every opcode is handled or skipped on purpose: a subclass overrides its method or lists
the opcode in :attr:`~ProgramInterpreter.ignores` (with the reason), else defining the
class raises ``TypeError`` naming the opcode; the base's own opcode methods raise
``NotImplementedError``. A new opcode in :class:`~poet_compiler.schedule.program.Op` thus
fails every pass that has not decided what it does with it, when its module is imported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from poet_compiler.errors import ScheduleError
from poet_compiler.schedule.program import Instruction, Op, Program

#: The method that runs each opcode.
METHODS: dict[Op, str] = {Op.COMPUTE: "compute", Op.PAGE_OUT: "page_out", Op.PAGE_IN: "page_in", Op.FREE: "free",
                          Op.FENCE: "fence", Op.MOVE: "move"}


class ProgramInterpreter:
    """Walks ``instructions`` (a :class:`Program` or a plain sequence of instructions)."""

    #: The opcodes this pass skips on purpose (module docstring): their instructions run
    #: :meth:`before` and :meth:`after` only.
    ignores: ClassVar[frozenset[Op]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        missing = [op for op, name in METHODS.items()
                   if getattr(cls, name) is getattr(ProgramInterpreter, name) and op not in cls.ignores]
        if missing:
            raise TypeError(f"{cls.__qualname__} handles no {', '.join(op.name for op in missing)}: override "
                            f"{', '.join(METHODS[op] + '()' for op in missing)} or list the opcode(s) in its "
                            "ignores, with the reason (poet_compiler/schedule/interpreter.py)")

    def __init__(self, instructions: Program | Sequence[Instruction]) -> None:
        self.instructions: Sequence[Instruction] = (
            instructions.instructions if isinstance(instructions, Program) else instructions
        )
        self.index = -1      # index of the instruction being run (-1 before the walk)
        self.stopped = False  # set by stop(): run() ends after the current instruction
        self._dispatch: dict[Op, Callable[[Instruction], None]] = {
            op: _skip if op in self.ignores else getattr(self, name) for op, name in METHODS.items()
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

    # -- the opcodes: a subclass overrides each, or lists it in ``ignores`` ---------------
    def compute(self, ins: Instruction) -> None:
        """``COMPUTE ins.node``."""
        self._unhandled(ins)

    def page_out(self, ins: Instruction) -> None:
        """``PAGE_OUT ins.node``."""
        self._unhandled(ins)

    def page_in(self, ins: Instruction) -> None:
        """``PAGE_IN ins.node``."""
        self._unhandled(ins)

    def free(self, ins: Instruction) -> None:
        """``FREE ins.node``."""
        self._unhandled(ins)

    def fence(self, ins: Instruction) -> None:
        """``FENCE``."""
        self._unhandled(ins)

    def move(self, ins: Instruction) -> None:
        """``MOVE ins.node`` to arena offset ``ins.offset``."""
        self._unhandled(ins)

    def _unhandled(self, ins: Instruction) -> None:
        raise NotImplementedError(f"{type(self).__qualname__} does not handle {ins.op.name} (instruction "
                                  f"{self.index}): override {METHODS[ins.op]}() or list it in ignores")


def _skip(ins: Instruction) -> None:
    """An ignored opcode's method."""
