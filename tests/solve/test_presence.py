"""The presence bound never exceeds the program-level optimum, accepts every real Program,
and proves infeasibility only when the oracle finds no Program either."""

from __future__ import annotations

import dataclasses

import pytest

from poet_compiler.solve.cover import cover_bound
from poet_compiler.solve.presence import image_of, pairs, presence_bound
from poet_compiler.solve.problem import Problem
from tests.support.graphs import random_problem, training_problem
from tests.support.oracle import as_program, brute_force

MODES = ("poet", "remat", "paging")


def _cases(mode: str) -> list[tuple[str, Problem]]:
    out = []
    for seed in range(16):
        out.append((f"dag {seed}", random_problem(seed, 5 if mode == "poet" else 6, mode, deadline_prob=0.5,
                                                  dma=seed % 4 == 3, budget_fraction=(0.0, 0.15, 0.3)[seed % 3])))
    if mode != "paging":
        for seed in range(10):
            out.append((f"training {seed}", training_problem(seed, 3, mode, dma=seed % 3 == 2,
                                                             deadline=seed % 2 == 1)))
    return out


@pytest.mark.parametrize("mode", MODES)
def test_bound_is_below_the_oracle_and_accepts_its_optimal_program(mode: str) -> None:
    """Random DAGs and training-shaped graphs at tight budgets, with and without DMA and
    deadlines. The oracle searches instruction sequences and shares none of the model's
    rules; its optimal Program must be a solution of the model (fixed to it), costing
    no more than its energy."""
    above_cover = tight = 0
    for name, problem in _cases(mode):
        exact = brute_force(problem)
        bound = presence_bound(problem, time_limit_s=20)
        if bound.infeasible:
            assert exact is None, f"{name}: presence says infeasible, the oracle found {exact[0]}"
            continue
        if exact is None:
            continue              # a relaxation may be feasible where no Program is
        assert bound.closed and bound.energy_j is not None, name
        assert bound.energy_j <= exact[0] * (1 + 1e-9) + 1e-12, f"{name}: {bound.energy_j} > {exact[0]}"
        tight += bound.energy_j >= exact[0] * (1 - 1e-6)
        cover = cover_bound(problem)
        assert cover.energy_j is not None
        above_cover += bound.energy_j > cover.energy_j * (1 + 1e-6)
        fixed = presence_bound(problem, time_limit_s=20, hint=as_program(problem, exact[1]), fix_to_hint=True)
        assert not fixed.infeasible and fixed.energy_j is not None, f"{name}: the optimal Program is cut off"
        assert fixed.energy_j <= exact[0] * (1 + 1e-9) + 1e-12, name
    assert tight >= 5, "too few cases where the bound meets the optimum: the test would not catch a weak bound"
    if mode != "paging":
        assert above_cover >= 1, "the bound never beats the cover here: the test says nothing about its rows"


def test_a_heuristic_schedule_is_a_solution_of_the_model() -> None:
    """Not only optimal Programs: every schedule a device can run is in the relaxation,
    here the heuristics' at budgets from checkpoint-all's peak down to half of it."""
    import dataclasses

    from poet_compiler.solve.baselines import BASELINES
    from poet_compiler.solve.budgets import reference

    checked = 0
    for seed in range(4):
        base = training_problem(seed, 6, "poet", deadline=False)
        peak = reference(base.graph, base.costs).peak_bytes
        for fraction in (1.0, 0.7, 0.5):
            problem = dataclasses.replace(base, ram_budget_bytes=int(peak * fraction))
            for name in ("checkpoint_all", "chen_greedy", "capuchin"):
                res = BASELINES[name](problem)
                if not res.ok or res.program is None:
                    continue
                fixed = presence_bound(problem, time_limit_s=20, hint=res.program, fix_to_hint=True)
                assert not fixed.infeasible and fixed.energy_j is not None, f"{name} seed {seed} at {fraction}"
                assert fixed.energy_j <= (res.energy_j or 0.0) * (1 + 1e-9) + 1e-12
                checked += 1
    assert checked >= 12


def test_image_of_reads_what_is_in_ram_at_each_point() -> None:
    """A chain a -> b -> c whose a is freed after b and recomputed for c's sake."""
    from poet_compiler.schedule.program import Instruction, Op, Program

    problem = training_problem(0, 3, "remat")
    n = problem.n
    g = problem.graph
    # Checkpoint-all, as a Program: compute everything in order, free after last use.
    last = {k: max(g.consumers[k], default=k) for k in range(n)}
    ins = []
    for k in range(n):
        ins.append(Instruction(Op.COMPUTE, k))
        ins += [Instruction(Op.FREE, j) for j in range(k + 1) if last[j] == k]
    image = image_of(problem, Program(n_nodes=n, instructions=tuple(ins)))
    assert not image["wr"] and not image["wp"] and not image["out"]
    for (j, t), present in image["p"].items():
        assert present == int(j <= t <= last[j]), (j, t)


def test_size_is_known_before_building() -> None:
    problem = training_problem(1, 4, "poet")
    n = problem.n
    assert n <= pairs(problem) <= n * (n + 1) // 2


def test_the_solve_is_proven_by_the_presence_bound_where_the_cover_is_loose() -> None:
    """Where the cover bound is below the optimum, solve_milp (with no full model to fall
    back on) still ends "optimal", at the oracle's optimum, with the presence bound."""
    from poet_compiler.solve.milp import solve_milp
    from poet_compiler.solve.options import SolveOptions
    from poet_compiler.solve.pipeline.steps import STEPS

    def no_full_model(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("the full model was solved")

    proven = 0
    for seed, mode in [(seed, mode) for seed in range(20) for mode in ("poet", "remat")]:
        problem = random_problem(seed, 7, mode, deadline_prob=0.3, budget_fraction=0.15)
        exact = brute_force(problem)
        cover = cover_bound(problem)
        if exact is None or cover.energy_j is None or cover.energy_j >= exact[0] * (1 - 1e-6):
            continue
        res = solve_milp(problem, SolveOptions(time_limit_s=20),
                         steps=dataclasses.replace(STEPS, solve_full=no_full_model))
        assert res.ok and res.energy_j is not None
        assert res.energy_j >= exact[0] * (1 - 1e-9)
        if res.status == "optimal":
            assert res.energy_j == pytest.approx(exact[0], rel=1e-9)
            assert res.notes.presence["bound_j"] > cover.energy_j
            proven += 1
    assert proven >= 1, "no seed where the cover is loose and the presence bound proves the optimum"


