"""Static arena planner: every buffer of a Program gets a fixed offset in one RAM arena.

A microcontroller has no malloc, so the Program's buffers are laid out offline. This is
offline dynamic storage allocation (DSA): each buffer is an interval of instructions
(from its allocation — ``COMPUTE k`` or ``PAGE_IN i`` — to its ``FREE``, or the
program's end) and a size; buffers whose intervals overlap must not overlap in the
arena. Minimizing the arena is NP-hard; the lower bound is the peak of live bytes. The
planner keeps the smallest of:

1. greedy placements (TFLite Micro style) in several orders — size, size×lifetime,
   lifetime, program order, and "greedy by breadth" (Pisarchyk & Lee 2020: instructions
   by total live bytes descending, the unplaced buffers of each by size) — each with
   first fit (lowest offset) and best fit (smallest gap that holds the buffer);
2. a local improvement pass: re-place in the order of the best layout's offsets, then
   repeatedly move a buffer that touches the arena's top to the front of the order
   (seeded, bounded; accepts equal arenas to cross plateaus);
3. for instances of at most ``EXACT_MAX_BUFFERS`` buffers still above the peak, an exact
   packing on CP-SAT (``NoOverlap2D``: address × instruction rectangles) hinted with the
   best greedy layout, under a *deterministic* time limit on one worker, so the same
   program always gets the same layout. It stops at the peak (proven optimal) or at the
   limit with the best layout found, never worse than the hint. It runs in two passes
   (``EXACT_PASSES``, with and without CP-SAT's LP), in coarse address units (sizes
   rounded up, at most 0.2 % on the peak) where the sizes' gcd would give CP-SAT huge
   domains.

Workspace convention (the simulator checks it): the workspace of ``COMPUTE k`` lies right
after its output buffer, at ``offset + output_bytes``, for the duration of that compute
only. So an output buffer is ``output_bytes + workspace_bytes`` wide against the buffers
live during its compute and ``output_bytes`` wide against those allocated later — an
L shape, two rectangles in the exact model.

``FREE i`` and ``PAGE_OUT i`` carry the offset of the buffer they touch; ``FENCE`` none.
``program.meta`` receives ``peak_bytes`` (largest live bytes, workspace included),
``fragmentation`` (= arena_bytes / peak_bytes, >= 1) and ``arena_order`` (which method won).
The buffers, their conflicts and the greedy placement are :mod:`.packing`'s.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from typing import Any

from poet_compiler import work
from poet_compiler.errors import ScheduleError
from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schedule.interpreter import ProgramInterpreter
from poet_compiler.schedule.packing import Buffer, Instance, buffers_of, peak_live_bytes
from poet_compiler.schedule.program import Instruction, Op, Program
from poet_compiler.solvers.native import NativeLimits, new_model, solve_native

# Local improvement: moves tried per call (each is one placement, O(conflicting pairs)),
# capped so that moves x conflicting pairs stays below IMPROVE_WORK (~1 s of Python).
IMPROVE_MOVES = 60
IMPROVE_WORK = 1_500_000
# Exact packing: only small instances, with a deterministic-time cap (CP-SAT's
# "deterministic seconds", roughly wall seconds on one core); ``effort`` scales it.
EXACT_MAX_BUFFERS = 400
EXACT_DETERMINISTIC_S = 0.25
# The exact packing runs in passes (CP-SAT linearization level, coarse address units),
# each with an equal share of the deterministic time, each hinted with the layout so far.
# Without CP-SAT's LP relaxation (level 0) search nodes are cheap and most layouts come
# quickly (one that took 8+ deterministic seconds came in 0.25); with it (level 1,
# CP-SAT's default) a few large programs pack tighter. Coarse units (_quantum) shrink the
# domains of large programs (small ones keep the gcd): measured on ResNet-18-CIFAR
# (bench/arena_bench.py --guided), at the retry's effort they fitted 4/4 near-budget
# guided schedules (fine units: 2/4; coarse then fine: 3/4) and gave the smallest mean
# arena, at the price of stopping 0.01 % above the peak where fine units reach it.
EXACT_PASSES: tuple[tuple[int, bool], ...] = ((0, True), (1, True))
EXACT_WALL_PER_DET_S = 10.0
# Coarse units cost at most this share of the peak, and only programs whose peak spans
# more than EXACT_FINE_UNITS of the sizes' gcd get them.
EXACT_QUANTUM_SLACK = 0.002
EXACT_FINE_UNITS = 1 << 14


class _Placer(ProgramInterpreter):
    """The Program with each instruction's arena offset: a buffer's, from its allocation
    (``at_start``: allocating instruction index -> offset) to its FREE; none on FENCE."""

    def __init__(self, program: Program, at_start: dict[int, int]) -> None:
        super().__init__(program)
        self.at_start = at_start
        self.current: dict[int, int] = {}
        self.out: list[Instruction] = []

    def _allocate(self, ins: Instruction) -> None:
        self.current[ins.node] = self.at_start[self.index]
        self.out.append(replace(ins, offset=self.at_start[self.index]))

    def _place(self, ins: Instruction) -> None:
        self.out.append(replace(ins, offset=self.current.get(ins.node)))

    compute = page_in = _allocate
    free = page_out = _place

    def fence(self, ins: Instruction) -> None:
        self.out.append(replace(ins, offset=None))

    def move(self, ins: Instruction) -> None:
        # The arena is planned afresh for a program without MOVEs (finalize strips a given
        # Program's: compact.without_moves); a MOVE here would be laid out at a stale offset.
        raise ScheduleError(f"instruction {self.index} ({ins}): plan_arena lays out programs without MOVE")

    def finish(self) -> tuple[Instruction, ...]:
        return tuple(self.out)


def _orders(inst: Instance, extra: int) -> list[tuple[str, list[int]]]:
    buffers = inst.buffers
    idx = list(range(len(buffers)))
    width = inst.width
    life = [b.end - b.start for b in buffers]
    orders = [
        ("size", sorted(idx, key=lambda j: (-width[j], buffers[j].start))),
        ("size*lifetime", sorted(idx, key=lambda j: (-width[j] * life[j], buffers[j].start))),
        ("lifetime", sorted(idx, key=lambda j: (-life[j], -width[j], buffers[j].start))),
        ("program", idx),
        ("breadth", _breadth_order(inst)),
    ]
    rng = random.Random(0)   # fixed seed: same program, same layout
    for r in range(extra):
        # Perturbed size order: sort by size times a random factor in [0.5, 1.5).
        noise = [0.5 + rng.random() for _ in idx]
        orders.append((f"perturbed#{r}", sorted(idx, key=lambda j: (-width[j] * noise[j], j))))
    return orders


def _breadth_order(inst: Instance) -> list[int]:
    """Greedy by breadth: instructions by live bytes (descending), and at each the
    not-yet-ordered live buffers by size (descending)."""
    buffers = inst.buffers
    points = sorted({b.start for b in buffers})
    live: dict[int, list[int]] = {t: [] for t in points}
    for j, b in enumerate(buffers):
        for t in points:
            if b.start <= t < b.end:
                live[t].append(j)
    breadth = {t: sum(buffers[j].size for j in live[t]) + sum(buffers[j].workspace for j in live[t]
                                                              if buffers[j].start == t) for t in points}
    seen: set[int] = set()
    order: list[int] = []
    for t in sorted(points, key=lambda t: (-breadth[t], t)):
        for j in sorted(live[t], key=lambda j: (-inst.width[j], buffers[j].start)):
            if j not in seen:
                seen.add(j)
                order.append(j)
    order.extend(j for j in range(len(buffers)) if j not in seen)
    return order


def _improve(inst: Instance, arena: int, offsets: list[int], peak: int, moves: int,
             target: int | None, until: float | None = None) -> tuple[int, list[int]]:
    """Local search over placement orders, starting from a layout (see module docstring);
    stops at the instant ``until`` (``work.now()``) when given, and at the meter's wall cap."""
    n = len(inst.buffers)
    order = sorted(range(n), key=lambda j: (offsets[j], -inst.width[j], j))
    best = (arena, offsets)
    for best_fit in (False, True):
        a, o = inst.place(order, best_fit)
        if a < best[0]:
            best = (a, o)
    cur_order, cur = order, best[0]
    rng = random.Random(1)
    for _ in range(moves):
        if best[0] <= peak or (target is not None and best[0] <= target):
            break
        if (until is not None and work.now() > until) or work.wall_expired():   # nothing charges these moves
            break
        a_now, offs = inst.place(cur_order, False)
        top = [j for j in range(n) if offs[j] + inst.width[j] == a_now and inst.width[j] > 0]
        if not top:
            break
        j = top[rng.randrange(len(top))]
        # Move the top buffer (and, at random, one of its time neighbours) to the front.
        new = [j] + [k for k in cur_order if k != j]
        if inst.conflicts[j] and rng.random() < 0.5:
            k = inst.conflicts[j][rng.randrange(len(inst.conflicts[j]))][0]
            new = [k] + [x for x in new if x != k]
        a, o = inst.place(new, False)
        if a <= cur:
            cur_order, cur = new, a
            if a < best[0]:
                best = (a, o)
    return best


@dataclass(frozen=True)
class ExactSearch:
    """One pass of the exact packing: its deterministic time, the ``target`` arena (the
    caller's budget: the first layout within it ends the search), CP-SAT's linearization
    level, ``coarse`` address units (:func:`_quantum`, else the sizes' gcd), ``wall_s``
    (a wall-clock cap below the usual safety net: the caller's time left) and the seed."""

    det_time_s: float
    target: int | None = None
    linearization: int = 1
    coarse: bool = False
    wall_s: float | None = None
    seed: int = 0


def _exact(inst: Instance, hint: list[int], upper: int, peak: int,
           search: ExactSearch) -> tuple[int, list[int]] | None:
    """CP-SAT packing (see module docstring); None when it finds nothing better than
    ``upper``. Solved by :func:`~poet_compiler.solvers.native.solve_native` (its one
    stopping rule: the wall limit, the deterministic time, and the target as the
    objective's floor)."""
    det_time_s, target, linearization = search.det_time_s, search.target, search.linearization
    coarse, wall_s, seed = search.coarse, search.wall_s, search.seed
    real_width = inst.width
    g = _quantum(inst.buffers, peak) if coarse else _gcd(inst.buffers)
    if any(b.size % g or b.workspace % g for b in inst.buffers):
        # Sizes rounded up to the quantum: a layout of the rounded buffers is a layout of
        # the real ones (each real L shape lies inside its rounded one).
        inst = Instance(_rounded(inst.buffers, g))
        if any(h % g for h in hint) or not inst.valid(hint):
            # Hint the rounded instance with the hint's stacking order, placed first fit.
            _, hint = inst.place(sorted(range(len(hint)), key=lambda j: (hint[j], j)), False)
        upper = max(upper, max((h + w for h, w in zip(hint, inst.width)), default=0))
    buffers = inst.buffers
    width = [w // g for w in inst.width]
    m = new_model()
    horizon = -(-upper // g)
    arena = m.new_int_var(-(-peak // g), horizon, "arena")
    xs: list[Any] = []      # CP-SAT IntVar or None (a buffer of width 0)
    x_iv, y_iv = [], []
    for j, b in enumerate(buffers):
        if width[j] == 0:
            xs.append(None)
            continue
        # The hint's offsets need not be multiples of g: the domain is the whole range.
        x = m.new_int_var(0, horizon - width[j], f"x{j}")
        xs.append(x)
        m.add(x + width[j] <= arena)
        if b.size > 0:
            x_iv.append(m.new_fixed_size_interval_var(x, b.size // g, f"bx{j}"))
            y_iv.append(m.new_fixed_size_interval_var(b.start, b.end - b.start, f"by{j}"))
        if b.workspace > 0:
            x_iv.append(m.new_fixed_size_interval_var(x + b.size // g, b.workspace // g, f"wx{j}"))
            y_iv.append(m.new_fixed_size_interval_var(b.start, 1, f"wy{j}"))
        if hint[j] % g == 0:
            m.add_hint(x, hint[j] // g)
    m.add_no_overlap_2d(x_iv, y_iv)
    m.minimize(arena)
    # Wall-clock safety net, never meant to bind: deterministic time accrues at about
    # 0.16 per wall second without the LP on a 175-buffer ResNet-18 program (4x bound
    # there, and the layout then changed between runs). When it binds the layout is
    # still valid and never worse than the hint, but may differ between runs.
    wall = EXACT_WALL_PER_DET_S * det_time_s + 1.0
    if wall_s is not None:
        wall = max(0.01, min(wall_s, wall))
    # The target (the caller's budget) in address units: the first layout within it ends
    # the search (the objective is floored there, so it is optimal).
    res = solve_native(m, NativeLimits(time_limit_s=wall, deterministic_s=det_time_s,
                                       target=None if target is None else target // g, workers=1,
                                       seed=seed, linearization_level=linearization))
    if not res.has_solution:
        return None
    offsets = [0 if x is None else g * res.value(x) for x in xs]
    a = max((offsets[j] + real_width[j] for j in range(len(buffers))), default=0)
    return a, offsets


def _gcd(buffers: list[Buffer]) -> int:
    g = 0
    for b in buffers:
        g = math.gcd(math.gcd(g, b.size), b.workspace)
    return max(g, 1)


def _rounded(buffers: list[Buffer], q: int) -> list[Buffer]:
    """``buffers`` with output and workspace sizes rounded up to multiples of ``q``."""
    return [replace(b, size=-(-b.size // q) * q, workspace=-(-b.workspace // q) * q) for b in buffers]


def _quantum(buffers: list[Buffer], peak: int) -> int:
    """The exact packing's address unit: the gcd of the sizes when the peak spans at most
    ``EXACT_FINE_UNITS`` of it (exact, and small enough), else the largest ``gcd * 2**k``
    whose rounded-up sizes raise the peak of live bytes by at most
    ``EXACT_QUANTUM_SLACK``. Coarser units make CP-SAT's domains far smaller: on a
    ResNet-18-CIFAR program whose sizes are 4 MiB and 4 MiB + 1 KiB (gcd 512 B), 16 KiB
    units packed it within its budget in 4 s where 512 B units had not in 10."""
    g = _gcd(buffers)
    if peak // g <= EXACT_FINE_UNITS:
        return g
    best = q = g
    while q < peak:
        q *= 2
        if peak_live_bytes(_rounded(buffers, q)) > peak * (1 + EXACT_QUANTUM_SLACK):
            break
        best = q
    return best


def exact_packing_applies(program: Program) -> bool:
    """Whether :func:`plan_arena` tries the exact packing on ``program``: at most
    ``EXACT_MAX_BUFFERS`` buffers, one per COMPUTE and PAGE_IN."""
    return sum(1 for x in program if x.op is Op.COMPUTE or x.op is Op.PAGE_IN) <= EXACT_MAX_BUFFERS


def plan_arena(graph: TrainingGraph, program: Program, *, effort: int = 0,
               budget_bytes: int | None = None, time_limit_s: float | None = None) -> Program:
    """Return ``program`` with every buffer's offset and ``arena_bytes`` set.

    ``effort`` adds that many seeded perturbed greedy orders and scales the local search
    and the exact packing's time. More effort tries more, but it does not always give a
    smaller arena: the exact packing starts from the best greedy layout, and CP-SAT's
    search from a different start can end higher within its time. With a
    ``budget_bytes``, the search stops once a layout fits it. ``time_limit_s``: wall
    seconds for the whole plan (the first greedy layout is always made; the local search
    and the exact packing stop at the limit, CP-SAT by its wall-clock limit).
    """
    until = None if time_limit_s is None else work.now() + max(0.0, time_limit_s)
    buffers = buffers_of(graph, program)
    peak = peak_live_bytes(buffers)
    inst = Instance(buffers)
    best: tuple[int, list[int], str] | None = None

    def done() -> bool:
        return best is not None and (best[0] <= peak or (budget_bytes is not None and best[0] <= budget_bytes))

    def out_of_time() -> bool:
        # The greedy orders charge no work: past the meter's wall cap (a compile stopped by
        # --time-limit) they stop too; gpt2_large's took 4 s there.
        return work.past(until)

    for name, order in _orders(inst, effort):
        for best_fit in (False, True):
            arena, offsets = inst.place(order, best_fit)
            if best is None or arena < best[0]:
                best = (arena, offsets, name + ("/best-fit" if best_fit else ""))
            if done():
                break
        if done() or out_of_time():
            break
    if best is None:
        best = (0, [], "empty")
    if not done() and buffers and not out_of_time():
        pairs = max(1, sum(len(c) for c in inst.conflicts))
        moves = min(IMPROVE_MOVES * (1 + effort), max(8, IMPROVE_WORK // pairs))
        arena, offsets = _improve(inst, best[0], best[1], peak, moves, budget_bytes, until)
        if arena < best[0]:
            best = (arena, offsets, "local")
    if not done() and exact_packing_applies(program):
        det_s = EXACT_DETERMINISTIC_S * (1 + effort / 16) / len(EXACT_PASSES)
        for level, coarse in EXACT_PASSES:
            wall = None if until is None else until - work.now()
            if wall is not None and wall < 0.05:
                break
            found = _exact(inst, best[1], best[0], peak, ExactSearch(det_s, budget_bytes, level, coarse, wall))
            if found is not None and found[0] < best[0] and inst.valid(found[1]):
                best = (found[0], found[1], "exact")
            if done():
                break
    arena, offsets, name = best
    at_start = {b.start: off for b, off in zip(buffers, offsets)}
    placed = _Placer(program, at_start).run()
    meta = dict(program.meta)
    meta.update(peak_bytes=peak, fragmentation=(arena / peak) if peak else 1.0, arena_order=name)
    return Program(n_nodes=program.n_nodes, instructions=placed, arena_bytes=arena, meta=meta)
