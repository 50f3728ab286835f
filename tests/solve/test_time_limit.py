"""The time limit is a limit: one deadline for every stage of solve_milp.

The stages are made slow on purpose (sleeps around the real calls), so that they add up to
well beyond the limit if each took its own share as before. The checks are on the
accounting, not on the machine's speed: every time-limited call was given at most the
time left to the deadline when it started (a CP-SAT call: such that its child's wall cap,
limit x 1.05 + 2 s, ends by then), and the per-stage seconds add up to solve_time_s.
"""

from __future__ import annotations

import dataclasses
import time

import pytest

from poet_compiler import work
from poet_compiler.solve.budgets import reference
from poet_compiler.solve.clock import STAGES, Clock
from poet_compiler.solve.cover import cover_bound
from poet_compiler.solve.feasibility import explain_infeasible
from poet_compiler.solve.finalize import finalize_plan
from poet_compiler.solve.milp import solve_milp
from poet_compiler.solve.options import SolveOptions, effort_units
from poet_compiler.solve.pipeline.context import Context
from poet_compiler.solve.pipeline.steps import STEPS
from poet_compiler.solve.tuning import TUNING
from poet_compiler.solve.warm_start import warm_start_candidates
from tests.support.graphs import random_problem

EPS = 0.05      # the test's deadline starts a little before solve_milp's own clock


class _Recorder:
    """Steps of solve_milp that sleep, then record (what they were given, what was left to
    the deadline when they started) around the real ones (pipeline.context.Steps)."""

    def __init__(self, limit_s: float, sleep_s: float) -> None:
        self.limit_s, self.sleep_s = limit_s, sleep_s
        self.deadline = 0.0
        self.calls: list[tuple[str, float, float]] = []   # (what, effective seconds asked, left)

        def left() -> float:
            # The solve's deadlines are work (poet_compiler.work): what is left of its effort.
            return self.deadline - work.now()

        def cover(problem, **kw):  # noqa: ANN001, ANN003, ANN202
            self.calls.append(("cover_bound", kw.get("time_limit_s", 10.0), left()))
            time.sleep(self.sleep_s)
            return cover_bound(problem, **kw)

        def solve(real):  # noqa: ANN001, ANN202
            def run(model, solver, opts, **kw):  # noqa: ANN001, ANN003, ANN202
                # CP-SAT's own limit within the time left, and the child's wall cap within
                # it plus the limit's tolerance (or, with too little left for the cap's pad,
                # CP-SAT's limit at most half of what is left).
                now_left = left()
                self.calls.append(("solve_model", opts.time_limit_s, now_left))
                return real(model, solver, opts, **kw)
            return run

        def warm(*a, **kw):  # noqa: ANN002, ANN003, ANN202
            time.sleep(self.sleep_s)
            return warm_start_candidates(*a, **kw)

        def finalize(*a, **kw):  # noqa: ANN002, ANN003, ANN202
            if kw.get("arena_time_s") is not None:
                self.calls.append(("finalize arena", kw["arena_time_s"], left()))
            time.sleep(self.sleep_s / 2)
            return finalize_plan(*a, **kw)

        def explain(problem, **kw):  # noqa: ANN001, ANN003, ANN202
            self.calls.append(("explain_infeasible", kw["time_limit_s"], left()))
            return explain_infeasible(problem, **kw)

        # The guided stage's realizations solve covers too: the same recorder.
        self.steps = dataclasses.replace(STEPS, cover_bound=cover, solve_guided=solve(STEPS.solve_guided),
                           solve_full=solve(STEPS.solve_full), warm_starts=warm, finalize=finalize,
                           explain_infeasible=explain)

    def solve(self, problem, **kw):  # noqa: ANN001, ANN003, ANN201
        self.deadline = effort_units(None, self.limit_s)
        return solve_milp(problem, SolveOptions(time_limit_s=self.limit_s, **kw), steps=self.steps)


def _check_accounting(res, rec: _Recorder) -> None:  # noqa: ANN001
    stage_s = res.notes.stage_s
    assert stage_s, "no stage accounting"
    assert set(stage_s) <= set(STAGES), stage_s
    assert all(v >= 0 for v in stage_s.values())
    # Exclusive stages: together they are the solve time (rounded to ms each).
    assert sum(stage_s.values()) == pytest.approx(res.solve_time_s, abs=0.002 * len(stage_s) + 1e-3)
    # Sleeps are lower bounds on what their stage took.
    assert stage_s["warm_starts"] >= rec.sleep_s
    assert rec.calls, "no time-limited call was made"
    for what, asked, left in rec.calls:
        # The exceptions: the arena of the only schedule left to answer with, and the
        # infeasibility analysis, get LAST_STEP_MIN_S even past the deadline.
        allowed = max(0.0, left, TUNING.last_step_min_s if what in ("finalize arena", "explain_infeasible")
                      else 0.0)
        assert asked <= allowed + EPS, (what, asked, left, rec.calls)


@pytest.mark.parametrize("seed", [0, 3])
def test_every_stage_gets_at_most_what_is_left(seed) -> None:
    """Slow warm starts, cover solves and finalize: every later stage sees less time, and
    none is given more than is left. Before, each took its own share of the limit (the
    cover 10 s, each realization's cover 10 s, the full model at least 0.5 s, the
    fallbacks' finalize after the limit), so the stages added up past it."""
    rec = _Recorder(limit_s=5.0, sleep_s=0.5)
    problem = random_problem(seed, 30, "poet", deadline_prob=0.0, budget_fraction=0.1)
    res = rec.solve(problem, gap_limit=0.0)
    _check_accounting(res, rec)


def test_infeasibility_analysis_gets_what_is_left() -> None:
    """A budget the cover proves infeasible: the analysis after it is bounded by the time left."""
    rec = _Recorder(limit_s=3.0, sleep_s=0.4)
    problem = random_problem(1, 20, "remat", deadline_prob=0.0, budget_fraction=0.0)
    res = rec.solve(problem)
    _check_accounting(res, rec)


def test_stage_seconds_are_exclusive() -> None:
    """Nested stages charge the inner one only; ``other`` is the time outside every stage."""
    clock = Clock(10.0)
    with clock.stage("guided"):
        time.sleep(0.02)
        with clock.stage("finalize"):
            time.sleep(0.03)
    report = clock.report()
    assert report["finalize"] >= 0.03 and 0.02 <= report["guided"] < report["guided"] + report["finalize"]
    assert sum(report.values()) == pytest.approx(clock.elapsed(), abs=5e-3)
    assert list(report) == [s for s in STAGES if s in report]


@pytest.mark.parametrize(("limit_s", "stated_s"), [(10.0, None), (8.0, 10.0), (0.5, None)])
def test_the_search_ends_before_the_wall_cap_by_finalizes_reserve(limit_s, stated_s) -> None:
    """The search's wall cap (every CP-SAT call's wall allowance ends by it) is the limit
    less the per-node finalize reserve and WALL_MARGIN of the user's limit (at most half
    the limit): MobileNetV2 at --time-limit 10 finalized 0.21 s past the cap, and CP-SAT
    calls stopped by the cap returned up to 0.29 s past it."""
    seen: list[tuple[float, float | None]] = []

    def warm(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        meter = work.current()
        assert meter is not None
        seen.append((time.perf_counter(), meter.wall_at))
        return warm_start_candidates(*a, **kw)

    problem = random_problem(2, 30, "poet", deadline_prob=0.0)
    started = time.perf_counter()
    solve_milp(problem, SolveOptions(time_limit_s=limit_s, stated_limit_s=stated_s, effort=0.2),
               steps=dataclasses.replace(STEPS, warm_starts=warm))
    reserve = min(TUNING.finalize_s_per_node * problem.n + TUNING.wall_margin * (stated_s or limit_s), limit_s / 2)
    assert seen and seen[0][1] is not None
    assert started + limit_s - reserve - EPS <= seen[0][1] <= seen[0][0] + limit_s - reserve


def test_once_the_wall_cap_has_passed_the_best_heuristic_is_the_answer() -> None:
    """Heuristics that ran into the wall cap leave no time for bounds (the cover's build alone
    took 0.9 s on gpt2_large at --time-limit 20): the best heuristic's schedule is the
    answer, without a bound, and the report says the time limit stopped it."""
    def slow(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        time.sleep(0.6)
        return warm_start_candidates(*a, **kw)

    p = random_problem(3, 20, "poet", deadline_prob=0.0)
    problem = dataclasses.replace(p, ram_budget_bytes=reference(p.graph, p.costs).peak_bytes)
    res = solve_milp(problem, SolveOptions(time_limit_s=0.5, effort=30.0),
                     steps=dataclasses.replace(STEPS, warm_starts=slow))
    assert res.ok and res.notes.fallback_schedule is not None, res.message
    assert "the time limit passed before the bounds" in res.message
    assert res.notes.cover_bound_j is None and res.notes.stopped_by == "time"


def test_messages_name_the_time_limit_once_it_decided() -> None:
    """A search the wall cap stopped says so ("stopped at the time limit"), not that the
    effort ran out, in line with its stopped_by "time"."""
    with work.metered(work.Meter()) as meter:
        ctx = Context.start(random_problem(0, 4), SolveOptions(effort=3.0), steps=STEPS)
        assert ctx.stopped_text() == "stopped at the effort limit (3 deterministic s of effort)"
        meter.time_hit = True
        assert ctx.stopped_text() == "stopped at the time limit"
        assert ctx.effort_text() == "the time limit"
