"""ProgramInterpreter: one walk, one method per opcode; cleanup's lifetimes are built on it."""

from __future__ import annotations

import numpy as np

from poet_compiler import viz
from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schedule.cleanup import _lifetimes
from poet_compiler.schedule.interpreter import ProgramInterpreter
from poet_compiler.schedule.linearize import linearize
from poet_compiler.schedule.program import Instruction, Op, Program
from poet_compiler.solve.baselines import BASELINES
from tests.support.graphs import random_problem


class _Recorder(ProgramInterpreter):
    ignores = frozenset({Op.MOVE})   # the programs here have none

    def start(self) -> None:
        self.calls: list[tuple[str, int, int]] = [("start", self.index, -1)]

    def compute(self, ins: Instruction) -> None:
        self.calls.append(("compute", self.index, ins.node))

    def page_out(self, ins: Instruction) -> None:
        self.calls.append(("page_out", self.index, ins.node))

    def page_in(self, ins: Instruction) -> None:
        self.calls.append(("page_in", self.index, ins.node))

    def free(self, ins: Instruction) -> None:
        self.calls.append(("free", self.index, ins.node))

    def fence(self, ins: Instruction) -> None:
        self.calls.append(("fence", self.index, ins.node))

    def finish(self) -> list[tuple[str, int, int]]:
        return self.calls


def test_one_method_per_opcode_in_program_order() -> None:
    ins = (Instruction(Op.COMPUTE, 0), Instruction(Op.PAGE_OUT, 0), Instruction(Op.FENCE),
           Instruction(Op.FREE, 0), Instruction(Op.PAGE_IN, 0), Instruction(Op.FENCE), Instruction(Op.COMPUTE, 1))
    expected = [("start", -1, -1), ("compute", 0, 0), ("page_out", 1, 0), ("fence", 2, -1), ("free", 3, 0),
                ("page_in", 4, 0), ("fence", 5, -1), ("compute", 6, 1)]
    assert _Recorder(Program(n_nodes=2, instructions=ins)).run() == expected
    assert _Recorder(list(ins)).run() == expected            # a plain instruction list too


def test_ignored_opcodes_do_nothing_and_the_walk_returns_none() -> None:
    class _Silent(ProgramInterpreter):
        ignores = frozenset(Op)

    program = Program(n_nodes=1, instructions=(Instruction(Op.COMPUTE, 0), Instruction(Op.FREE, 0)))
    walker = _Silent(program)
    assert walker.run() is None and walker.index == 1


def test_a_pass_that_forgets_an_opcode_fails_when_it_is_defined() -> None:
    """A subclass must handle every opcode or skip it on purpose (``ignores``): one that
    forgets MOVE (or a new opcode) fails at its definition, not silently on a program."""
    import pytest

    with pytest.raises(TypeError, match=r"_Forgetful handles no FENCE, MOVE: override fence\(\), move\(\)"):
        class _Forgetful(ProgramInterpreter):
            def compute(self, ins: Instruction) -> None: ...
            def page_out(self, ins: Instruction) -> None: ...
            def page_in(self, ins: Instruction) -> None: ...
            def free(self, ins: Instruction) -> None: ...

    class _Careful(ProgramInterpreter):
        ignores = frozenset({Op.FENCE, Op.MOVE})

        def compute(self, ins: Instruction) -> None: ...
        def page_out(self, ins: Instruction) -> None: ...
        def page_in(self, ins: Instruction) -> None: ...
        def free(self, ins: Instruction) -> None: ...

    _Careful(Program(n_nodes=1, instructions=(Instruction(Op.COMPUTE, 0), Instruction(Op.FENCE)))).run()
    # The base class itself handles nothing: its opcode methods raise.
    with pytest.raises(NotImplementedError, match="does not handle COMPUTE"):
        ProgramInterpreter(Program(n_nodes=1, instructions=(Instruction(Op.COMPUTE, 0),))).run()


class _Hooked(ProgramInterpreter):
    """Records the per-instruction hooks around the opcode's method; stops at ``stop_at``."""

    ignores = frozenset({Op.PAGE_OUT, Op.PAGE_IN, Op.FENCE, Op.MOVE})   # hooks only around them

    def __init__(self, program: Program, stop_at: int | None = None) -> None:
        super().__init__(program)
        self.stop_at = stop_at
        self.calls: list[tuple[str, int]] = []

    def before(self, ins: Instruction) -> None:
        self.calls.append(("before", self.index))

    def after(self, ins: Instruction) -> None:
        self.calls.append(("after", self.index))
        if self.index == self.stop_at:
            self.stop()

    def compute(self, ins: Instruction) -> None:
        self.calls.append(("compute", self.index))

    def free(self, ins: Instruction) -> None:
        self.calls.append(("free", self.index))

    def finish(self) -> list[tuple[str, int]]:
        return [*self.calls, ("finish", self.index)]


def test_before_and_after_wrap_every_instruction_and_stop_ends_the_walk() -> None:
    program = Program(n_nodes=2, instructions=(Instruction(Op.COMPUTE, 0), Instruction(Op.COMPUTE, 1),
                                               Instruction(Op.FREE, 0)))
    whole = [("before", 0), ("compute", 0), ("after", 0), ("before", 1), ("compute", 1), ("after", 1),
             ("before", 2), ("free", 2), ("after", 2), ("finish", 2)]
    assert _Hooked(program).run() == whole
    walker = _Hooked(program, stop_at=1)
    assert walker.run() == [*whole[:6], ("finish", 1)]      # finish() still runs after stop()
    walker.calls.clear()
    assert walker.run() == [*whole[:6], ("finish", 1)]      # a second run() starts over


def _reference_lifetimes(graph: TrainingGraph, ins: list[Instruction]) -> list[tuple[int, int | None, bool, bool]]:
    """cleanup's walk as it was written before the interpreter (an if/elif on Op)."""
    open_: dict[int, int] = {}
    state: dict[int, list] = {}
    for idx, x in enumerate(ins):
        if x.op in (Op.COMPUTE, Op.PAGE_IN):
            if x.op is Op.COMPUTE:
                for j in graph.nodes[x.node].inputs:
                    if j in open_:
                        state[open_[j]][2] = True
            open_[x.node] = idx
            state[idx] = [idx, None, False, False]
        elif x.op is Op.PAGE_OUT and x.node in open_:
            state[open_[x.node]][3] = True
        elif x.op is Op.FREE and x.node in open_:
            state[open_.pop(x.node)][1] = idx
    return [tuple(v) for _, v in sorted(state.items())]


def _programs() -> list[tuple[TrainingGraph, Program]]:
    """Heuristic programs, cleaned and raw, on random graphs at tight and loose budgets."""
    programs = []
    for seed in range(6):
        for fraction in (0.1, 0.4):   # tight budgets page and recompute; loose ones need not
            problem = random_problem(seed, 10, "poet", deadline_prob=0.0, budget_fraction=fraction)
            for name in ("checkpoint_all", "chen_greedy", "capuchin", "dtr"):
                res = BASELINES[name](problem)
                if res.program is not None:
                    programs.append((problem.graph, res.program))
                if res.schedule is not None:   # before cleanup: with its pointless work
                    programs.append((problem.graph, linearize(problem.graph, res.schedule, dma=problem.costs.dma)))
    assert any(x.op is Op.PAGE_IN for _, p in programs for x in p)
    assert any(p.n_compute > graph.n for graph, p in programs)
    return programs


def test_cleanup_lifetimes_match_the_hand_written_walk() -> None:
    for graph, program in _programs():
        ins = list(program.instructions)
        got = _lifetimes(graph, ins)
        assert got == _reference_lifetimes(graph, ins)
        # Every allocation is a COMPUTE or a PAGE_IN, and a FREE of its node closes it.
        assert all(ins[i].op in (Op.COMPUTE, Op.PAGE_IN) for i, _, _, _ in got)
        assert all(f is None or (ins[f].op is Op.FREE and ins[f].node == ins[i].node) for i, f, _, _ in got)


def _reference_cells(program: Program) -> np.ndarray:
    """viz.program_cells as it was written before the interpreter (an if/elif on Op)."""
    n = program.n_nodes
    bounds = [*viz.stage_starts(program), len(program.instructions)]
    cells = np.full((n, n), viz.EMPTY, dtype=np.int8)
    ram: set[int] = set()
    flash: set[int] = set()
    pending_out: set[int] = set()
    for t in range(n):
        for i in flash:
            cells[t, i] = viz.FLASH
        for i in ram:
            cells[t, i] = viz.RESIDENT
        for ins in program.instructions[bounds[t]: bounds[t + 1]]:
            op, i = ins.op, ins.node
            if op is Op.COMPUTE:
                ram.add(i)
                cells[t, i] = viz.COMPUTE if i == t else viz.RECOMPUTE
            elif op is Op.PAGE_IN:
                ram.add(i)
                cells[t, i] = viz.PAGE_IN
            elif op is Op.PAGE_OUT:
                pending_out.add(i)
                cells[t, i] = viz.PAGE_OUT
            elif op is Op.FREE:
                ram.discard(i)
            elif op is Op.FENCE:
                flash |= pending_out
                pending_out.clear()
    return cells


def test_viz_cells_match_the_hand_written_walk() -> None:
    kinds = set()
    for _, program in _programs():
        cells = viz.program_cells(program)
        assert np.array_equal(cells, _reference_cells(program))
        kinds |= set(np.unique(cells).tolist())
    assert {viz.COMPUTE, viz.RESIDENT, viz.PAGE_IN, viz.PAGE_OUT, viz.FLASH, viz.RECOMPUTE} <= kinds
