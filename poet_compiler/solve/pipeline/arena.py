"""Arena retries: a schedule whose live bytes fit but whose arena does not, even re-planned
and compacted (:mod:`..finalize`), is searched for again below the overshoot.

Each attempt runs bounds and improvement (the driver's ``attempt``) at the budget minus a
reserve held back for fragmentation: the overshoot, and at least enough to exclude the
schedule's peak. A reserve that leaves no schedule is halved towards the last one that was
too little, up to ``max_arena_retries`` attempts while effort is left.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.pipeline.answer import Answer, says, then
from poet_compiler.solve.pipeline.context import Context
from poet_compiler.solve.pipeline.incumbents import Incumbents, refitted

#: One attempt at the budget minus a reserve, from these incumbents.
Attempt = Callable[[Context, int, Incumbents], Answer]


@dataclass(frozen=True)
class Tries:
    """What the attempts ended with: the last one's answer; the one whose schedule fits
    (``best``), or the proof of infeasibility at the full budget (``proven``); the first
    attempt's bound (valid for the user's budget); how many schedules were given up for
    their arena; and per attempt its reserve and whether it found a schedule."""

    last: Answer
    best: Answer | None
    proven: Answer | None
    full_bound: float | None
    arena_failures: int
    tried: tuple[tuple[int, bool], ...]


def arena_retries(ctx: Context, first: Incumbents, attempt: Attempt) -> Tries:
    """Attempts below the arena's overshoot (module docstring), from ``first``'s incumbents."""
    budget = ctx.problem.activation_budget
    arena_failures = 0               # schedules whose live bytes fit but whose arena did not
    first_arena = 0                  # the arena of the first of them
    reserve = 0                      # bytes held back from the budget for fragmentation
    too_little = 0                   # a reserve whose schedule's arena did not fit
    too_much: int | None = None      # a reserve that left no schedule at all
    previous: Schedule | None = first.given if first.given is not None else first.hint
    best = proven = None
    full_bound: float | None = None  # the first attempt's bound: valid for the user's budget
    tried: list[tuple[int, bool]] = []
    last: Answer | None = None
    for k in range(ctx.tuning.max_arena_retries + 1):
        if k and ctx.left() < ctx.tuning.min_stage_s:
            break
        # A re-solve starts from the first attempt's warm starts that fit its budget and
        # the heuristics' plans at that budget, run again as in the first attempt.
        known = first if k == 0 else refitted(ctx, first, reserve, previous)
        last = dataclasses.replace(attempt(ctx, reserve, known), retries=k)
        last = last.noted(fragmentation_retries=k, fragmentation_reserve_bytes=reserve)
        tried.append((reserve, last.schedule is not None))
        if k == 0:
            full_bound = last.notes.get("backend_bound_j")
            if last.status == "infeasible" and last.proven:
                proven = last
                break
        if last.ok:
            if k:
                note = (f"arena: re-solved {k} time(s) with {reserve} B held back for fragmentation "
                        f"(the schedule at the full budget needed a {first_arena} B arena)")
                last = last.saying(then(last.message, says(note)))
            best = last
            break
        if k and last.status == "infeasible" and last.schedule is None and reserve - too_little > 1:
            # The reserve left no schedule: one whose peak lies between may still have an
            # arena that fits (its layout need not fragment as much). Halve the interval.
            too_much = reserve
            reserve = (too_little + reserve) // 2
            continue
        if not last.arena_miss:
            break
        # Live bytes fit, the arena does not (even re-planned harder): hold back the
        # overshoot, and at least enough to exclude this schedule's peak, and solve again
        # (below a reserve known to leave no schedule).
        arena = last.arena_bytes or 0
        arena_failures += 1
        first_arena = first_arena or arena
        too_little = reserve
        reserve = max(reserve + max(1, arena - budget), budget - (last.peak_ram_bytes or budget) + 1)
        if too_much is not None and reserve >= too_much:
            if too_much - too_little <= 1:
                break
            reserve = (too_little + too_much) // 2
        previous = last.schedule
        if budget - reserve < 1:
            break
    assert last is not None   # the first attempt always runs
    return Tries(last, best, proven, full_bound, arena_failures, tuple(tried))
