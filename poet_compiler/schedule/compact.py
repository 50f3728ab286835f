"""Arena compaction: a layout within the budget for any Program whose live bytes fit it.

The static planner (:mod:`poet_compiler.schedule.arena`) gives each buffer one offset for
its whole life. When the live bytes come within a few percent of the budget, no static
layout may exist: buffers of different lifetimes leave holes that no later buffer fits
(measured on random layered DAGs at 80-90 % of their peak: arenas 3-10 % above the live
peak, whatever the planner's effort). Such a schedule is not lost: the device can copy a
resident buffer to another place in the arena (``MOVE``, docs/model.md), so that the
holes join.

:func:`compact_arena` walks the Program with a map of the arena within the budget. Every
allocation (``COMPUTE`` with its workspace after the output, ``PAGE_IN``) takes

1. the offset the static plan gave it, when that place is free within the budget (so a
   plan that mostly fits keeps its layout and moves little);
2. else a hole that holds it (the best-fitting one, the lowest, or the highest place);
3. else room made the way that copies the fewest bytes, one ``MOVE`` per buffer moved,
   right before the allocation: a window whose live buffers move to holes outside it
   (best fit, largest first), or a run of neighbouring buffers packed down or up so that
   the holes between them join (memmove-safe: each copy lands in space already vacated).

Which of 1 and 2 applies, and which hole, is a :class:`Placement`. Each walk takes
milliseconds, and what it copies depends much on them, so :func:`compact_arena` walks
the program once per placement in :data:`PLACEMENTS` and keeps the cheapest layout. On a
ResNet-18-CIFAR m4 50 % schedule (peak 256 B under its budget, static arena 6.4 % over)
the copies cost 0.0077-0.0277 J across placements, 0.0194 J with the first alone; on
the a72 at 50 % 1.5x, 0.101-0.234 J, 0.114 J with the first (each placement alone on the
guided schedules of those two cells; docs/tried-not-kept.md, "Arena compaction").

A buffer in flight (paged in or out since the last ``FENCE``) is not moved: the transfer
channel owns it. Only with DMA can that leave no room; :func:`compact_arena` then returns
None, or, asked for ``fences``, adds a ``FENCE`` before the moves: it waits for the
channel (the transfers' time not yet run, which the simulator charges like any wait),
after which those buffers move like any other. That is a last resort (a caller compares
the result with the schedules it has): used first, it kept a schedule whose waits and
copies cost 1.2 % where the pipeline's other schedules cost 0.03 % (ResNet-18-CIFAR a72
50 % 2.0x; docs/tried-not-kept.md, "Arena compaction"). Moves cost a copy at the device's memory rates
(``CostTable.move_j``); the simulator counts them like any other instruction.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from poet_compiler import work
from poet_compiler.errors import ScheduleError
from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schedule.interpreter import ProgramInterpreter
from poet_compiler.schedule.program import Instruction, Op, Program

Fit = Literal["best", "first", "top"]


@dataclass(frozen=True)
class Placement:
    """Where an allocation goes before any room is made: at the static plan's offset when
    that is free (``keep_static``), else in a hole that holds it, chosen by ``fit``:
    ``"best"`` the smallest hole (lowest on ties), ``"first"`` the lowest, ``"top"`` the
    highest place. A buffer that lives fewer than ``short_at_top`` instructions goes to
    the highest place whatever ``fit`` says: short lives at the top leave the long ones'
    holes below them whole."""

    keep_static: bool
    fit: Fit
    short_at_top: int = 0


# The placements tried, the module's historical rule first (its layout is kept on ties).
PLACEMENTS: tuple[Placement, ...] = tuple(
    p for keep in (True, False)
    for p in (Placement(keep, "best"), Placement(keep, "first"), Placement(keep, "top"), Placement(keep, "best", 20)))

# Windows whose buffers the compactor tries to move elsewhere, cheapest first: each try
# is O(buffers log buffers) per buffer moved; the slides cover what they miss.
WINDOW_TRIES = 8

# A way to make room: (bytes moved, offset of the room, the MOVEs in a safe order).
_Plan = tuple[int, int, list[tuple[int, int]]]


class _NoRoom(Exception):
    """No placement within the budget (only buffers in flight block it), or no time left."""


def _holes(regions: list[tuple[int, int]], budget: int) -> list[tuple[int, int]]:
    """The free stretches ``[lo, hi)`` of ``[0, budget)`` between sorted ``regions``."""
    out, at = [], 0
    for lo, hi in regions:
        if lo > at:
            out.append((at, lo))
        at = max(at, hi)
    if at < budget:
        out.append((at, budget))
    return out


def _best_fit(holes: list[tuple[int, int]], need: int) -> int | None:
    """Start of the smallest hole that holds ``need`` bytes (lowest start on ties)."""
    fits = [(hi - lo, lo) for lo, hi in holes if hi - lo >= need]
    return min(fits)[1] if fits else None


def _fit(holes: list[tuple[int, int]], need: int, fit: Fit) -> int | None:
    """Where ``need`` bytes go in ``holes`` (sorted by offset) under ``fit``
    (:class:`Placement`), or None when no hole holds them."""
    if fit == "best":
        return _best_fit(holes, need)
    fits = [(lo, hi) for lo, hi in holes if hi - lo >= need]
    if not fits:
        return None
    return fits[0][0] if fit == "first" else fits[-1][1] - need


def _lifetimes(program: Program) -> dict[int, int]:
    """For each allocating instruction (``COMPUTE``, ``PAGE_IN``), by index: the
    instructions until its buffer's ``FREE`` (or the program's end)."""
    out: dict[int, int] = {}
    next_free: dict[int, int] = {}
    instructions = program.instructions
    for k in range(len(instructions) - 1, -1, -1):
        x = instructions[k]
        if x.op is Op.FREE:
            next_free[x.node] = k
        elif x.op in (Op.COMPUTE, Op.PAGE_IN):
            out[k] = next_free.get(x.node, len(instructions)) - k
    return out


class _Compactor(ProgramInterpreter):
    """The Program with offsets within ``budget`` and MOVEs where the holes must join."""

    def __init__(self, graph: TrainingGraph, program: Program, budget: int, until: float | None,
                 fences: bool, placement: Placement, lifetimes: dict[int, int]) -> None:
        super().__init__(program)
        self.budget, self.until, self.may_fence = budget, until, fences
        self.placement, self.lifetimes = placement, lifetimes
        self.fences = 0                       # FENCEs added so that buffers in flight could move
        self.size = [node.output_bytes for node in graph.nodes]
        self.work = [node.workspace_bytes for node in graph.nodes]
        self.where: dict[int, int] = {}       # resident node -> offset
        self.in_flight: set[int] = set()
        self.out: list[Instruction] = []
        self.top = 0                          # highest byte used: the arena
        self.moved_bytes = 0

    # -- the arena map -----------------------------------------------------------------
    def _regions(self) -> list[tuple[int, int]]:
        return sorted((off, off + self.size[i]) for i, off in self.where.items() if self.size[i])

    def _move(self, i: int, to: int) -> None:
        self.out.append(Instruction(Op.MOVE, i, to))
        self.where[i] = to
        self.moved_bytes += self.size[i]
        self.top = max(self.top, to + self.size[i])

    def _allocate(self, need: int, preferred: int | None) -> int:
        if need == 0:
            return 0
        holes = _holes(self._regions(), self.budget)
        how = self.placement
        if how.keep_static and preferred is not None \
                and any(lo <= preferred and preferred + need <= hi for lo, hi in holes):
            return preferred
        short = self.lifetimes.get(self.index, 0) < how.short_at_top
        at = _fit(holes, need, "top" if short else how.fit)
        if at is not None:
            return at
        # Make room the cheapest way: the fewest bytes moved (then the lowest offset).
        if self.until is not None and work.now() > self.until:
            raise _NoRoom
        plans = self._plans(need)
        if not plans and self.may_fence and self.in_flight:
            # Only buffers in flight block the room: wait for the channel, then move them.
            self.out.append(Instruction(Op.FENCE))
            self.in_flight.clear()
            self.fences += 1
            plans = self._plans(need)
        if not plans:
            raise _NoRoom
        _, at, moves = min(plans, key=lambda p: (p[0], p[1]))
        for i, to in moves:
            self._move(i, to)
        return at

    def _plans(self, need: int) -> list[_Plan]:
        return [p for p in (self._window(need), self._slide(need, down=True), self._slide(need, down=False))
                if p is not None]

    def _window(self, need: int) -> _Plan | None:
        """Free ``[a, a + need)`` by moving the live buffers in it to holes elsewhere
        (best fit, largest first), the window that moves the fewest bytes. Windows start
        at 0 or at a buffer's end; their costs come from one sweep (two pointers over the
        buffers by offset), and the cheapest ``WINDOW_TRIES`` are tried in order."""
        regions = sorted((off, i) for i, off in self.where.items() if self.size[i])
        size = self.size
        costs: list[tuple[int, int, int, int]] = []    # (bytes moved, start, first, past last)
        first = last = cost = blocked = 0
        for a in sorted({0, *(off + size[i] for off, i in regions)}):
            if a + need > self.budget:
                break
            while last < len(regions) and regions[last][0] < a + need:   # buffers starting inside
                cost += size[regions[last][1]]
                blocked += regions[last][1] in self.in_flight
                last += 1
            while first < last and regions[first][0] + size[regions[first][1]] <= a:   # ended below a
                cost -= size[regions[first][1]]
                blocked -= regions[first][1] in self.in_flight
                first += 1
            if not blocked:
                costs.append((cost, a, first, last))
        for cost, a, lo, hi in sorted(costs)[:WINDOW_TRIES]:
            # Targets are free now, not only once the window's buffers have left, so the
            # moves may run in any order; the window itself is reserved.
            taken = [*self._regions(), (a, a + need)]
            moves: list[tuple[int, int]] = []
            for i in sorted((i for _, i in regions[lo:hi]), key=lambda j: (-size[j], j)):
                to = _best_fit(_holes(sorted(taken), self.budget), size[i])
                if to is None:
                    break
                moves.append((i, to))
                taken.append((to, to + size[i]))
            else:
                return cost, a, moves
        return None

    def _slide(self, need: int, *, down: bool) -> _Plan | None:
        """Pack a run of neighbouring buffers against the one below it (``down``) or
        above it, so that the holes between them join; the run that moves the fewest
        bytes (then the lowest offset; the first run on ties). The moves are ordered so
        that each copy lands in vacated space only.

        One pass: with the buffers by offset and ``hole[k]`` the free bytes just below
        buffer ``k`` (``hole[R]``: above the last), the run from ``s`` packed against the
        buffer below it ends at the first ``e`` whose holes ``s..e+1`` add up to ``need``;
        its buffers from the first one above a hole move."""
        regions = sorted((off, i) for i, off in self.where.items() if self.size[i])
        if not down:   # the mirror image: offsets seen from the top of the budget
            regions = [(self.budget - off - self.size[i], i) for off, i in reversed(regions)]
        size = self.size
        holes: list[int] = []
        sizes, end = [0], 0                     # sizes: prefix sums of the buffers' sizes
        for off, i in regions:
            holes.append(off - end)
            end = off + size[i]
            sizes.append(sizes[-1] + size[i])
        holes.append(self.budget - end)
        free = list(itertools.accumulate(holes, initial=0))   # free[j]: holes below buffer j
        best: tuple[int, int, int, int] | None = None         # (cost, at, s, e)
        # For each s: the first buffer from s on that is in flight (no run passes it) and the
        # first that sits above a hole (it and the run's buffers above it move).
        nxt_blocked, nxt_moving = [0] * len(regions), [0] * len(regions)
        b = m = len(regions)
        for s in range(len(regions) - 1, -1, -1):
            b = s if regions[s][1] in self.in_flight else b
            m = s if holes[s] > 0 else m
            nxt_blocked[s], nxt_moving[s] = b, m
        for s in range(len(regions)):
            # The first e >= s with free[e + 2] - free[s] >= need.
            j = bisect.bisect_left(free, free[s] + need, lo=s + 2)
            e = j - 2
            if j > len(regions) + 1 or e >= nxt_blocked[s]:
                continue
            g = nxt_moving[s]
            cost = sizes[e + 1] - sizes[g] if g <= e else 0
            if best is not None and (sizes[e] - sizes[g] if g < e else 0) >= best[0]:
                continue    # a run no cheaper before its last buffer: the first run found wins
            floor = regions[s][0] - holes[s]
            cursor = floor + sizes[e + 1] - sizes[s]
            at = cursor if down else self.budget - cursor - need
            if best is None or (cost, at) < (best[0], best[1]):
                best = (cost, at, s, e)
        if best is None:
            return None
        cost, at, s, e = best
        floor = regions[s][0] - holes[s]
        moves = [(regions[k][1], floor + sizes[k] - sizes[s]) for k in range(nxt_moving[s], e + 1)]
        if down:
            return cost, at, moves
        return cost, at, [(i, self.budget - to - size[i]) for i, to in moves]

    # -- the opcodes -------------------------------------------------------------------
    def _place(self, ins: Instruction, need: int) -> None:
        at = self._allocate(need, ins.offset)
        self.out.append(replace(ins, offset=at))
        self.where[ins.node] = at
        self.top = max(self.top, at + need)

    def compute(self, ins: Instruction) -> None:
        # Output and workspace are one contiguous region during the compute.
        self._place(ins, self.size[ins.node] + self.work[ins.node])

    def page_in(self, ins: Instruction) -> None:
        self._place(ins, self.size[ins.node])
        self.in_flight.add(ins.node)

    def page_out(self, ins: Instruction) -> None:
        self.out.append(replace(ins, offset=self.where.get(ins.node)))
        self.in_flight.add(ins.node)

    def free(self, ins: Instruction) -> None:
        self.out.append(replace(ins, offset=self.where.pop(ins.node, None)))

    def fence(self, ins: Instruction) -> None:
        self.out.append(replace(ins, offset=None))
        self.in_flight.clear()

    def move(self, ins: Instruction) -> None:
        raise ScheduleError(f"instruction {self.index}: the program is already compacted ({ins})")

    def finish(self) -> tuple[Instruction, ...]:
        return tuple(self.out)


def compact_arena(graph: TrainingGraph, program: Program, budget_bytes: int, *,
                  time_limit_s: float | None = None, fences: bool = False,
                  cost: Callable[[Program], float] | None = None) -> Program | None:
    """``program`` laid out within ``budget_bytes`` with MOVEs where needed, or None when
    buffers in flight leave no room or ``time_limit_s`` wall seconds pass first.
    ``fences``: where only buffers in flight block the room, add a FENCE and move them
    (``meta["added_fences"]`` counts them; see the module docstring).
    The layout of the cheapest of the :data:`PLACEMENTS` by ``cost``, then by the bytes
    moved (the first placement's on ties), each tried while time is left; a layout of
    infinite cost (e.g. past the deadline) is never taken. Some keep
    ``program``'s own offsets (a static plan that did not fit) wherever they are free
    within the budget. The caller checks that the live bytes fit (the simulator judges
    the result)."""
    until = None if time_limit_s is None else work.now() + time_limit_s
    lifetimes = _lifetimes(program)
    best: tuple[tuple[float, int], Program] | None = None
    for placement in PLACEMENTS:
        # Past the meter's wall cap (a compile stopped by --time-limit) the first layout found
        # is the answer: each walk replays the program (0.5 s on gpt2_large).
        if best is not None and ((until is not None and work.now() > until) or work.wall_expired()):
            break
        laid = _walk(_Compactor(graph, program, budget_bytes, until, fences, placement, lifetimes), program)
        if laid is None:
            continue
        # Ties (moves are free on a graph with explicit costs) go to the fewest bytes moved.
        value = (cost(laid) if cost is not None else 0.0, int(laid.meta["moved_bytes"]))
        if value[0] < math.inf and (best is None or value < best[0]):
            best = (value, laid)
    return None if best is None else best[1]


def _walk(walk: _Compactor, program: Program) -> Program | None:
    """The compacted Program from one walk, or None when it found no room."""
    try:
        instructions = walk.run()
    except _NoRoom:
        return None
    meta = dict(program.meta)
    peak = int(meta.get("peak_bytes", 0)) or walk.top
    meta.update(fragmentation=(walk.top / peak) if peak else 1.0, arena_order="compacted",
                moved_bytes=walk.moved_bytes)
    if walk.fences:
        meta["added_fences"] = walk.fences
    return Program(n_nodes=program.n_nodes, instructions=instructions, arena_bytes=walk.top, meta=meta)


def without_moves(program: Program) -> Program:
    """``program`` before layout: its MOVEs dropped, offsets and arena cleared (a
    compacted layout's offsets hold only with its MOVEs)."""
    if not program.n_move:
        return program
    # Added FENCEs stay (they only wait; a layout afresh may not need them, but it is valid).
    meta = {k: v for k, v in program.meta.items() if k not in ("moved_bytes", "arena_order")}
    instructions = tuple(replace(x, offset=None) for x in program.instructions if x.op is not Op.MOVE)
    return Program(n_nodes=program.n_nodes, instructions=instructions, arena_bytes=None, meta=meta)
