"""Infeasible budgets: the minimum RAM and deadline are computed and tight."""

from __future__ import annotations

import dataclasses
import re

import pytest

from poet_compiler.errors import InfeasibleError
from poet_compiler.solve.feasibility import deadline_requirement, ram_requirement, working_set
from poet_compiler.solve.milp import solve_milp
from poet_compiler.solve.options import SolveOptions
from poet_compiler.solve.tuning import TUNING
from poet_compiler.units import format_bytes
from tests.support.graphs import random_problem, training_problem
from tests.support.oracle import brute_force


def min_ram(problem) -> int:  # noqa: ANN001
    """The smallest RAM, which the analysis must prove."""
    req = ram_requirement(problem)
    assert req.exact, req
    return int(req.lower)


@pytest.mark.parametrize("mode", ["poet", "remat", "paging", "none"])
@pytest.mark.parametrize("seed", [1, 4])
def test_min_ram_is_tight(seed: int, mode: str) -> None:
    problem = random_problem(seed, 6, mode, deadline_prob=0.5)
    r = min_ram(problem)
    assert r >= working_set(problem)[0]
    at = dataclasses.replace(problem, ram_budget_bytes=r)
    below = dataclasses.replace(problem, ram_budget_bytes=r - 1)
    assert brute_force(at) is not None
    assert brute_force(below) is None
    res = solve_milp(below)
    assert res.status == "infeasible"
    assert res.notes.min_ram_bytes == r
    assert "RAM" in res.message and "needed" in res.message
    assert solve_milp(at).energy_j is not None


def test_message_names_the_largest_working_set() -> None:
    problem = random_problem(3, 6, "poet", deadline_prob=0.0)
    need, k = working_set(problem)
    res = solve_milp(dataclasses.replace(problem, ram_budget_bytes=need - 1))
    assert res.status == "infeasible"
    assert f"largest single node: {problem.graph.nodes[k].name!r} alone needs" in res.message


@pytest.mark.parametrize("dma", [False, True])
@pytest.mark.parametrize("seed", [2, 7])
def test_min_deadline_is_tight(seed: int, dma: bool) -> None:
    problem = random_problem(seed, 6, "paging", deadline_prob=0.0, dma=dma)
    req = deadline_requirement(problem)
    if req is None:
        assert brute_force(problem) is None
        return
    assert req.exact and req.upper is not None, req
    d = req.upper
    assert d >= problem.costs.compute_only_s * (1 - 1e-12)
    assert brute_force(dataclasses.replace(problem, deadline_s=d)) is not None
    if d > problem.costs.compute_only_s * (1 + 1e-6):
        assert brute_force(dataclasses.replace(problem, deadline_s=d * (1 - 1e-6))) is None


def test_deadline_below_compute_only() -> None:
    problem = random_problem(0, 6, "poet", deadline_prob=0.0)
    short = dataclasses.replace(problem, deadline_s=problem.costs.compute_only_s * 0.9)
    res = solve_milp(short)
    assert res.status == "infeasible"
    assert "compute-only minimum" in res.message
    req = deadline_requirement(problem)
    assert req is not None and req.exact and res.notes.min_deadline_s == pytest.approx(req.upper)
    with pytest.raises(InfeasibleError):
        ram_requirement(short)


def test_below_a_working_set_a_large_graph_is_refused_without_any_model(monkeypatch) -> None:
    """Cheap proofs first: one node's working set above the budget decides it, before any
    formulation, cover or solver is built."""
    import poet_compiler.solve.feasibility as feas
    from poet_compiler.solve.pipeline.steps import STEPS

    def no_model(*args, **kwargs):  # noqa: ANN002, ANN003
        raise AssertionError("a model was built for a budget that one node already rules out")

    # The infeasibility analysis's models (its own module's names: it takes no Steps, being
    # called with the problem alone), and every stage's.
    for name in ("build_fast", "cover_min_budget", "cover_bound"):
        monkeypatch.setattr(feas, name, no_model)
    steps = dataclasses.replace(STEPS, cover_bound=no_model, guided_search=no_model, solve_by_rows=no_model,
                                solve_full=no_model, solve_guided=no_model)
    problem = random_problem(3, TUNING.small_graph_nodes + 20, "poet")
    ws, node = feas.working_set(problem)
    tight = dataclasses.replace(problem, ram_budget_bytes=ws - 1)
    res = solve_milp(tight, SolveOptions(time_limit_s=30), steps=steps)
    assert res.status == "infeasible"
    assert f"at least {format_bytes(ws)}" in res.message and problem.graph.nodes[node].name in res.message


def test_the_analysis_follows_the_callers_tuning() -> None:
    """Whether a graph is small (and so gets its exact least RAM below a working set) is the
    caller's Tuning's to say, through solve_milp too, not the module-wide TUNING's."""
    from poet_compiler.solve.tuning import Tuning

    problem = random_problem(3, 12, "poet")
    ws, _ = working_set(problem)
    tight = dataclasses.replace(problem, ram_budget_bytes=ws - 1)
    small = solve_milp(tight, SolveOptions(time_limit_s=30))
    large = solve_milp(tight, SolveOptions(time_limit_s=30), tuning=Tuning(small_graph_nodes=4))
    assert small.status == large.status == "infeasible"
    assert small.notes.min_ram_bytes is not None and small.notes.min_ram_bytes >= ws
    assert large.notes.min_ram_bytes is None and large.notes.min_ram_lower_bytes == ws + tight.fixed.total
    assert f"at least {format_bytes(ws)}" in large.message


def test_the_deadline_side_note_of_a_ram_that_is_too_small_builds_no_model(monkeypatch) -> None:
    """When the RAM is the reason, the smallest deadline at that RAM is a side note: its
    range comes from the cover (a model's solve took 25 s of wall on VGG16-CIFAR and
    gave the range the cover gave)."""
    import poet_compiler.solve.feasibility as feas

    problem = training_problem(0, 5, "poet")
    problem = dataclasses.replace(problem, deadline_s=problem.costs.compute_only_s)
    need = min_ram(problem)
    assert need > working_set(problem)[0]      # the RAM, not one node, is the reason
    built: list[str] = []
    real = feas.build_fast

    def counted(problem, objective="energy", **kw):  # noqa: ANN001, ANN003, ANN202
        built.append(objective)
        return real(problem, objective=objective, **kw)

    # Counts the analysis's model builds (it takes no Steps: the problem alone).
    monkeypatch.setattr(feas, "build_fast", counted)
    short = dataclasses.replace(problem, ram_budget_bytes=need - 1)
    why = feas.explain_infeasible(short)
    assert why.message.startswith(f"infeasible: RAM {format_bytes(need - 1)} < {format_bytes(need)} needed")
    assert "at this RAM a deadline of" in why.message
    assert "time" not in built
    # The range is real: a schedule meets its upper end at that RAM, none its lower end's undercut.
    upper = float(re.search(r"a deadline of ([0-9.e+-]+) s works", why.message).group(1))  # type: ignore[union-attr]
    lower = why.notes.min_deadline_lower_s
    assert lower is not None and upper >= lower * (1 - 1e-6)
    assert brute_force(dataclasses.replace(short, deadline_s=upper * (1 + 1e-5))) is not None
