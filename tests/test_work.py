"""The work meter: what a solver call is charged decides every later stage's limit, so
it must not depend on the machine."""

from __future__ import annotations

import random

from poet_compiler import work
from poet_compiler.solvers.native import NativeLimits, new_model, solve_native


def _hard_model():
    """A 0/1 knapsack with many items: CP-SAT runs it to any small deterministic limit."""
    rng = random.Random(7)
    m = new_model()
    xs = [m.new_bool_var(f"x{i}") for i in range(400)]
    weights = [rng.randrange(1000, 100000) for _ in xs]
    values = [w + rng.randrange(-500, 500) for w in weights]
    m.add(sum(w * x for w, x in zip(weights, xs)) <= sum(weights) // 2 + 1)
    m.maximize(sum(v * x for v, x in zip(values, xs)))
    return m


def test_a_call_is_charged_at_most_its_deterministic_limit() -> None:
    meter = work.Meter()
    with work.metered(meter):
        work.settle(7.123, 7.022, 1.0, 100.0)
        assert meter.spent == 7.022
        work.settle(0.5, 7.022, 1.0, 100.0)
        assert meter.spent == 7.022 + 0.5
    assert not meter.time_hit


def test_a_multi_worker_call_that_runs_to_its_limit_is_charged_exactly_the_limit() -> None:
    charges = set()
    for _ in range(3):
        meter = work.Meter()
        with work.metered(meter):
            out = solve_native(_hard_model(), NativeLimits(time_limit_s=0.05, workers=2))
        assert out.status in ("feasible", "optimal")
        charges.add(meter.spent)
        if out.status == "feasible":        # stopped on its limit, not by a proof
            assert meter.spent == 0.05
    assert len(charges) == 1
