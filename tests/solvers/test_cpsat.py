"""CP-SAT's search settings by model size (the deterministic, interleaved search)."""

from __future__ import annotations

import pytest

from poet_compiler.solve.tuning import TUNING
from poet_compiler.solvers import BackendOptions, solve_model
from poet_compiler.solvers.cpsat import solve_cpsat_here
from poet_compiler.solvers.model import LinearModel


def _pairs_model(n_binaries: int) -> LinearModel:
    """Minimize the binaries' weighted sum with at least one of each pair set: optimum
    is the cheaper of each pair, easy whatever the size."""
    m = LinearModel()
    xs = [m.var(f"x{i}") for i in range(n_binaries)]
    for a, b in zip(xs[::2], xs[1::2], strict=True):
        m.ge({a: 1.0, b: 1.0}, 1.0)
    m.objective = {x: 1.0 + (i % 2) for i, x in enumerate(xs)}
    return m


@pytest.mark.parametrize(("n", "large", "batch"), [(20, False, 0), (TUNING.large_model_binaries + 2, True, 2)])
def test_a_large_model_synchronizes_its_interleaved_search_per_worker(n: int, large: bool, batch: int) -> None:
    seen = {}
    res = solve_cpsat_here(_pairs_model(n), BackendOptions(time_limit_s=20.0, threads=2, large=large),
                           on_solver=lambda s: seen.update(batch=s.parameters.interleave_batch_size,  # type: ignore[attr-defined]
                                                           interleave=s.parameters.interleave_search))  # type: ignore[attr-defined]
    assert seen == {"batch": batch, "interleave": True}
    assert res.status == "optimal"
    assert res.objective == pytest.approx(n / 2)


@pytest.mark.parametrize("n", [20, TUNING.large_model_binaries + 2])
def test_named_full_subsolvers_replace_the_portfolio_and_still_prove(n: int) -> None:
    """``full_subsolvers`` keeps only the named full-problem subsolvers (the LNS workers run
    beside them); max_lp alone still closes the gap, small or large."""
    seen = {}
    res = solve_cpsat_here(_pairs_model(n), BackendOptions(time_limit_s=20.0, threads=2, large=n > 20,
                                                           full_subsolvers=("max_lp",)),
                           on_solver=lambda s: seen.update(subsolvers=list(s.parameters.subsolvers)))  # type: ignore[attr-defined]
    assert seen == {"subsolvers": ["max_lp"]}
    assert res.status == "optimal"
    assert res.objective == pytest.approx(n / 2)


def test_a_wall_allowance_spent_on_building_the_model_leaves_no_search() -> None:
    """The wall allowance counts from the call, the build included: once the build has
    used it up, the call returns without a search (a 250-node DAG's guided sub-problem
    once took 1.7 s to build of a 1.0 s allowance and ended a compile 1.5 s past its
    --time-limit), and what is left of it is CP-SAT's own wall limit."""
    model = _pairs_model(4 * TUNING.large_model_binaries)
    spent = solve_cpsat_here(model, BackendOptions(time_limit_s=0.0, threads=2, large=True),
                             on_solver=lambda s: pytest.fail("no search once the allowance is spent"))
    assert spent.status == "timeout" and spent.values is None
    assert spent.message == "no time left to search after building the model"
    seen = {}
    res = solve_cpsat_here(model, BackendOptions(time_limit_s=60.0, threads=2, large=True),
                           on_solver=lambda s: seen.update(wall=s.parameters.max_time_in_seconds))  # type: ignore[attr-defined]
    assert res.status == "optimal"
    assert 0 < seen["wall"] < 60.0


def test_the_objective_floor_is_a_bound_never_a_stop() -> None:
    """A floor (an outside bound) never ends CP-SAT's search: with several workers, the
    first solution within its gap that the callback sees is whichever task reported first,
    while the search is deterministic only at its synchronization points (solvers/cpsat.py).
    From a hint at twice the optimum, within a 60 % gap of a floor at the optimum, a search
    that may not stop on its own bound (``floor_only``) goes on to the optimum, and the
    floor is its bound."""
    n = 40
    model = _pairs_model(n)
    model.hint = {v: float(v % 2) for v in range(n)}   # the dearer of each pair: objective n
    model.objective_floor = n / 2
    outs = [solve_model(model, "cpsat", BackendOptions(time_limit_s=20.0, threads=2, relative_gap=0.6,
                                                       floor_only=True)) for _ in range(2)]
    for out in outs:
        assert out.status == "optimal", out.message
        assert out.objective == pytest.approx(n / 2) and out.bound == pytest.approx(n / 2)
    assert outs[0].values == outs[1].values
