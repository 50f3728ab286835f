"""Baselines on training chains: the memory/recompute behaviour each paper promises."""

from __future__ import annotations

import dataclasses
import math

import pytest

from poet_compiler.solve.baselines import BASELINES
from poet_compiler.solve.baselines._common import evaluate
from poet_compiler.solve.baselines.griewank import (
    forward_chain,
    revolve_schedule,
    revolve_table,
)
from poet_compiler.solve.problem import Problem
from tests.support.graphs import (
    cost_table_from_graph,
    forward_backward_chain,
    random_problem,
)

SIZE = 10


def _problem(n_fwd: int, budget: int = 10**9, mode: str = "poet", dma: bool = True) -> Problem:
    g = forward_backward_chain(n_fwd, size=SIZE)
    return Problem(graph=g, costs=cost_table_from_graph(g, dma=dma), ram_budget_bytes=budget, mode=mode)


@pytest.mark.parametrize("n_fwd", [16, 36, 64])
def test_chen_sqrt_n_peak_is_order_sqrt_n(n_fwd: int) -> None:
    p = _problem(n_fwd)
    sqrt_r, all_r = BASELINES["chen_sqrt_n"](p), BASELINES["checkpoint_all"](p)
    assert all_r.peak_ram_bytes >= n_fwd * SIZE                 # keeps every activation
    # ~sqrt(n) boundaries + one sqrt(n) segment + a couple of gradient buffers.
    assert sqrt_r.peak_ram_bytes <= (2 * math.sqrt(n_fwd) + 3) * SIZE
    # Each dropped forward tensor is recomputed once, no more.
    assert 0 < sqrt_r.notes.n_recompute < n_fwd


def test_revolve_table_known_values() -> None:
    cost, _ = revolve_table(16, 16)
    assert cost[16, 0] == 16 * 17 // 2        # no slot: every state recomputed from the start
    assert cost[16, 15] == 16                 # enough slots: a single sweep
    assert all(cost[16, s] >= cost[16, s + 1] for s in range(16))
    # Binomial bound: with s slots and r repetitions one reverses C(s+r, s) steps.
    assert cost[math.comb(2 + 2, 2), 2] <= 2 * math.comb(2 + 2, 2)


@pytest.mark.parametrize("slots", [0, 1, 2, 3, 5])
def test_griewank_recomputations_match_revolve(slots: int) -> None:
    p = _problem(16)
    chain = forward_chain(p.graph)
    cost, split = revolve_table(len(chain), 16)
    fig = evaluate(p, revolve_schedule(p.graph, chain, slots, split))
    base = evaluate(p, BASELINES["checkpoint_all"](p).program)
    # Unit costs: extra energy == extra forward steps == revolve's count minus the sweep.
    assert fig.energy_j - base.energy_j == pytest.approx(cost[16, slots] - 16)
    assert fig.peak_bytes <= (slots + 4) * SIZE


def test_griewank_picks_least_energy_that_fits() -> None:
    tight = BASELINES["griewank"](_problem(16, budget=60))
    loose = BASELINES["griewank"](_problem(16, budget=120))
    assert tight.ok and loose.ok
    assert tight.peak_ram_bytes <= 60 and loose.energy_j < tight.energy_j


def test_chain_only_strategies_refuse_other_graphs() -> None:
    p = random_problem(1, 12, "poet")
    assert forward_chain(p.graph) is None
    for name in ("griewank", "pofo"):
        r = BASELINES[name](p)
        assert r.status == "infeasible" and "unsupported graph" in r.message


def test_pofo_uses_the_mechanisms_the_mode_allows() -> None:
    budget = BASELINES["chen_sqrt_n"](_problem(36)).peak_ram_bytes
    remat = BASELINES["pofo"](_problem(36, budget, "remat"))
    paging = BASELINES["pofo"](_problem(36, budget, "paging"))
    poet = BASELINES["pofo"](_problem(36, budget, "poet"))
    assert remat.ok and paging.ok and poet.ok
    assert remat.n_page_out == 0 and remat.notes.n_recompute > 0
    assert paging.notes.n_recompute == 0 and paging.n_page_out > 0
    # With both, it is never worse than either alone, and at this budget at least as
    # good as Chen's segments (which its DP space contains).
    assert poet.energy_j <= min(remat.energy_j, paging.energy_j) + 1e-9
    assert remat.energy_j <= BASELINES["chen_sqrt_n"](_problem(36, budget, "remat")).energy_j + 1e-9


def test_pofo_mode_none_is_checkpoint_all() -> None:
    p = _problem(12, mode="none")
    assert BASELINES["pofo"](p).energy_j == pytest.approx(BASELINES["checkpoint_all"](p).energy_j)


def test_capuchin_pages_before_recomputing() -> None:
    budget = BASELINES["chen_sqrt_n"](_problem(16)).peak_ram_bytes
    r = BASELINES["capuchin"](_problem(16, budget, "poet"))
    assert r.ok and r.n_page_out > 0 and r.notes.n_recompute == 0
    r = BASELINES["capuchin"](_problem(16, budget, "remat"))
    assert r.ok and r.n_page_out == 0 and r.notes.n_recompute > 0


def test_dtr_emits_a_program_under_the_budget() -> None:
    p = _problem(36, budget=120, mode="remat")
    r = BASELINES["dtr"](p)
    assert r.ok and r.schedule is None and r.peak_ram_bytes <= 120
    assert r.notes.n_recompute > 0
    # More RAM, less recomputation.
    assert BASELINES["dtr"](dataclasses.replace(p, ram_budget_bytes=200)).energy_j < r.energy_j


@pytest.mark.parametrize("name", ["chen_sqrt_n", "chen_greedy", "griewank", "dtr"])
def test_remat_strategies_refuse_modes_without_recomputation(name: str) -> None:
    r = BASELINES[name](_problem(8, budget=50, mode="paging"))
    assert r.status == "infeasible" and "forbids" in r.message
