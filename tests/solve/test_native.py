"""solve_native, the one entry point for native CP-SAT models, and its stopping rule: the
wall limit, the optional deterministic limit, and a target reached without stopping the
search from a callback (the target-seeking search runs in a child that is killed once it
has sent a solution within the target), and a search left running in the background
(NativeRun)."""

from __future__ import annotations

import random
import time
from typing import Any

from poet_compiler.solvers.native import NativeLimits, NativeRun, new_model, solve_native


def _model(n: int = 12) -> tuple[Any, list[Any], Any]:
    """Pack n items of sizes 1..n into bins of 3 numbered 0..n-1 (intervals over time):
    minimize the largest bin used."""
    m = new_model()
    xs, ivs = [], []
    top = m.new_int_var(0, n, "top")
    for i in range(n):
        x = m.new_int_var(0, n - 1, f"x{i}")
        xs.append(x)
        ivs.append(m.new_fixed_size_interval_var(x, 1, f"i{i}"))
        m.add(top >= x + 1)
    m.add_cumulative(ivs, [1 + i % 3 for i in range(n)], 3)
    m.minimize(top)
    return m, xs, top


def test_without_target_solves_to_optimality_in_process() -> None:
    m, xs, top = _model()
    res = solve_native(m, NativeLimits(time_limit_s=10.0, deterministic_s=5.0, seed=0))
    assert res.status == "optimal" and not res.at_target
    assert res.value(top) == res.objective == res.bound
    assert max(res.value(x) for x in xs) + 1 == res.value(top)


def test_target_ends_at_a_solution_within_it() -> None:
    m, xs, top = _model()
    loose = 12   # every solution is within it: the first one ends the search
    res = solve_native(m, NativeLimits(time_limit_s=10.0, target=loose))
    assert res.has_solution and res.objective is not None and res.objective <= loose
    assert res.value(top) == max(res.value(x) for x in xs) + 1
    assert res.at_target or res.status == "optimal"


def test_target_below_the_optimum_runs_to_the_search_end() -> None:
    m, _, top = _model()
    res = solve_native(m, NativeLimits(time_limit_s=10.0, target=0))
    assert res.status == "optimal" and not res.at_target and res.value(top) > 0


def test_infeasible_and_literals() -> None:
    m = new_model()
    b = m.new_bool_var("b")
    m.add(b == 1)
    m.minimize(b)
    res = solve_native(m, NativeLimits(time_limit_s=5.0))
    assert res.value(b) == 1 and res.value(~b) == 0
    m.add(b == 0)
    for target in (None, 1):
        res = solve_native(m, NativeLimits(time_limit_s=5.0, target=target))
        assert res.status == "infeasible" and not res.has_solution


def _partition(n: int = 40, seed: int = 1) -> tuple[Any, list[Any], list[int], int]:
    """Number partitioning (n weights, the smallest subset sum above half): CP-SAT takes
    far longer than a test to prove it, and finds solutions and bounds at once."""
    rnd = random.Random(seed)
    m = new_model()
    xs = [m.new_bool_var(f"x{i}") for i in range(n)]
    w = [rnd.randint(10**5, 10**6) for _ in range(n)]
    half = sum(w) // 2 + 1
    m.add(sum(wi * x for wi, x in zip(w, xs)) >= half)
    m.minimize(sum(wi * x for wi, x in zip(w, xs)))
    return m, xs, w, half


def test_a_run_waited_for_ends_with_its_result() -> None:
    m, xs, top = _model()
    run = NativeRun(m, NativeLimits(time_limit_s=10.0, isolate=True))
    assert run.wait(time.perf_counter() + 30.0)
    res = run.stop()
    assert res.status == "optimal" and res.value(top) == res.objective == res.bound
