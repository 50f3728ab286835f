"""Cover-guided search: every schedule it produces is valid, fits, and is never below the optimum."""

from __future__ import annotations

import dataclasses

import pytest

from poet_compiler.schedule.linearize import check_schedule, linearize
from poet_compiler.schedule.simulate import simulate
from poet_compiler.solve.cover import CoverBound, cover_bound
from poet_compiler.solve.formulation.fast import Restriction, build_fast
from poet_compiler.solve.guided import (
    cover_schedule,
    guided_search,
    realize,
    restriction_for,
)
from poet_compiler.solve.options import SolveOptions
from poet_compiler.solve.pipeline.context import Context, Steps
from poet_compiler.solve.pipeline.steps import STEPS
from poet_compiler.solve.presence import presence_bound
from poet_compiler.solve.problem import Problem, feasible_energy
from poet_compiler.solve.tuning import TUNING
from poet_compiler.solvers import BackendOptions, solve_model
from tests.support.graphs import random_problem, training_problem
from tests.support.oracle import brute_force


def _ctx(problem: Problem, steps: Steps = STEPS) -> Context:
    """A context for the guided search alone: CP-SAT on one thread, an effort that never
    binds (the search's own ``time_limit_s`` does)."""
    return Context.start(problem, SolveOptions(solver="cpsat", threads=1, effort=1e6), steps=steps)


@pytest.mark.parametrize("mode", ["poet", "remat", "paging"])
def test_realized_schedules_obey_the_rules_and_fit_when_returned(mode: str) -> None:
    returned = 0
    for seed in range(12):
        problem = random_problem(seed, 12, mode, deadline_prob=0.3, budget_fraction=(0.2, 0.5, 0.8)[seed % 3])
        cover = cover_bound(problem)
        if cover.infeasible:
            continue
        check_schedule(problem.graph, realize(problem, cover), problem.mode)  # raises on a rule broken
        s = cover_schedule(problem, cover, time_limit_s=TUNING.cover_limit_s)
        if s is None:
            continue
        returned += 1
        sim = simulate(problem.graph, problem.costs, linearize(problem.graph, s, mode=problem.mode))
        assert sim.peak_bytes <= problem.activation_budget
        assert sim.energy_j >= cover.energy_j * (1 - 1e-9)
    assert returned >= 3


@pytest.mark.parametrize("seed", range(6))
def test_guided_search_never_beats_the_brute_force_optimum(seed: int) -> None:
    problem = random_problem(seed, 5, "poet", deadline_prob=0.5, budget_fraction=(0.0, 0.2)[seed % 2])
    cover = cover_bound(problem)
    exact = brute_force(problem)
    if cover.infeasible:
        assert exact is None
        return
    out = guided_search(_ctx(problem), problem, cover, None, time_limit_s=10, relative_gap=0.0)
    if exact is None:
        assert out.schedule is None
        return
    # A 5-node problem with a schedule: the search must find one, and not below the optimum.
    assert out.schedule is not None and out.energy_j is not None
    assert out.energy_j >= exact[0] * (1 - 1e-9)
    assert cover.energy_j <= exact[0] * (1 + 1e-9)


def test_restricted_model_only_has_the_allowed_decisions() -> None:
    problem = random_problem(2, 14, "poet", deadline_prob=0.0, budget_fraction=0.3)
    cover = cover_bound(problem)
    restriction = restriction_for(problem, cover, depth=TUNING.cascade_depth)
    built = build_fast(problem, restriction=restriction)
    assert set(built.R) <= set(restriction.recompute)
    assert {i for _, i in built.M_out} <= set(restriction.paging)
    full = build_fast(problem)
    assert built.model.n_vars <= full.model.n_vars
    empty = build_fast(problem, restriction=Restriction(frozenset(), frozenset()))
    assert not empty.R and not empty.M_in


def test_the_sub_problem_is_not_built_past_the_stage_deadline() -> None:
    """With no time left the guided stage returns what it has (the warm start) instead
    of building the sub-problem: its build is n^2 rows and took 28 s on 1,567 nodes."""
    import time

    from poet_compiler.solve.clock import step_until
    from poet_compiler.solve.formulation.common import BuildDeadline
    from poet_compiler.solve.warm_start import warm_start_candidates

    problem = random_problem(4, 40, "poet", deadline_prob=0.0, budget_fraction=0.3)
    with pytest.raises(BuildDeadline):
        with step_until(time.perf_counter() - 1.0):
            build_fast(problem)

    def no_solve(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("the sub-problem was solved past the deadline")

    cover = cover_bound(problem)
    warm = warm_start_candidates(problem)[0]
    out = guided_search(_ctx(problem, dataclasses.replace(STEPS, solve_guided=no_solve)), problem, cover,
                        warm.schedule, time_limit_s=0.0, relative_gap=0.0)
    assert out.energy_j is not None and out.energy_j <= warm[0]


def test_no_second_cover_is_built_without_the_time_the_first_took() -> None:
    """With ``until`` sooner than the cover's build took, the realization keeps to the
    cover in hand: it neither builds the closure variant nor re-solves at a lower budget."""
    import time

    built: list[bool] = []

    def spy(problem, **kw):  # noqa: ANN001, ANN003, ANN202
        built.append(kw.get("closure", False))
        return cover_bound(problem, **kw)

    problem = random_problem(3, 12, "poet", budget_fraction=0.5)
    cover = cover_bound(problem)
    assert cover.energy_j is not None and cover.build_s > 0.0
    cover_schedule(problem, cover, time_limit_s=TUNING.cover_limit_s, until=time.perf_counter() + 60.0, solve_cover=spy)
    assert True in built                                   # with the time, the closure cover is built
    built.clear()
    slow = dataclasses.replace(cover, build_s=1e6)         # a cover that took longer than the time left
    cover_schedule(problem, slow, time_limit_s=TUNING.cover_limit_s, until=time.perf_counter() + 60.0, solve_cover=spy)
    assert built == []


@pytest.mark.parametrize(("stage_long", "seed"), [(False, 1), (False, 5), (True, 2), (True, 7)])
def test_the_sub_problem_at_the_hints_time_keeps_the_hint(stage_long: bool, seed: int) -> None:
    """``half_the_slack`` lowers the deadline to half its slack, never below the hint's
    own step time; the hint must stay a solution of the sub-problem built at that deadline
    (the model's time rows and the simulator agree on it, also where the hint's time is
    the deadline), so the search is never worse than it."""
    from poet_compiler.solve.guided import build_guided, half_the_slack
    from poet_compiler.solve.problem import feasible_energy, simulate_schedule
    from poet_compiler.solve.warm_start import warm_start_candidates
    from poet_compiler.solvers import BackendOptions, solve_model

    base = random_problem(seed, 14, "poet", deadline_prob=0.0, budget_fraction=0.4, dma=stage_long,
                          static_w=0.1 if stage_long else 0.0)
    loose = dataclasses.replace(base, deadline_s=base.costs.compute_only_s * 3.0)
    assert loose.synchronous != stage_long
    energy, _, hint = warm_start_candidates(loose)[0]
    runtime = simulate_schedule(loose, hint).runtime_s
    half_slack = (loose.costs.compute_only_s + loose.deadline_s) / 2
    tight = half_the_slack(loose, hint)
    assert tight.deadline_s is not None and runtime <= tight.deadline_s < loose.deadline_s
    assert tight.deadline_s == pytest.approx(max(runtime, half_slack), rel=1e-5)
    assert tight.transfers == loose.transfers
    for _ in range(200):                                            # halving down to the hint's time
        lower = half_the_slack(tight, hint)
        if lower is tight:
            break
        tight = lower
    assert half_the_slack(tight, hint) is tight                     # at the hint's time: no lower
    assert tight.deadline_s == pytest.approx(runtime, rel=1e-5)
    assert half_the_slack(base, hint) is base                       # no deadline: nothing to lower
    cover = cover_bound(tight)
    assert cover.energy_j is not None
    built = build_guided(tight, cover, hint, depth=TUNING.cascade_depth)
    out = solve_model(built.model, "cpsat", BackendOptions(time_limit_s=10, threads=1))
    assert out.values is not None
    found = built.schedule(out.values)
    e = feasible_energy(loose, found)
    assert e is not None and e <= energy * (1 + 1e-9)
    assert simulate_schedule(loose, found).runtime_s <= tight.deadline_s * (1 + 1e-9)


def test_a_sub_problem_that_closes_short_of_the_gap_is_widened() -> None:
    """Gap 0 on 12-node problems whose first sub-problem closes above the cover bound: the
    wider sub-problems follow (deeper cascades; the widest searches to the floor only),
    each is hinted with the schedule so far, and the answer is never worse than the first
    sub-problem's and never below the brute-force-free bound."""
    import poet_compiler.solve.guided as guided_mod

    solves: list[tuple[float | None, bool]] = []

    def recording(model, solver, options):  # noqa: ANN001, ANN202
        out = solve_model(model, solver, options)
        solves.append((out.objective, options.floor_only))
        assert options.full_subsolvers == guided_mod.GUIDED_SUBSOLVERS
        return out

    widened = 0
    for seed in range(10):
        problem = random_problem(seed, 12, "poet", deadline_prob=0.3, budget_fraction=(0.05, 0.2)[seed % 2])
        cover = cover_bound(problem)
        if cover.infeasible:
            continue
        solves.clear()
        out = guided_search(_ctx(problem, dataclasses.replace(STEPS, solve_guided=recording)), problem, cover,
                            None, time_limit_s=20, relative_gap=0.0)
        if len(solves) < 2:
            continue
        widened += 1
        assert [floor for _, floor in solves] == [False] * (len(solves) - 1) + [True], seed
        first = solves[0][0]
        assert out.energy_j is not None and first is not None
        assert out.energy_j <= first * (1 + 1e-9) and out.energy_j >= cover.energy_j * (1 - 1e-9), seed
    assert widened >= 1, "no case widened: the test would not see the widening"


def test_the_presence_models_choice_opens_a_schedule_as_cheap_as_its_own() -> None:
    """The guided sub-problem with only the presence model's choice opened
    (``CoverBound.staged``, no cover restores, no warm start) holds a schedule no dearer
    than the model's own solution realized, wherever that realization is a schedule: the
    choice names the stages its recomputes happen in, and the nodes it pages."""
    checked = with_recomputes = 0
    cases = [random_problem(seed, 7, mode, deadline_prob=0.3, budget_fraction=(0.15, 0.3)[seed % 2])
             for seed in range(10) for mode in ("poet", "remat")]
    cases += [training_problem(seed, 3, "poet", deadline=seed % 2 == 1) for seed in range(8)]
    for problem in cases:
        found = presence_bound(problem, time_limit_s=20)
        own = feasible_energy(problem, found.schedule)
        if own is None:
            continue
        guide = CoverBound(None, False, False, staged=found.choice)
        built = build_fast(problem, restriction=restriction_for(problem, guide, depth=TUNING.cascade_depth))
        out = solve_model(built.model, "cpsat", BackendOptions(time_limit_s=20, threads=1))
        assert out.values is not None
        energy = feasible_energy(problem, built.schedule(out.values))
        assert energy is not None and energy <= own * (1 + 1e-9)
        checked += 1
        with_recomputes += bool(found.choice.recompute)
    assert checked >= 6 and with_recomputes >= 3, (checked, with_recomputes)


def test_a_slow_realization_leaves_the_sub_problem_its_share() -> None:
    """The realization's cover solves stop at one cover solve's effort (cover_limit of the
    share), so a realization that would spend everything still leaves the sub-problem the
    rest (MobileNetV2 a72 50 %: uncapped, the sub-problem never ran)."""
    from poet_compiler import work

    def spends_all(problem, cover, *, until=None, **kw):  # type: ignore[no-untyped-def]
        work.charge(until - work.now())   # a realization that runs to its end and finds nothing
        return None

    limits: list[float] = []

    def recording(model, solver, options):  # type: ignore[no-untyped-def]
        limits.append(options.time_limit_s)
        return solve_model(model, solver, options)

    share = 20.0
    for seed in range(10):
        problem = random_problem(seed, 12, "poet", deadline_prob=0.3, budget_fraction=0.2)
        cover = cover_bound(problem)
        if cover.infeasible or cover.energy_j is None:
            continue
        limits.clear()
        with work.metered(work.Meter()):
            # The realization as a whole (not only its cover solves) spends what it is given.
            steps = dataclasses.replace(STEPS, solve_guided=recording, realize_cover=spends_all)
            guided_search(_ctx(problem, steps), problem, cover, None, time_limit_s=share, relative_gap=0.0)
        assert limits and limits[0] > share - 2 * TUNING.cover_limit(share), seed
        return
    pytest.fail("no seed with a cover bound")
