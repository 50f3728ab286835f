"""No schedule lost to fragmentation: a schedule whose live bytes fit
but whose first arena plans do not is compacted (MOVEs, schedule/compact.py); where
compaction finds no room (buffers in flight) it is re-solved against the arena;
``extra.arena_rescue`` counts which step kept it.

The first plans are made to fragment on purpose (a planner that reports 3 bytes more
than its layout needs, as in test_milp's fragmentation test): without compaction the
optimum at the user's budget is then dropped for a re-solve at a lower budget, i.e. a
costlier schedule (or none); compaction keeps it.
"""

from __future__ import annotations

import dataclasses

import pytest

from poet_compiler.solve.milp import solve_milp
from poet_compiler.solve.options import SolveOptions
from tests.support.fragmentation import costlier_below_peak, laid_out, no_room, wasting
from tests.support.graphs import random_problem

WASTE = 3


# The first plans fragment (WASTE bytes on every arena); compaction still has room.
WASTEFUL = laid_out(plan_arena=wasting(WASTE))
# ... and compaction finds none (as when buffers in flight block every move).
WASTEFUL_NO_ROOM = laid_out(plan_arena=wasting(WASTE), compact_arena=no_room)


def _cases():  # noqa: ANN202
    return costlier_below_peak(WASTE)


def test_compaction_keeps_the_optimum() -> None:
    for problem, best, worse in _cases():
        res = solve_milp(problem, SolveOptions(gap_limit=0.0, time_limit_s=30), steps=WASTEFUL)
        assert res.ok and res.status == "optimal", res.message
        assert res.arena_bytes <= problem.activation_budget
        assert res.energy_j == pytest.approx(best, rel=1e-6) and res.energy_j < worse
        assert res.notes.arena_rescue == {"resolved": 0, "lost": 0, "compacted": 1}
        assert not res.notes.fragmentation_retries
        return
    pytest.fail("no random case needed compaction")


def test_resolve_is_counted_when_compaction_finds_no_room() -> None:
    for problem, _best, worse in _cases():
        res = solve_milp(problem, SolveOptions(gap_limit=0.0, time_limit_s=30), steps=WASTEFUL_NO_ROOM)
        assert res.ok, res.message
        assert res.energy_j == pytest.approx(worse, rel=1e-6)
        assert res.notes.arena_rescue == {"resolved": 1, "lost": 0}
        assert "arena: re-solved" in res.message
        return
    pytest.fail("no random case needed the re-solve")


def test_finalize_reports_what_compaction_cost() -> None:
    """A compacted result says what its copies cost (its energy less the same program's
    without MOVEs) and the static arena that did not fit."""
    from poet_compiler.schedule.compact import without_moves
    from poet_compiler.schedule.simulate import simulate

    for problem, _best, _worse in _cases():
        res = solve_milp(problem, SolveOptions(gap_limit=0.0, time_limit_s=30), steps=WASTEFUL)
        assert res.notes.arena_rescue is not None and res.notes.arena_rescue.get("compacted")
        bare = simulate(problem.graph, problem.costs, without_moves(res.program))
        assert res.notes.compaction_j == pytest.approx(res.energy_j - bare.energy_j, abs=1e-12)
        assert res.notes.compaction_j >= 0
        assert res.notes.static_arena_bytes > problem.activation_budget >= res.arena_bytes
        return
    pytest.fail("no random case needed compaction")


def test_a_reserve_that_leaves_no_schedule_is_halved() -> None:
    """Only programs at the least RAM have an arena that fits (the planner wastes the
    whole budget on any other), so the overshoot of the first schedule is held back and
    leaves no schedule at all. The reserve is then halved, between what was too little
    and what was too much, until a schedule at the least RAM is found and kept. The
    family's stages run as ``solve_milp`` runs them, so that the attempts are seen
    (``Tries.tried``: each reserve and whether it left a schedule)."""
    from poet_compiler import work
    from poet_compiler.schedule.arena import plan_arena
    from poet_compiler.schedule.simulate import simulate
    from poet_compiler.solve.milp import search
    from poet_compiler.solve.pipeline.context import Context
    from poet_compiler.solve.pipeline.incumbents import incumbents
    from poet_compiler.solve.pipeline.judge import judge
    from poet_compiler.solve.tuning import Tuning
    from tests.support.oracle import min_ram

    least = {"ram": 0}

    def only_least_ram_fits(graph, program, **kw):  # noqa: ANN001, ANN003, ANN202
        out = plan_arena(graph, program, **kw)
        peak = simulate(graph, problem.costs, program).peak_bytes
        waste = 0 if peak <= least["ram"] else problem.activation_budget
        return dataclasses.replace(out, arena_bytes=(out.arena_bytes or 0) + waste)

    steps = laid_out(plan_arena=only_least_ram_fits, compact_arena=no_room)
    for seed in range(20):
        problem = random_problem(seed, 6, "remat", deadline_prob=0.0, budget_fraction=1.0)
        least["ram"] = min_ram(problem) or 0
        with work.metered(work.Meter()):
            ctx = Context.start(problem, SolveOptions(gap_limit=0.0, time_limit_s=60),
                                tuning=Tuning(max_arena_retries=20), steps=steps)
            first = incumbents(ctx, None)
            tries = search(ctx, first)
            res = judge(ctx, first, tries)
        reserves = tries.tried
        halved = [r for (r, got), (r_next, _) in zip(reserves, reserves[1:]) if not got and r_next < r]
        if not halved:
            continue
        assert res.ok, (res.message, reserves)
        assert res.peak_ram_bytes == least["ram"] and res.arena_bytes <= problem.activation_budget
        assert res.notes["arena_rescue"]["resolved"] == 1
        return
    pytest.fail("no random case left no schedule at the overshoot's reserve")
