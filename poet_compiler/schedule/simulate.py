"""The independent simulator: replay a Program, check every rule, measure every figure.

It shares no code with the linearizer or the memory formula on purpose: it is the judge
of both. It walks the instructions with a RAM set, a flash set and the in-flight
transfers, exactly as the "Simulator" section of docs/model.md describes, and raises
:class:`ScheduleError` naming the instruction index, the node and the rule.

Arena check (when ``program.arena_bytes`` is set): every buffer lives at its
instruction's offset; a compute's workspace lies right after its output buffer, at
``offset + output_bytes``, for the duration of that compute (the convention of
:mod:`poet_compiler.schedule.arena`). No two live regions may overlap and all must lie
in ``[0, arena_bytes)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from poet_compiler.devices.costs import CostTable
from poet_compiler.errors import OverBudgetError, ScheduleError
from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schedule.program import Op, Program

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
    size = [node.output_bytes for node in graph.nodes]
    work = [node.workspace_bytes for node in graph.nodes]
    ram: set[int] = set()
    flash: set[int] = set()
    paging_in: set[int] = set()     # allocated, being written by DMA until the next FENCE
    paging_out: set[int] = set()    # resident, being copied to flash until the next FENCE
    freed_at: dict[int, int] = {}
    computed = [0] * n
    live = 0
    peak, peak_at = 0, -1
    timeline: list[int] = []
    e_compute = e_in = e_out = 0.0
    # Clock: the CPU runs computes one after another; with DMA one transfer channel runs
    # the transfers in issue order, each from when it is issued (and the channel is
    # free), and a FENCE waits for the channel. Without DMA a transfer runs on the CPU.
    cpu = dma_free = 0.0
    bytes_in = bytes_out = n_in = n_out = 0
    arena = _Arena(program.arena_bytes) if program.arena_bytes is not None else None

    def transfer(seconds: float) -> None:
        nonlocal cpu, dma_free
        if costs.dma:
            dma_free = max(cpu, dma_free) + seconds
        else:
            cpu += seconds

    for idx, ins in enumerate(program.instructions):
        op, i = ins.op, ins.node
        if op is not Op.FENCE and not 0 <= i < n:
            raise ScheduleError(f"instruction {idx} ({op.name} {i}): node {i} does not exist (graph has {n} nodes)")
        where = f"instruction {idx} ({op.name}" + ("" if op is Op.FENCE else f" {i} {graph.nodes[i].name!r}") + ")"

        def fail(rule: str) -> None:
            raise ScheduleError(f"{where}: {rule}")

        def gone(j: int) -> str:
            return f" (freed at instruction {freed_at[j]})" if j in freed_at else " (never made resident)"

        point = None
        if op is Op.COMPUTE:
            for j in graph.nodes[i].inputs:
                label = f"input {j} {graph.nodes[j].name!r}"
                if j not in ram:
                    fail(f"{label} is not in RAM{gone(j)}")
                if j in paging_in:
                    fail(f"{label} is still being paged in (no FENCE since its PAGE_IN)")
            if i in ram:
                fail("the node's output is already in RAM (double compute of a resident tensor)")
            ram.add(i)
            freed_at.pop(i, None)
            computed[i] += 1
            live += size[i]
            point = live + work[i]
            e_compute += costs.compute_j[i]
            cpu += costs.compute_s[i]
            if arena is not None:
                try:
                    # Output and workspace are one contiguous region during the compute.
                    arena.place(("node", i), ins.offset, size[i] + work[i], f"output+workspace of node {i}")
                    assert ins.offset is not None  # place() refuses a missing offset
                    arena.regions[("node", i)] = (ins.offset, ins.offset + size[i])
                except ValueError as exc:
                    fail(f"arena: {exc}")
        elif op is Op.PAGE_OUT:
            if i not in ram:
                fail(f"page-out of a tensor that is not in RAM{gone(i)}")
            if i in paging_in or i in paging_out:
                fail("page-out of a tensor that is already in flight (no FENCE since its last transfer)")
            paging_out.add(i)
            n_out += 1
            bytes_out += size[i]
            e_out += costs.page_out_j[i]
            transfer(costs.page_out_s[i])
            if (arena is not None and ins.offset is not None
                    and arena.regions.get(("node", i), (ins.offset,))[0] != ins.offset):
                fail(f"arena: PAGE_OUT carries offset {ins.offset} "
                     f"but the buffer is at {arena.regions[('node', i)][0]}")
        elif op is Op.PAGE_IN:
            if i not in flash:
                fail("page-in without a flash copy (no completed PAGE_OUT of this tensor)")
            if i in ram:
                fail("page-in of a tensor that is already in RAM")
            ram.add(i)
            freed_at.pop(i, None)
            paging_in.add(i)
            live += size[i]
            n_in += 1
            bytes_in += size[i]
            e_in += costs.page_in_j[i]
            transfer(costs.page_in_s[i])
            if arena is not None:
                try:
                    arena.place(("node", i), ins.offset, size[i], f"page-in buffer of node {i}")
                except ValueError as exc:
                    fail(f"arena: {exc}")
        elif op is Op.FREE:
            if i not in ram:
                fail(f"free of a tensor that is not in RAM{gone(i)}")
            if i in paging_out:
                fail("free of a tensor that is still being paged out (no FENCE since its PAGE_OUT)")
            if i in paging_in:
                fail("free of a tensor that is still being paged in (no FENCE since its PAGE_IN)")
            if (arena is not None and ins.offset is not None
                    and arena.regions.get(("node", i), (ins.offset,))[0] != ins.offset):
                fail(f"arena: FREE carries offset {ins.offset} but the buffer is at {arena.regions[('node', i)][0]}")
            ram.discard(i)
            freed_at[i] = idx
            live -= size[i]
            if arena is not None:
                arena.release(("node", i))
        elif op is Op.FENCE:
            flash |= paging_out
            paging_out.clear()
            paging_in.clear()
            cpu = max(cpu, dma_free)
        else:  # pragma: no cover - Op is a closed enum
            fail(f"unknown opcode {op!r}")
        current = point if point is not None else live
        timeline.append(current)
        if current > peak:
            peak, peak_at = current, idx
    if paging_in or paging_out:
        pending = sorted(paging_in | paging_out)
        raise ScheduleError(f"end of program: transfers of nodes {pending} were never completed by a FENCE")
    runtime = max(cpu, dma_free)
    missing = [j for j in range(n) if computed[j] == 0]
    if missing:
        j = missing[0]
        raise ScheduleError(f"end of program: node {j} {graph.nodes[j].name!r} is never computed"
                            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    if ram_budget_bytes is not None and peak > ram_budget_bytes:
        ins = program.instructions[peak_at]
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
    static_j = costs.static_w * runtime
    n_compute = sum(computed)
    return Simulation(
        energy_j=e_compute + e_in + e_out + static_j,
        compute_j=e_compute,
        page_in_j=e_in,
        page_out_j=e_out,
        static_j=static_j,
        runtime_s=runtime,
        peak_bytes=peak,
        n_compute=n_compute,
        n_recompute=n_compute - n,
        n_page_in=n_in,
        n_page_out=n_out,
        page_in_bytes=bytes_in,
        page_out_bytes=bytes_out,
        timeline=tuple(timeline),
        peak_at=peak_at,
    )

