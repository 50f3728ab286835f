"""The eviction-cover bound never exceeds the true optimum, and proves infeasibility only when it is."""

from __future__ import annotations

import pytest

from poet_compiler.graph.ir import Node, NodeCost, TrainingGraph
from poet_compiler.graph.validate import validate
from poet_compiler.solve.cover import absence_literals, cover_bound, deeper_cover
from poet_compiler.solve.problem import Problem
from poet_compiler.solve.tuning import TUNING, Tuning
from tests.support.graphs import (
    cost_table_from_graph,
    forward_backward_chain,
    random_problem,
)
from tests.support.oracle import brute_force

MODES = ("poet", "remat", "paging", "none")
# Where the budget lies between the working-set floor (0) and checkpoint-all's peak (1):
# tight, so that the bound has something to say.
FRACTIONS = (0.0, 0.15, 0.3)


@pytest.mark.parametrize("mode", MODES)
def test_bound_is_below_the_brute_force_optimum(mode: str) -> None:
    """Random DAGs at tight budgets, half with a deadline."""
    above = 0
    for seed in range(24):
        problem = random_problem(seed, 5 if mode == "poet" else 6, mode, deadline_prob=0.5,
                                 budget_fraction=FRACTIONS[seed % 3])
        exact = brute_force(problem)
        cover = cover_bound(problem)
        if cover.infeasible:
            assert exact is None, f"seed {seed}: cover says infeasible, brute force found {exact[0]}"
            continue
        assert cover.energy_j is not None and cover.closed
        base = problem.costs.compute_only_j
        assert cover.energy_j >= base * (1 - 1e-9)
        if exact is not None:
            assert cover.energy_j <= exact[0] * (1 + 1e-9) + 1e-12, f"seed {seed}"
            above += cover.energy_j > base * (1 + 1e-6)
    if mode in ("poet", "remat"):   # tiny paging-only problems are either loose or infeasible
        assert above >= 1, "too few cases where the bound says anything: the test would not catch a bad bound"


def test_bound_is_tight_when_one_cheap_eviction_suffices() -> None:
    """A chain whose checkpoint-all peak is one tensor above the budget: the bound is the
    compute-once energy plus the cheapest restore of a tensor that is live across the peak."""
    graph = forward_backward_chain(4)
    costs = cost_table_from_graph(graph)
    from poet_compiler.solve.budgets import reference

    peak = reference(graph, costs).peak_bytes
    loose = cover_bound(Problem(graph=graph, costs=costs, ram_budget_bytes=peak))
    assert loose.energy_j == pytest.approx(costs.compute_only_j) and loose.restores == ()
    tight = cover_bound(Problem(graph=graph, costs=costs, ram_budget_bytes=peak - 1))
    assert tight.infeasible or tight.energy_j > costs.compute_only_j
    if not tight.infeasible:
        exact = brute_force(Problem(graph=graph, costs=costs, ram_budget_bytes=peak - 1))
        assert exact is None or tight.energy_j <= exact[0] * (1 + 1e-9)
        assert tight.restores, "an energy above compute-once comes from chosen restores"


@pytest.mark.parametrize("mode", ["poet", "remat", "paging"])
def test_bound_is_below_the_milp_optimum_on_larger_graphs(mode: str) -> None:
    """12-node random DAGs, beyond brute force: the fast formulation solved to a closed gap
    on CP-SAT *without* the cover as its floor is the reference."""
    from poet_compiler.solve.formulation import build
    from poet_compiler.solvers import BackendOptions, solve_model

    checked = 0
    for seed in range(10):
        problem = random_problem(seed, 12, mode, deadline_prob=0.5, budget_fraction=(0.05, 0.2, 0.4)[seed % 3])
        cover = cover_bound(problem)
        built = build(problem, "fast")
        out = solve_model(built.model, "cpsat", BackendOptions(time_limit_s=60, threads=2))
        if out.status == "infeasible":
            continue            # the cover need not see every infeasibility (only claim none falsely)
        assert out.status == "optimal", out.message
        assert not cover.infeasible, f"seed {seed}: cover says infeasible, the MILP found {out.objective}"
        assert cover.energy_j <= out.objective * (1 + 1e-7) + 1e-12, f"seed {seed}"
        checked += cover.energy_j > problem.costs.compute_only_j * (1 + 1e-6)
    if mode != "paging":
        assert checked >= 1


@pytest.mark.parametrize("mode", MODES)
def test_min_budget_is_below_the_brute_force_minimum(mode: str) -> None:
    """No schedule fits a budget below the cover's smallest budget (brute force), so
    a problem whose budget brute force meets is never above it."""
    import dataclasses

    from poet_compiler.solve.cover import cover_min_budget

    for seed in range(12):
        problem = random_problem(seed, 5, mode, deadline_prob=0.7, budget_fraction=FRACTIONS[seed % 3])
        lower = cover_min_budget(problem, time_limit_s=TUNING.cover_limit_s)
        assert lower is not None
        fixed = problem.ram_budget_bytes - problem.activation_budget
        exact = brute_force(problem)
        if exact is not None:
            assert lower <= problem.activation_budget, f"seed {seed}"
        below = dataclasses.replace(problem, ram_budget_bytes=lower + fixed - 1)
        assert brute_force(below) is None, f"seed {seed}: a schedule fits below the cover's minimum"


@pytest.mark.parametrize("dma", [False, True])
def test_min_time_is_below_the_brute_force_minimum(dma: bool) -> None:
    """No schedule within the budget runs faster than the cover's minimum time; a budget
    the cover cannot meet at any deadline has no schedule at all."""
    import dataclasses

    from poet_compiler.solve.cover import cover_min_time

    for seed in range(12):
        problem = random_problem(seed, 5, "poet", deadline_prob=0.0, dma=dma, budget_fraction=FRACTIONS[seed % 3])
        found = cover_min_time(problem, time_limit_s=TUNING.cover_limit_s)
        if found is None:
            assert brute_force(problem) is None, f"seed {seed}"
            continue
        seconds = found[0]
        assert seconds >= problem.costs.compute_only_s * (1 - 1e-12)
        faster = dataclasses.replace(problem, deadline_s=seconds * (1 - 1e-6))
        if seconds > problem.costs.compute_only_s * (1 + 1e-6):
            assert brute_force(faster) is None, f"seed {seed}: a schedule beats the cover's minimum time"


@pytest.mark.parametrize("mode", ["poet", "remat"])
def test_both_models_are_below_the_optimum_and_the_bound_is_the_better(mode: str) -> None:
    """The light model (no per-point absences) and the refined one are each a relaxation:
    each is below the brute-force optimum, and cover_bound gives the larger."""
    import poet_compiler.solve.cover as cover_mod

    for seed in range(24):
        problem = random_problem(seed, 5 if mode == "poet" else 6, mode, deadline_prob=0.5,
                                 budget_fraction=FRACTIONS[seed % 3])
        exact = brute_force(problem)
        both = cover_bound(problem)
        if exact is None or both.infeasible:
            continue
        light = cover_mod._solve_cover(problem, None, 10.0, closure=False, absences=False)
        refined = cover_mod._solve_cover(problem, None, 10.0, closure=False, absences=True)
        for name, one in (("light", light), ("refined", refined)):
            assert one.energy_j is not None and one.energy_j <= exact[0] * (1 + 1e-9) + 1e-12, (seed, name)
        assert both.energy_j == max(light.energy_j, refined.energy_j), seed  # type: ignore[type-var]


def test_the_refined_model_where_it_is_tighter_and_the_light_one_where_it_does_not_fit() -> None:
    """The layered DAG of 100 nodes at 80 % (remat): the refined model's bound is above the
    light one's, both below a real schedule's energy (belady's), and the bound is the
    refined one; with its forecast build over the time, the light one alone."""
    import poet_compiler.solve.cover as cover_mod
    from poet_compiler.devices.cost_model import costs_for
    from poet_compiler.solve.baselines import BASELINES
    from poet_compiler.solve.budgets import reference, resolve_ram
    from tests.support.layered import layered_graph

    graph = layered_graph(100)
    costs = costs_for(graph, None)
    problem = Problem(graph, costs, resolve_ram("80%", reference(graph, costs), costs), mode="remat")
    schedule = BASELINES["belady"](problem)
    assert schedule.ok and schedule.energy_j is not None
    from poet_compiler import work

    with work.metered(work.Meter()):     # limits in deterministic seconds: not the machine's load
        light = cover_mod._solve_cover(problem, None, 10.0, closure=False, absences=False)
        both = cover_bound(problem, time_limit_s=60.0)
    assert light.energy_j is not None and both.energy_j is not None
    assert light.energy_j < both.energy_j <= schedule.energy_j
    assert both.restores and cover_mod.absence_literals(problem) > 0
    assert cover_bound(problem, tuning=Tuning(absence_literal_s=1e9)).energy_j == light.energy_j


@pytest.mark.parametrize("mode", ["poet", "remat"])
def test_the_refined_model_on_two_workers_is_a_relaxation_with_the_same_optimum(mode: str) -> None:
    """On two workers (CP-SAT's interleaved search) the refined model stays below the
    brute-force optimum and, where both searches close, proves the same bound as one worker."""
    import poet_compiler.solve.cover as cover_mod

    for seed in range(12):
        problem = random_problem(seed, 5 if mode == "poet" else 6, mode, deadline_prob=0.5,
                                 budget_fraction=FRACTIONS[seed % 3])
        exact = brute_force(problem)
        one = cover_mod._solve_cover(problem, None, 10.0, closure=False, absences=True)
        two = cover_mod._solve_cover(problem, None, 10.0, closure=False, absences=True, workers=2)
        assert one.infeasible == two.infeasible, seed
        if two.infeasible:
            assert exact is None, seed
            continue
        assert one.closed and two.closed and two.energy_j == pytest.approx(one.energy_j, rel=1e-12), seed
        if exact is not None:
            assert two.energy_j is not None and two.energy_j <= exact[0] * (1 + 1e-9) + 1e-12, seed


def test_two_workers_close_the_dag_and_give_the_same_answer_twice() -> None:
    """The layered DAG of 100 nodes at 80 % on two workers: the refined model's optimum
    (the one worker's), and the same restores on a second run (the interleaved search
    does not depend on thread timing)."""
    from poet_compiler.devices.cost_model import costs_for
    from poet_compiler.solve.budgets import reference, resolve_ram
    from tests.support.layered import layered_graph

    graph = layered_graph(100)
    costs = costs_for(graph, None)
    problem = Problem(graph, costs, resolve_ram("80%", reference(graph, costs), costs), mode="remat")
    from poet_compiler import work

    with work.metered(work.Meter()):     # limits in deterministic seconds: not the machine's load
        one = cover_bound(problem, time_limit_s=30.0)
        first = cover_bound(problem, time_limit_s=30.0, workers=2)
        second = cover_bound(problem, time_limit_s=30.0, workers=2)
    assert one.closed and first.closed and first.energy_j == pytest.approx(one.energy_j, rel=1e-12)
    assert (first.energy_j, first.restores) == (second.energy_j, second.restores)



def _node(i: int, inputs: tuple[int, ...], size: int, name: str, kind: str = "forward", *,
          page_in_j: float = 10.0, page_out_j: float = 10.0, pinned: bool = False) -> Node:
    """A node whose compute costs 1 J and whose transfers cost 10 J unless given."""
    return Node(id=i, name=name, kind=kind, op="test.op", op_class="other", inputs=inputs, output_bytes=size,
                pinned=pinned, cost=NodeCost(compute_s=1.0, compute_j=1.0, page_in_s=0.5, page_in_j=page_in_j,
                                             page_out_s=0.5, page_out_j=page_out_j))


def _tight(graph: TrainingGraph) -> Problem:
    """``graph`` at one byte below its checkpoint-all peak."""
    from poet_compiler.solve.budgets import reference

    costs = cost_table_from_graph(graph)
    return Problem(graph=graph, costs=costs, ram_budget_bytes=reference(graph, costs).peak_bytes - 1)


def test_a_dead_input_paged_back_pays_for_its_page_out() -> None:
    """x (pinned) -> bn -> relu -> fc -> loss, backward g_relu(relu, loss), g_bn(x, g_relu):
    bn's output is read by relu alone (dead once relu is computed), relu's is saved for
    g_relu, and fc's (20 B) makes the peak, where relu's 10 B must be out of RAM.
    Bringing relu back means recomputing it, which needs bn's output: recompute bn too
    (1 J) or page it in (0.1 J), which needs a page-out of it (5 J). The optimum (the
    program-level oracle) is compute-once + 2 J, and the bound is that: it charges bn's
    page-in with its page-out. Charged the page-in alone, the bound was compute-once + 1.1 J."""
    problem = _tight(validate(TrainingGraph(name="bn_relu", nodes=(
        _node(0, (), 10, "x", pinned=True), _node(1, (0,), 10, "bn", page_in_j=0.1, page_out_j=5.0),
        _node(2, (1,), 10, "relu"), _node(3, (2,), 20, "fc"), _node(4, (3,), 2, "loss", "loss"),
        _node(5, (2, 4), 10, "g_relu", "backward"), _node(6, (0, 5), 10, "g_bn", "backward")))))
    exact = brute_force(problem)
    assert exact is not None and exact[0] == pytest.approx(problem.costs.compute_only_j + 2.0)
    cover = cover_bound(problem)
    assert cover.closed and cover.energy_j == pytest.approx(exact[0])


def test_a_dead_input_of_a_dead_input_is_charged() -> None:
    """A residual block's tail: x (pinned) -> bn -> add(bn, x) -> relu -> fc -> loss, with
    relu saved for the backward. bn and add are dead once relu is computed; relu must be
    out across fc and loss. Recomputing relu needs add, whose recompute needs bn: 3 J at
    the least (the oracle's optimum). The deep cover follows the chain of dead inputs and
    proves that optimum; the cover (one level, whose restores guide the schedules) proves
    compute-once + 2 J."""
    problem = _tight(validate(TrainingGraph(name="bn_add_relu", nodes=(
        _node(0, (), 10, "x", pinned=True), _node(1, (0,), 10, "bn"), _node(2, (0, 1), 10, "add"),
        _node(3, (2,), 10, "relu"), _node(4, (3,), 30, "fc"), _node(5, (4,), 2, "loss", "loss"),
        _node(6, (3, 5), 10, "g_relu", "backward"), _node(7, (0, 6), 10, "g_x", "backward")))))
    exact = brute_force(problem)
    assert exact is not None and exact[0] == pytest.approx(problem.costs.compute_only_j + 3.0)
    cover = cover_bound(problem)
    assert cover.closed and cover.energy_j == pytest.approx(problem.costs.compute_only_j + 2.0)
    deep = deeper_cover(problem, cover, time_limit_s=10.0)
    assert deep.closed and deep.energy_j == pytest.approx(exact[0])
    assert deep.restores == cover.restores


@pytest.mark.parametrize("mode", ["poet", "remat"])
def test_the_deep_cover_is_below_the_optimum(mode: str) -> None:
    """Random DAGs (some with chains of dead inputs): the deep cover's bound is at least
    the cover's and never above the brute-force optimum."""
    chains = 0
    for seed in range(24):
        problem = random_problem(seed, 6, mode, deadline_prob=0.5,
                                 budget_fraction=FRACTIONS[seed % 3])
        cover = cover_bound(problem)
        if cover.infeasible:
            continue
        chains += absence_literals(problem, TUNING.dead_depth) > absence_literals(problem)   # a dead input's dead input
        deep = deeper_cover(problem, cover, time_limit_s=10.0)
        assert deep.energy_j is not None and cover.energy_j is not None and deep.energy_j >= cover.energy_j
        exact = brute_force(problem)
        if exact is not None:
            assert deep.energy_j <= exact[0] * (1 + 1e-9) + 1e-12, seed
    assert chains, "no graph with a chain of dead inputs: the test would not reach the deep model"
