"""Incumbents: every heuristic's schedule that fits (:mod:`..warm_start`), the search's
start and, when nothing beats them, the answer (:func:`fallback`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from poet_compiler import work
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.baselines import HEURISTICS
from poet_compiler.solve.pipeline.answer import Answer, finalized
from poet_compiler.solve.pipeline.context import Context
from poet_compiler.solve.warm_start import Candidate, refit


@dataclass(frozen=True)
class Incumbents:
    """The known schedules that meet the budget, cheapest first, and the user's warm start."""

    candidates: tuple[Candidate, ...]
    given: Schedule | None = None

    @property
    def hint(self) -> Schedule | None:
        """Where the search starts: the cheapest candidate, else the given schedule."""
        return self.candidates[0].schedule if self.candidates else self.given


def incumbents(ctx: Context, warm_start: Schedule | None) -> Incumbents:
    """The heuristics' plans that fit (and ``warm_start``), none started after
    ``warm_start_share`` of the effort."""
    clock = ctx.clock
    with ctx.stage("warm_starts"):
        found = ctx.steps.warm_starts(ctx.problem, warm_start,
                                      until=clock.started + ctx.tuning.warm_start_share * clock.limit_s)
    return Incumbents(tuple(found), warm_start)


def refitted(ctx: Context, first: Incumbents, reserve: int, previous: Schedule | None) -> Incumbents:
    """A re-solve's incumbents at the budget minus ``reserve``: the first attempt's that
    still fit, ``previous`` (the schedule whose arena did not fit) and the heuristics run
    again at that budget (:func:`~..warm_start.refit`)."""
    tight = dataclasses.replace(ctx.problem, ram_budget_bytes=ctx.problem.ram_budget_bytes - reserve)
    with ctx.stage("warm_starts"):
        found = refit(first.candidates, tight, previous, rerun=HEURISTICS,
                      until=work.now() + ctx.tuning.warm_start_share * ctx.left())
    return Incumbents(tuple(found))


def fallback(ctx: Context, candidates: tuple[Candidate, ...], *, needed: bool, finalize_s: float,
             tries: int = 4) -> Answer | None:
    """The cheapest of ``candidates`` that finalize accepts (arena included), or None.

    Candidates are finalized only while effort is left (arena planning within it), except
    the first when ``needed`` (nothing else to answer with: its arena is then planned
    greedily if the effort is spent). ``finalize_s``: what one finalize takes here
    (measured in work); no optional candidate starts with less than that left."""
    for candidate in candidates[:tries]:
        if not needed and ctx.left() <= finalize_s:
            break
        t_fin = work.now()
        arena_s = max(ctx.left(), ctx.tuning.last_step_min_s if needed else 0.0)
        # Candidates are valid schedules: finalize raises InternalError on a broken one.
        done = ctx.finalize(candidate.schedule, arena_time_s=arena_s)
        if done.ok:
            return finalized(done).noted(fallback_schedule=candidate.name)
        finalize_s = max(finalize_s, work.now() - t_fin)
    return None
