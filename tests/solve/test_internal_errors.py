"""A bug is not an outcome: a plan poetc built that breaks a rule of the execution model
raises InternalError (exit 1 with a hint to report it), never "infeasible", "no heuristic"
or a skipped candidate; a plan that only misses the budget stays an outcome."""

from __future__ import annotations

import dataclasses

import pytest

from poet_compiler.cli import main
from poet_compiler.errors import InternalError, OverBudgetError, PoetError, ScheduleError
from poet_compiler.schedule.linearize import linearize
from poet_compiler.schedule.program import Op, Program
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.schedule.simulate import simulate
from poet_compiler.solve import guided, warm_start
from poet_compiler.solve.baselines._common import Figures, Trial
from poet_compiler.solve.cover import cover_bound
from poet_compiler.solve.finalize import finalize
from tests.support.graphs import random_problem


def _problem():
    return random_problem(0, 6, "poet", deadline_prob=0.0)


def _broken_program(problem) -> Program:
    """Checkpoint-all's program without its first COMPUTE: a reader finds no input."""
    program = linearize(problem.graph, Schedule.checkpoint_all(problem.n), dma=problem.costs.dma)
    first = next(k for k, ins in enumerate(program.instructions) if ins.op is Op.COMPUTE)
    return dataclasses.replace(program, instructions=program.instructions[:first] + program.instructions[first + 1:])


def _broken_schedule(problem) -> Schedule:
    """Node 0 is never computed, yet node 1 reads it."""
    s = Schedule.checkpoint_all(problem.n)
    s.R[0, 0] = False
    return s


def test_internal_error_is_not_a_user_error() -> None:
    assert not issubclass(InternalError, PoetError)
    assert issubclass(OverBudgetError, ScheduleError)


def test_cli_reports_an_internal_error_with_exit_1(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    import poet_compiler.cli as cli

    def buggy(**kwargs):  # noqa: ANN003
        raise InternalError("optimal: the plan breaks a rule of the execution model: node 3 is not in RAM")

    monkeypatch.setattr(cli, "app", buggy)
    assert main(["compile", "x.json", "--device", "m4", "--ram", "1M"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("internal error: optimal: the plan breaks a rule of the execution model: "
                             "node 3 is not in RAM (a bug in poetc")
    assert "report" in err[0] and "--debug" in err[0]


def test_over_budget_is_an_outcome_not_a_bug() -> None:
    problem = _problem()
    program = linearize(problem.graph, Schedule.checkpoint_all(problem.n), dma=problem.costs.dma)
    with pytest.raises(OverBudgetError):
        simulate(problem.graph, problem.costs, program, ram_budget_bytes=1)
    res = finalize(dataclasses.replace(problem, ram_budget_bytes=1), program, strategy="test")
    assert res.status == "infeasible" and "exceed the activation budget" in res.message


def test_finalize_raises_on_a_broken_plan() -> None:
    problem = _problem()
    with pytest.raises(InternalError, match=r"^test: the plan breaks a rule .*not in RAM"):
        finalize(problem, _broken_program(problem), strategy="test")
    with pytest.raises(InternalError, match=r"R\[t,t\] must be 1"):
        finalize(problem, _broken_schedule(problem), strategy="test")


def test_heuristic_finish_does_not_turn_a_bug_into_infeasible() -> None:
    problem = _problem()
    fits = Figures(peak_bytes=0, runtime_s=0.0, energy_j=0.0)
    with pytest.raises(InternalError):
        Trial(problem, "test").finish(_broken_program(problem), fig=fits)


def test_milp_fallback_does_not_skip_a_broken_candidate() -> None:
    from poet_compiler import work
    from poet_compiler.solve.options import SolveOptions
    from poet_compiler.solve.pipeline.context import Context
    from poet_compiler.solve.pipeline.incumbents import fallback
    from poet_compiler.solve.pipeline.steps import STEPS
    from poet_compiler.solve.warm_start import Candidate

    problem = _problem()
    candidates = (Candidate(0.0, "broken", _broken_schedule(problem)),
                  Candidate(1.0, "checkpoint_all", Schedule.checkpoint_all(problem.n)))
    with work.metered(work.Meter()), pytest.raises(InternalError, match=r"R\[t,t\] must be 1"):
        fallback(Context.start(problem, SolveOptions(), steps=STEPS), candidates, needed=True, finalize_s=0.0)


def test_cover_realization_bug_is_not_no_schedule() -> None:
    problem = _problem()
    choice = cover_bound(problem, time_limit_s=5.0)
    assert choice.energy_j is not None
    # A bug in the realization itself, which no input produces: it must raise, not find nothing.
    with pytest.raises(InternalError, match="cover realization"):
        guided.realize_within(problem, choice, lambda budget: None, realization=lambda p, c: _broken_schedule(p))


def test_warm_start_heuristic_bug_is_not_no_heuristic(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = _problem()

    def buggy(p):  # noqa: ANN001
        raise ScheduleError("instruction 4 (COMPUTE 2 'n2'): input 0 'n0' is not in RAM")

    monkeypatch.setitem(warm_start.BASELINES, "chen_greedy", buggy)
    with pytest.raises(InternalError, match="^chen_greedy: instruction 4"):
        warm_start.warm_start_candidates(problem)

    def not_applicable(p):  # noqa: ANN001
        raise PoetError("chains only")

    monkeypatch.setitem(warm_start.BASELINES, "chen_greedy", not_applicable)
    names = [name for _, name, _ in warm_start.warm_start_candidates(problem)]
    assert "chen_greedy" not in names and "capuchin" in names  # skipped, the others still run
