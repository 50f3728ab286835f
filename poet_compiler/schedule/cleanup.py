"""Remove work from a Program that cannot affect its result.

Solvers (and heuristics) may leave pointless work in a schedule when it costs them
nothing in their objective (ties, time limits, relaxed models). This pass drops:

- page-ins whose buffer nothing reads before it is freed (or the program ends);
- page-outs whose flash copy is never paged in, and repeated page-outs of a tensor
  whose first flash copy is kept (flash copies are never dropped in the model);
- recomputations (not the first computation of a node, never of a sink) whose output
  nothing reads nor pages out before it is freed;
- FENCEs that neither complete a transfer nor separate a window with transfers from
  one with computes (removing them leaves every window's time unchanged).

Each removal only takes instructions (and their FREE) away, so live bytes never grow at
any point; computes and transfers only leave overlap windows, so no window gets longer
and energy never grows. A removal can make another one possible (a dropped page-in may
orphan its page-out), so the passes repeat until nothing changes.
"""

from __future__ import annotations

from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schedule.interpreter import ProgramInterpreter
from poet_compiler.schedule.program import Instruction, Op, Program


class _Lifetimes(ProgramInterpreter):
    """Per allocation (a COMPUTE or a PAGE_IN): its index, the index of its FREE or None,
    whether a COMPUTE reads it, whether it is paged out."""

    # A FENCE allocates, reads and frees nothing; cleanup runs before the arena is planned,
    # so on programs without MOVE (finalize strips a given Program's: compact.without_moves).
    ignores = frozenset({Op.FENCE, Op.MOVE})

    def __init__(self, graph: TrainingGraph, ins: list[Instruction]) -> None:
        super().__init__(ins)
        self.graph = graph
        self.open: dict[int, int] = {}      # node -> index of its live allocation
        self.state: dict[int, list] = {}    # index -> [index, free index, read, paged out]

    def _allocate(self, ins: Instruction) -> None:
        self.open[ins.node] = self.index
        self.state[self.index] = [self.index, None, False, False]

    def compute(self, ins: Instruction) -> None:
        for j in self.graph.nodes[ins.node].inputs:
            if j in self.open:
                self.state[self.open[j]][2] = True
        self._allocate(ins)

    def page_in(self, ins: Instruction) -> None:
        self._allocate(ins)

    def page_out(self, ins: Instruction) -> None:
        if ins.node in self.open:
            self.state[self.open[ins.node]][3] = True

    def free(self, ins: Instruction) -> None:
        if ins.node in self.open:
            self.state[self.open.pop(ins.node)][1] = self.index

    def finish(self) -> list[tuple[int, int | None, bool, bool]]:
        return [tuple(v) for _, v in sorted(self.state.items())]


def _lifetimes(graph: TrainingGraph, ins: list[Instruction]) -> list[tuple[int, int | None, bool, bool]]:
    """Per allocation: (index, index of its FREE or None, read by a COMPUTE, paged out)."""
    return _Lifetimes(graph, ins).run()


def _drop_pointless(graph: TrainingGraph, ins: list[Instruction]) -> list[Instruction] | None:
    """One round of removals; None when nothing was removed."""
    drop: set[int] = set()
    sinks = set(graph.sinks)
    first_compute: dict[int, int] = {}
    for idx, x in enumerate(ins):
        if x.op is Op.COMPUTE:
            first_compute.setdefault(x.node, idx)
    for idx, free_idx, read, paged_out in _lifetimes(graph, ins):
        x = ins[idx]
        useless = not read and not paged_out
        if x.op is Op.PAGE_IN and useless:
            pass
        elif (x.op is Op.COMPUTE and useless and first_compute[x.node] != idx and x.node not in sinks):
            pass
        else:
            continue
        drop.add(idx)
        if free_idx is not None:
            drop.add(free_idx)
    # Page-outs: only the first one of a node matters, and only if the node is paged in later.
    paged_in = {x.node for k, x in enumerate(ins) if x.op is Op.PAGE_IN and k not in drop}
    seen_out: set[int] = set()
    for idx, x in enumerate(ins):
        if x.op is Op.PAGE_OUT:
            if x.node not in paged_in or x.node in seen_out:
                drop.add(idx)
            seen_out.add(x.node)
    if not drop:
        return None
    return [x for k, x in enumerate(ins) if k not in drop]


def _drop_fences(ins: list[Instruction]) -> list[Instruction]:
    """Remove FENCEs whose removal changes no window's time and no transfer's completion."""
    changed = True
    while changed:
        changed = False
        fences = [k for k, x in enumerate(ins) if x.op is Op.FENCE]
        bounds = [-1, *fences, len(ins)]
        windows = []   # (has transfers, has computes) of the window ending at each bound
        for a, b in zip(bounds, bounds[1:]):
            part = ins[a + 1:b]
            windows.append((any(x.op in (Op.PAGE_IN, Op.PAGE_OUT) for x in part),
                            any(x.op is Op.COMPUTE for x in part)))
        for w, k in enumerate(fences):
            (before_p, before_c), (after_p, _) = windows[w], windows[w + 1]
            # Nothing in flight at this fence, and merging the windows keeps both times:
            # either neither side pages, or the side before is empty of work.
            if not before_p and (not after_p or not before_c):
                del ins[k]
                changed = True
                break
    return ins


def remove_pointless_work(graph: TrainingGraph, program: Program) -> Program:
    """Return an equivalent Program without pointless transfers, recomputes and fences."""
    ins = list(program.instructions)
    while (smaller := _drop_pointless(graph, ins)) is not None:
        ins = smaller
    ins = _drop_fences(ins)
    if len(ins) == len(program.instructions):
        return program
    meta = dict(program.meta)
    meta["cleanup_removed"] = len(program.instructions) - len(ins)
    # The linearizer's stage starts index the instructions before cleanup.
    meta.pop("stage_starts", None)
    return Program(n_nodes=program.n_nodes, instructions=tuple(ins), arena_bytes=program.arena_bytes, meta=meta)
