"""The independent simulator: replay a Program, check every rule, measure every figure.

It shares no code with the linearizer or the memory formula on purpose: it is the judge
of both. It walks the instructions (a :class:`ProgramInterpreter`: one method per opcode)
with a RAM set, a flash set and the in-flight transfers, exactly as the "Simulator"
section of docs/model.md describes, and raises :class:`ScheduleError` naming the
instruction index, the node and the rule.

Arena check (when ``program.arena_bytes`` is set): every buffer lives at its
instruction's offset; a compute's workspace lies right after its output buffer, at
``offset + output_bytes``, for the duration of that compute (the convention of
:mod:`poet_compiler.schedule.arena`). No two live regions may overlap and all must lie
in ``[0, arena_bytes)``. A ``MOVE`` re-places its buffer at its offset (a memmove: the
buffer's own old region may overlap the new one) and costs a copy (``CostTable.move_j``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

from poet_compiler import work
from poet_compiler.devices.costs import CostTable
from poet_compiler.errors import OverBudgetError, ScheduleError, UpdateOrderError
from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schedule.interpreter import ProgramInterpreter
from poet_compiler.schedule.program import Instruction, Op, Program

_REL_TOL = 1e-9  # float slack on the deadline comparison


@dataclass(frozen=True)
class Simulation:
    """Figures of one replay. ``timeline[j]``: live bytes after instruction ``j``
    (at a COMPUTE: during it, workspace included)."""

    energy_j: float
    compute_j: float
    page_in_j: float
    page_out_j: float
    static_j: float
    runtime_s: float
    peak_bytes: int
    n_compute: int
    n_recompute: int
    n_page_in: int
    n_page_out: int
    page_in_bytes: int
    page_out_bytes: int
    timeline: tuple[int, ...]
    peak_at: int = -1          # instruction index where the peak is first reached
    move_j: float = 0.0        # energy of the MOVEs (arena compaction)
    n_move: int = 0
    move_bytes: int = 0

    def report(self) -> dict[str, float | int]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "timeline"}


class _Arena:
    """Live regions of the arena, checked for overflow and overlap."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.regions: dict[object, tuple[int, int]] = {}   # key -> [start, end)

    def place(self, key: object, start: int | None, length: int, what: str) -> None:
        if start is None:
            raise ValueError(f"{what} has no arena offset although the program has an arena")
        end = start + length
        if start < 0 or end > self.size:
            raise ValueError(f"{what} occupies [{start}, {end}) outside the arena [0, {self.size})")
        if length > 0:
            for other, (s, e) in self.regions.items():
                if s < end and start < e and e > s:
                    raise ValueError(f"{what} at [{start}, {end}) overlaps live {other} at [{s}, {e})")
        self.regions[key] = (start, end)

    def release(self, key: object) -> None:
        self.regions.pop(key, None)


class _Simulator(ProgramInterpreter):
    """The replay: a RAM set, a flash set, the transfers in flight, the clock and the
    energy, one method per instruction (the rules of docs/model.md, "Programs")."""

    def __init__(self, graph: TrainingGraph, costs: CostTable, program: Program, *,
                 ram_budget_bytes: int | None, deadline_s: float | None) -> None:
        super().__init__(program)
        self.graph, self.costs, self.program = graph, costs, program
        self.ram_budget_bytes, self.deadline_s = ram_budget_bytes, deadline_s
        n = self.n = graph.n
        self.size = [node.output_bytes for node in graph.nodes]
        self.work = [node.workspace_bytes for node in graph.nodes]
        self.ram: set[int] = set()
        self.flash: set[int] = set()
        self.paging_in: set[int] = set()     # allocated, being written by DMA until the next FENCE
        self.paging_out: set[int] = set()    # resident, being copied to flash until the next FENCE
        self.freed_at: dict[int, int] = {}
        self.computed = [0] * n
        # Update nodes (docs/training.md): the updates whose ``after`` lists each node.
        self.overwritten_by: list[list[int]] = [[] for _ in range(n)]
        for node in graph.nodes:
            for r in node.after if node.kind == "update" else ():
                self.overwritten_by[r].append(node.id)
        self.live = 0
        self.point: int | None = None        # live bytes during the current COMPUTE (workspace included)
        self.peak, self.peak_at = 0, -1
        self.timeline: list[int] = []
        self.e_compute = self.e_in = self.e_out = self.e_move = 0.0
        self.n_move = self.bytes_moved = 0
        # Clock: the CPU runs computes one after another; with DMA one transfer channel runs
        # the transfers in issue order, each from when it is issued (and the channel is
        # free), and a FENCE waits for the channel. Without DMA a transfer runs on the CPU.
        self.cpu = self.dma_free = 0.0
        self.bytes_in = self.bytes_out = self.n_in = self.n_out = 0
        self.arena = _Arena(program.arena_bytes) if program.arena_bytes is not None else None

    # -- helpers -----------------------------------------------------------------------
    def fail(self, rule: str) -> NoReturn:
        """Raise the broken ``rule`` of the current instruction, named by index, opcode and node."""
        # The name is built here, only when a rule breaks: every schedule poetc writes is replayed.
        ins = self.instructions[self.index]
        node = "" if ins.op is Op.FENCE else f" {ins.node} {self.graph.nodes[ins.node].name!r}"
        raise ScheduleError(f"instruction {self.index} ({ins.op.name}{node}): {rule}")

    def gone(self, j: int) -> str:
        """Why tensor ``j`` is not in RAM, for an error message."""
        return f" (freed at instruction {self.freed_at[j]})" if j in self.freed_at else " (never made resident)"

    def transfer(self, seconds: float) -> None:
        """A page-in or page-out of ``seconds``: on the DMA channel in issue order, or on the CPU."""
        if self.costs.dma:
            self.dma_free = max(self.cpu, self.dma_free) + seconds
        else:
            self.cpu += seconds

    def check_offset(self, ins: Instruction, what: str) -> None:
        """A PAGE_OUT or FREE that carries an offset names where its buffer lives."""
        i, arena = ins.node, self.arena
        if (arena is not None and ins.offset is not None
                and arena.regions.get(("node", i), (ins.offset,))[0] != ins.offset):
            self.fail(f"arena: {what} carries offset {ins.offset} but the buffer is at {arena.regions[('node', i)][0]}")

    def place(self, ins: Instruction, length: int, what: str) -> None:
        """Put ``ins.node``'s buffer at ``ins.offset`` in the arena; a broken arena rule fails."""
        assert self.arena is not None
        try:
            self.arena.place(("node", ins.node), ins.offset, length, what)
        except ValueError as exc:
            self.fail(f"arena: {exc}")

    # -- every instruction -------------------------------------------------------------
    def before(self, ins: Instruction) -> None:
        op, i = ins.op, ins.node
        if op is not Op.FENCE and not 0 <= i < self.n:
            raise ScheduleError(f"instruction {self.index} ({op.name} {i}): node {i} does not exist "
                                f"(graph has {self.n} nodes)")
        self.point = None

    def after(self, ins: Instruction) -> None:
        current = self.point if self.point is not None else self.live
        self.timeline.append(current)
        if current > self.peak:
            self.peak, self.peak_at = current, self.index

    # -- the opcodes -------------------------------------------------------------------
    def compute(self, ins: Instruction) -> None:
        i, graph, size, ram = ins.node, self.graph, self.size, self.ram
        self.check_update_order(i)
        for j in graph.nodes[i].inputs:
            label = f"input {j} {graph.nodes[j].name!r}"
            if j not in ram:
                self.fail(f"{label} is not in RAM{self.gone(j)}")
            if j in self.paging_in:
                self.fail(f"{label} is still being paged in (no FENCE since its PAGE_IN)")
        if i in ram:
            self.fail("the node's output is already in RAM (double compute of a resident tensor)")
        ram.add(i)
        self.freed_at.pop(i, None)
        self.computed[i] += 1
        self.live += size[i]
        self.point = self.live + self.work[i]
        self.e_compute += self.costs.compute_j[i]
        self.cpu += self.costs.compute_s[i]
        if self.arena is not None:
            # Output and workspace are one contiguous region during the compute.
            self.place(ins, size[i] + self.work[i], f"output+workspace of node {i}")
            assert ins.offset is not None  # place() refuses a missing offset
            self.arena.regions[("node", i)] = (ins.offset, ins.offset + size[i])

    def check_update_order(self, i: int) -> None:
        """An update runs once, after every compute of the nodes that read the value it
        overwrites; none of them is computed after it (docs/training.md)."""
        try:
            self._check_update_order(i)
        except ScheduleError as exc:
            raise UpdateOrderError(str(exc)) from None

    def _check_update_order(self, i: int) -> None:
        graph = self.graph
        if graph.nodes[i].kind == "update":
            if self.computed[i]:
                self.fail("an update node is computed twice (it would apply the optimizer step twice)")
            for r in graph.nodes[i].after:
                if not self.computed[r]:
                    self.fail(f"the update runs before node {r} {graph.nodes[r].name!r}, which reads the "
                              "parameter's old value")
        for u in self.overwritten_by[i]:
            if self.computed[u]:
                self.fail(f"reads the old value of a parameter that update node {u} {graph.nodes[u].name!r} "
                          "has already overwritten")

    def page_out(self, ins: Instruction) -> None:
        i = ins.node
        if self.graph.nodes[i].kind == "update":
            self.fail("page-out of an update node (it writes in place and owns no buffer)")
        if i not in self.ram:
            self.fail(f"page-out of a tensor that is not in RAM{self.gone(i)}")
        if i in self.paging_in or i in self.paging_out:
            self.fail("page-out of a tensor that is already in flight (no FENCE since its last transfer)")
        self.paging_out.add(i)
        self.n_out += 1
        self.bytes_out += self.size[i]
        self.e_out += self.costs.page_out_j[i]
        self.transfer(self.costs.page_out_s[i])
        self.check_offset(ins, "PAGE_OUT")

    def page_in(self, ins: Instruction) -> None:
        i = ins.node
        if i not in self.flash:
            self.fail("page-in without a flash copy (no completed PAGE_OUT of this tensor)")
        if i in self.ram:
            self.fail("page-in of a tensor that is already in RAM")
        self.ram.add(i)
        self.freed_at.pop(i, None)
        self.paging_in.add(i)
        self.live += self.size[i]
        self.n_in += 1
        self.bytes_in += self.size[i]
        self.e_in += self.costs.page_in_j[i]
        self.transfer(self.costs.page_in_s[i])
        if self.arena is not None:
            self.place(ins, self.size[i], f"page-in buffer of node {i}")

    def free(self, ins: Instruction) -> None:
        i = ins.node
        if i not in self.ram:
            self.fail(f"free of a tensor that is not in RAM{self.gone(i)}")
        if i in self.paging_out:
            self.fail("free of a tensor that is still being paged out (no FENCE since its PAGE_OUT)")
        if i in self.paging_in:
            self.fail("free of a tensor that is still being paged in (no FENCE since its PAGE_IN)")
        self.check_offset(ins, "FREE")
        self.ram.discard(i)
        self.freed_at[i] = self.index
        self.live -= self.size[i]
        if self.arena is not None:
            self.arena.release(("node", i))

    def move(self, ins: Instruction) -> None:
        i = ins.node
        if i not in self.ram:
            self.fail(f"move of a tensor that is not in RAM{self.gone(i)}")
        if i in self.paging_in or i in self.paging_out:
            self.fail("move of a tensor that is in flight (no FENCE since its last transfer)")
        if self.arena is None:
            self.fail("MOVE in a program without an arena (nothing to move within)")
        # A memmove: the new region may overlap the buffer's own old one, no other.
        self.arena.release(("node", i))
        self.place(ins, self.size[i], f"moved buffer of node {i}")
        self.n_move += 1
        self.bytes_moved += self.size[i]
        self.e_move += self.costs.move_j(self.size[i])
        self.cpu += self.costs.move_s(self.size[i])

    def fence(self, ins: Instruction) -> None:
        self.flash |= self.paging_out
        self.paging_out.clear()
        self.paging_in.clear()
        self.cpu = max(self.cpu, self.dma_free)

    # -- the end of the program --------------------------------------------------------
    def finish(self) -> Simulation:
        graph, n, peak, peak_at = self.graph, self.n, self.peak, self.peak_at
        if self.paging_in or self.paging_out:
            pending = sorted(self.paging_in | self.paging_out)
            raise ScheduleError(f"end of program: transfers of nodes {pending} were never completed by a FENCE")
        runtime = max(self.cpu, self.dma_free)
        missing = [j for j in range(n) if self.computed[j] == 0]
        if missing:
            j = missing[0]
            raise ScheduleError(f"end of program: node {j} {graph.nodes[j].name!r} is never computed"
                                + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
        ram_budget_bytes, deadline_s = self.ram_budget_bytes, self.deadline_s
        if ram_budget_bytes is not None and peak > ram_budget_bytes:
            ins = self.program.instructions[peak_at]
            raise OverBudgetError(
                f"instruction {peak_at} ({ins.op.name} {ins.node} {graph.nodes[ins.node].name!r}): "
                f"live bytes {peak} exceed the RAM budget {ram_budget_bytes} "
                f"by {peak - ram_budget_bytes} bytes"
            )
        if deadline_s is not None and runtime > deadline_s * (1 + _REL_TOL):
            raise OverBudgetError(
                f"end of program: runtime {runtime:.6g} s exceeds the deadline {deadline_s:.6g} s "
                f"by {runtime - deadline_s:.6g} s"
            )
        static_j = self.costs.static_w * runtime
        n_compute = sum(self.computed)
        return Simulation(
            energy_j=self.e_compute + self.e_in + self.e_out + self.e_move + static_j,
            compute_j=self.e_compute,
            page_in_j=self.e_in,
            page_out_j=self.e_out,
            static_j=static_j,
            runtime_s=runtime,
            peak_bytes=peak,
            n_compute=n_compute,
            n_recompute=n_compute - n,
            n_page_in=self.n_in,
            n_page_out=self.n_out,
            page_in_bytes=self.bytes_in,
            page_out_bytes=self.bytes_out,
            timeline=tuple(self.timeline),
            peak_at=peak_at,
            move_j=self.e_move,
            n_move=self.n_move,
            move_bytes=self.bytes_moved,
        )


def simulate(
    graph: TrainingGraph,
    costs: CostTable,
    program: Program,
    *,
    ram_budget_bytes: int | None = None,
    deadline_s: float | None = None,
) -> Simulation:
    """Replay ``program``; raise :class:`ScheduleError` on the first broken rule."""
    n = graph.n
    if program.n_nodes != n or costs.n != n:
        raise ScheduleError(
            f"program is for {program.n_nodes} nodes and costs for {costs.n}, but the graph has {n}"
        )
    # A replay is work (poet_compiler.work): the heuristics and stages that simulate are
    # charged for it, so they stop on work, never on measured seconds.
    work.charge_instructions(len(program.instructions))
    return _Simulator(graph, costs, program, ram_budget_bytes=ram_budget_bytes, deadline_s=deadline_s).run()
