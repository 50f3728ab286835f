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

import poet_compiler.solve.guided as guided_mod
import poet_compiler.solve.finalize as finalize_mod
import poet_compiler.solve.milp as milp
import poet_compiler.solve.row_generation as row_generation
from poet_compiler import work
from poet_compiler.solve.budgets import reference
from poet_compiler.solve.clock import STAGES, Clock
from poet_compiler.solve.milp import solve_milp
from poet_compiler.solve.options import effort_units
from tests.support.graphs import random_problem

EPS = 0.05      # the test's deadline starts a little before solve_milp's own clock


class _Recorder:
    """Wraps the time-limited calls of solve_milp: sleeps, then records (what it was
    given, what was left to the deadline when it started)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, limit_s: float, sleep_s: float) -> None:
        self.limit_s, self.sleep_s = limit_s, sleep_s
        self.deadline = 0.0
        self.calls: list[tuple[str, float, float]] = []   # (what, effective seconds asked, left)
        real_cover_m, real_cover_g = milp.cover_bound, guided_mod.cover_bound
        real_solve_g = guided_mod.solve_model
        real_solve_r = row_generation.solve_model
        real_warm, real_finalize = milp.warm_start_candidates, milp.finalize
        real_explain = milp.explain_infeasible

        def left() -> float:
            # The solve's deadlines are work (poet_compiler.work): what is left of its effort.
            return self.deadline - work.now()

        def cover(real):  # noqa: ANN001, ANN202
            def run(problem, **kw):  # noqa: ANN001, ANN003, ANN202
                self.calls.append(("cover_bound", kw.get("time_limit_s", 10.0), left()))
                time.sleep(self.sleep_s)
                return real(problem, **kw)
            return run

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
            return real_warm(*a, **kw)

        def finalize(*a, **kw):  # noqa: ANN002, ANN003, ANN202
            if kw.get("arena_time_s") is not None:
                self.calls.append(("finalize arena", kw["arena_time_s"], left()))
            time.sleep(self.sleep_s / 2)
            return real_finalize(*a, **kw)

        def explain(problem, **kw):  # noqa: ANN001, ANN003, ANN202
            self.calls.append(("explain_infeasible", kw["time_limit_s"], left()))
            return real_explain(problem, **kw)

        monkeypatch.setattr(milp, "cover_bound", cover(real_cover_m))
        monkeypatch.setattr(guided_mod, "cover_bound", cover(real_cover_g))
        monkeypatch.setattr(guided_mod, "solve_model", solve(real_solve_g))
        monkeypatch.setattr(row_generation, "solve_model", solve(real_solve_r))
        monkeypatch.setattr(milp, "warm_start_candidates", warm)
        monkeypatch.setattr(milp, "finalize", finalize)
        monkeypatch.setattr(milp, "explain_infeasible", explain)

    def solve(self, problem, **kw):  # noqa: ANN001, ANN003, ANN201
        self.deadline = effort_units(None, self.limit_s)
        return solve_milp(problem, time_limit_s=self.limit_s, **kw)


def _check_accounting(res, rec: _Recorder) -> None:  # noqa: ANN001
    stage_s = res.extra.stage_s
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
        allowed = max(0.0, left, finalize_mod.LAST_STEP_MIN_S if what in ("finalize arena", "explain_infeasible")
                      else 0.0)
        assert asked <= allowed + EPS, (what, asked, left, rec.calls)


@pytest.mark.parametrize("seed", [0, 3])
def test_every_stage_gets_at_most_what_is_left(monkeypatch, seed) -> None:
    """Slow warm starts, cover solves and finalize: every later stage sees less time, and
    none is given more than is left. Before, each took its own share of the limit (the
    cover 10 s, each realization's cover 10 s, the full model at least 0.5 s, the
    fallbacks' finalize after the limit), so the stages added up past it."""
    rec = _Recorder(monkeypatch, limit_s=5.0, sleep_s=0.5)
    problem = random_problem(seed, 30, "poet", deadline_prob=0.0, budget_fraction=0.1)
    res = rec.solve(problem, gap_limit=0.0)
    _check_accounting(res, rec)


def test_infeasibility_analysis_gets_what_is_left(monkeypatch) -> None:
    """A budget the cover proves infeasible: the analysis after it is bounded by the time left."""
    rec = _Recorder(monkeypatch, limit_s=3.0, sleep_s=0.4)
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
def test_the_search_ends_before_the_wall_cap_by_finalizes_reserve(monkeypatch, limit_s, stated_s) -> None:
    """The search's wall cap (every CP-SAT call's wall allowance ends by it) is the limit
    less the per-node finalize reserve and WALL_MARGIN of the user's limit (at most half
    the limit): MobileNetV2 at --time-limit 10 finalized 0.21 s past the cap, and CP-SAT
    calls stopped by the cap returned up to 0.29 s past it."""
    seen: list[tuple[float, float | None]] = []
    real = milp.warm_start_candidates

    def warm(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        meter = work.current()
        assert meter is not None
        seen.append((time.perf_counter(), meter.wall_at))
        return real(*a, **kw)

    monkeypatch.setattr(milp, "warm_start_candidates", warm)
    problem = random_problem(2, 30, "poet", deadline_prob=0.0)
    started = time.perf_counter()
    solve_milp(problem, time_limit_s=limit_s, stated_limit_s=stated_s, effort=0.2)
    reserve = min(milp.FINALIZE_S_PER_NODE * problem.n + milp.WALL_MARGIN * (stated_s or limit_s), limit_s / 2)
    assert seen and seen[0][1] is not None
    assert started + limit_s - reserve - EPS <= seen[0][1] <= seen[0][0] + limit_s - reserve


def test_once_the_wall_cap_has_passed_the_best_heuristic_is_the_answer(monkeypatch) -> None:
    """Heuristics that ran into the wall cap leave no time for bounds (the cover's build alone
    took 0.9 s on gpt2_large at --time-limit 20): the best heuristic's schedule is the
    answer, without a bound, and the report says the time limit stopped it."""
    real = milp.warm_start_candidates

    def slow(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        time.sleep(0.6)
        return real(*a, **kw)

    monkeypatch.setattr(milp, "warm_start_candidates", slow)
    p = random_problem(3, 20, "poet", deadline_prob=0.0)
    problem = dataclasses.replace(p, ram_budget_bytes=reference(p.graph, p.costs).peak_bytes)
    res = solve_milp(problem, time_limit_s=0.5, effort=30.0)
    assert res.ok and res.extra.fallback_schedule is not None, res.message
    assert "the time limit passed before the bounds" in res.message
    assert res.extra.cover_bound_j is None and res.extra.stopped_by == "time"


def test_messages_name_the_time_limit_once_it_decided() -> None:
    """A search the wall cap stopped says so ("stopped at the time limit"), not that the
    effort ran out, in line with its stopped_by "time"."""
    clock = Clock(3.0)
    with work.metered(work.Meter()) as meter:
        assert milp._stopped_text(clock) == "stopped at the effort limit (3 deterministic s of effort)"
        meter.time_hit = True
        assert milp._stopped_text(clock) == "stopped at the time limit"
        assert milp._effort_text(clock) == "the time limit"
