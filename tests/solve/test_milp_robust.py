"""solve_milp end to end: the auto portfolio, the heuristic fallback, status semantics."""

from __future__ import annotations

import dataclasses

import pytest

import poet_compiler.solve.row_generation as row_generation
from poet_compiler.solve.baselines import HEURISTICS
from poet_compiler.solve.budgets import reference
from poet_compiler.solve.feasibility import working_set
from poet_compiler.solve.guided import GuidedOutcome
from poet_compiler.solve.milp import solve_milp
from poet_compiler.solve.options import SolveOptions
from poet_compiler.solve.pipeline.steps import STEPS
from poet_compiler.solve.tuning import Tuning
from poet_compiler.solvers.base import BackendResult
from poet_compiler.units import format_bytes
from tests.solve.test_milp import _check
from tests.support.graphs import random_problem
from tests.support.oracle import brute_force


@pytest.mark.parametrize("mode", ["poet", "remat", "paging"])
@pytest.mark.parametrize("seed", range(4))
def test_auto_matches_brute_force(seed: int, mode: str) -> None:
    problem = random_problem(seed, 6, mode)
    _check(problem, solve_milp(problem, SolveOptions(solver="auto", time_limit_s=30)), brute_force(problem))


def _no_guided(ctx, problem, cover, warm, **kw) -> GuidedOutcome:  # noqa: ANN001
    return GuidedOutcome(None, None, "off")


def _no_warm_starts(problem, given=None, **kw) -> list:  # noqa: ANN001
    return []


# Without the presence bound (it proves these guided schedules before the full model).
NO_PRESENCE = Tuning(presence_max_pairs=0)


def _timeout_backend(model, solver, options, rehint=None):  # noqa: ANN001
    return BackendResult("timeout", None, None, None, options.time_limit_s, solver, "presolve did not finish")


def test_solver_timeout_falls_back_to_the_heuristic() -> None:
    """No incumbent from the solver (e.g. presolve ran out of time): the best heuristic
    schedule that fits is returned as feasible, never "timeout"."""
    p = random_problem(3, 20, "poet", deadline_prob=0.0)
    problem = dataclasses.replace(p, ram_budget_bytes=reference(p.graph, p.costs).peak_bytes)
    # The mocked solve takes no time; 1 s left none for it under load.
    res = solve_milp(problem, SolveOptions(time_limit_s=5),
                     steps=dataclasses.replace(STEPS, solve_full=_timeout_backend, guided_search=_no_guided))
    # "optimal" when the heuristic meets the eviction-cover bound (still a proof).
    assert res.ok, res.message
    assert res.gap is not None and (res.status == "optimal") == (res.gap == 0)
    assert res.notes.fallback_schedule in HEURISTICS
    assert res.arena_bytes <= problem.activation_budget and res.energy_j is not None
    assert "presolve did not finish" in res.message


@pytest.mark.parametrize("why", ["presolve did not finish", ""])
def test_no_schedule_at_all_is_a_timeout_that_names_the_solver(why: str) -> None:
    """Nothing fits (no heuristic, no guided schedule, the full model none): status
    "timeout", a message naming the solver that ran (not "auto") and its reason, with no
    empty parentheses when the solver gave none."""
    def silent(model, solver, options, rehint=None):  # noqa: ANN001, ANN202
        return BackendResult("timeout", None, None, None, options.time_limit_s, "cpsat", why)

    problem = random_problem(3, 20, "poet", deadline_prob=0.0)
    res = solve_milp(problem, SolveOptions(time_limit_s=5), tuning=NO_PRESENCE,
                     steps=dataclasses.replace(STEPS, solve_full=silent, guided_search=_no_guided,
                                               warm_starts=_no_warm_starts))
    assert res.status == "timeout" and res.schedule is None
    assert res.message.startswith("timeout: cpsat found no schedule within ")
    assert "()" not in res.message and (why in res.message)


def test_no_schedule_says_what_ram_would_fit() -> None:
    """Below checkpoint-all's peak with nothing found, the message gives the RAM range the
    user can act on: checkpoint-all's peak (a schedule), one node's working set (none
    below), the latter also as ``min_ram_lower_bytes``."""
    p = random_problem(3, 20, "remat", deadline_prob=0.0)
    peak = reference(p.graph, p.costs).peak_bytes
    need = working_set(p)[0]
    assert need < peak - 1
    res = solve_milp(dataclasses.replace(p, ram_budget_bytes=(need + peak) // 2), SolveOptions(time_limit_s=5),
                     tuning=NO_PRESENCE,
                     steps=dataclasses.replace(STEPS, solve_full=_timeout_backend, guided_search=_no_guided,
                                               warm_starts=_no_warm_starts))
    assert res.status == "timeout" and res.schedule is None, res.message
    assert f"checkpoint-all fits at {format_bytes(peak)}, nothing below {format_bytes(need)}" in res.message
    assert res.notes.min_ram_lower_bytes == need


def test_tiny_time_limit_still_gives_a_schedule() -> None:
    p = random_problem(5, 30, "poet", deadline_prob=0.0)
    problem = dataclasses.replace(p, ram_budget_bytes=reference(p.graph, p.costs).peak_bytes)
    res = solve_milp(problem, SolveOptions(time_limit_s=0.01, threads=1))
    assert res.ok, res.message
    if res.lower_bound_j is not None:
        assert res.lower_bound_j <= res.energy_j * (1 + 1e-9)


def test_working_set_infeasibility_is_proven_and_cheap() -> None:
    p = random_problem(2, 8, "poet", deadline_prob=0.0)
    problem = dataclasses.replace(p, ram_budget_bytes=working_set(p)[0] - 1)
    res = solve_milp(problem, SolveOptions(time_limit_s=30))
    assert res.status == "infeasible"
    assert "needed" in res.message and (res.notes.min_ram_lower_bytes or 0) >= working_set(p)[0]


def test_arena_that_never_fits_is_timeout_not_infeasible() -> None:
    """Live bytes fit but no layout does (a planner that wastes a lot): not proven
    infeasible, so the status is "timeout" with the arena reason."""
    from tests.support.fragmentation import laid_out, no_room, wasting

    problem = random_problem(0, 6, "poet", deadline_prob=0.0)
    # Compaction lays out any program whose live bytes fit (the schedule is kept) ...
    kept = solve_milp(problem, SolveOptions(time_limit_s=5), steps=laid_out(plan_arena=wasting(10, scale=10)))
    assert kept.ok and kept.notes.arena_rescue is not None and kept.notes.arena_rescue["compacted"] == 1
    # ... unless it finds no room (buffers in flight): then it is a timeout, not infeasible.
    res = solve_milp(problem, SolveOptions(time_limit_s=5),
                     steps=laid_out(plan_arena=wasting(10, scale=10), compact_arena=no_room))
    assert res.status == "timeout", (res.status, res.message)
    assert "arena" in res.message


def _bound_before_full_model(res) -> float:  # noqa: ANN001
    """The better of the cover bound and the presence bound (when that stage ran)."""
    presence = (res.notes.presence or {}).get("bound_j")
    return max(res.notes.cover_bound_j, presence or 0.0)


def test_guided_schedule_keeps_the_cover_bound_when_the_full_model_finds_nothing() -> None:
    """The guided stage did not close the gap and the full model found no schedule: the
    answer is the guided schedule, "feasible", judged against the cover (or presence) bound (the
    solver has none) — not a result without a bound."""
    seen = 0
    for seed in range(12):
        problem = random_problem(seed, 9, "poet", deadline_prob=0.0, budget_fraction=0.2)
        res = solve_milp(problem, SolveOptions(gap_limit=0.0, time_limit_s=20), tuning=NO_PRESENCE,
                         steps=dataclasses.replace(STEPS, solve_full=_timeout_backend))
        if "did not improve" not in str(res.notes.solver_used):
            continue
        assert res.ok, res.message
        assert res.lower_bound_j == pytest.approx(_bound_before_full_model(res))
        assert res.gap is not None and (res.status == "optimal") == (res.gap == 0)
        assert res.arena_bytes <= problem.activation_budget
        seen += res.gap > 0
    assert seen, "no seed reached the full model with an unproven guided schedule"


def test_full_model_not_built_over_its_share_of_the_memory_limit() -> None:
    """With a schedule in hand, a full model whose forecast memory is over
    FULL_MODEL_MEMORY_SHARE of --memory-limit is not built (the limit would only stop it):
    the answer is the guided stage's schedule with the cover (or presence) bound, and the message says
    why. Without a limit the same seeds do build it."""
    from poet_compiler.solvers.memory import memory_limit

    def no_full_model(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("the full model was solved")

    # Large graphs (the full model's memory is checked) without the presence bound (it proves
    # these before the full model).
    tuning = Tuning(small_graph_nodes=0, presence_max_pairs=0)
    options = SolveOptions(gap_limit=0.0, time_limit_s=20, effort="default")
    seen = 0
    for seed in range(12):
        problem = random_problem(seed, 9, "poet", deadline_prob=0.0, budget_fraction=0.2)
        # The default effort: a 20 s limit alone implies 6 deterministic s, which stops
        # before the full model whatever its memory (another reason, another message).
        with memory_limit(row_generation.forecast_bytes(problem)):
            res = solve_milp(problem, options, tuning=tuning,
                             steps=dataclasses.replace(STEPS, solve_full=no_full_model))
        if not res.notes.full_model_skipped:
            continue
        assert res.ok, res.message
        assert res.lower_bound_j == pytest.approx(_bound_before_full_model(res))
        assert "the full model is not built: its forecast memory" in res.message
        assert "--memory-limit" in res.message
        # Not effort: more of it would not build the full model (and no effort_note says so).
        assert res.notes.stopped_by == ("proof" if res.status == "optimal" else "memory"), res.notes.stopped_by
        unlimited = solve_milp(problem, options, tuning=tuning)
        assert not unlimited.notes.full_model_skipped
        assert unlimited.energy_j <= res.energy_j * (1 + 1e-9)
        seen += 1
    assert seen, "no seed reached the full model with an unproven guided schedule"


def test_full_model_skipped_when_too_little_time_is_left() -> None:
    """On a large graph with less than MIN_FULL_SOLVE_S left after the guided stage, the
    full model is not built (it would only overrun the limit): the answer is the guided
    stage's schedule, still judged against the cover (or presence) bound."""
    def no_full_model(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("the full model was solved")

    # Large graphs that never have min_full_solve_s left, without the presence bound (it
    # proves these before the full model).
    tuning = Tuning(small_graph_nodes=0, min_full_solve_s=1e9, presence_max_pairs=0)
    seen = 0
    for seed in range(12):
        problem = random_problem(seed, 9, "poet", deadline_prob=0.0, budget_fraction=0.2)
        res = solve_milp(problem, SolveOptions(gap_limit=0.0, time_limit_s=20), tuning=tuning,
                         steps=dataclasses.replace(STEPS, solve_full=no_full_model))
        if not res.notes.full_model_skipped:
            continue
        assert res.ok, res.message
        assert res.lower_bound_j == pytest.approx(_bound_before_full_model(res))
        assert res.gap is not None and (res.status == "optimal") == (res.gap == 0)
        assert "before the full model" in res.message
        assert res.notes.stopped_by == ("proof" if res.status == "optimal" else "effort"), res.notes.stopped_by
        seen += 1
    assert seen, "no seed reached the full model with an unproven guided schedule"
