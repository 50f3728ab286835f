"""Judging a result (poet_compiler/solve/verdict.py): the gap a message claims holds."""

from __future__ import annotations

from poet_compiler.solve.result import Result
from poet_compiler.solve.verdict import GAP_CLAIM, keep_gap_claim_true


def _result(gap: float, message: str) -> Result:
    return Result(status="feasible", strategy="optimal", mode="poet", ram_budget_bytes=1, deadline_s=None,
                  n_nodes=1, energy_j=1.0, lower_bound_j=1.0 - gap, gap=gap, message=message)


def test_a_claim_the_final_gap_breaks_is_replaced_and_the_rest_kept() -> None:
    res = _result(0.0439, f"{GAP_CLAIM} 0.001 of the eviction-cover bound; arena: re-solved 1 time(s)")
    keep_gap_claim_true(res, 1e-3)
    assert GAP_CLAIM not in res.message
    assert res.message.startswith("4.390% above the bound, over the gap limit 0.001")
    assert res.message.endswith("; arena: re-solved 1 time(s)")


def test_a_claim_that_holds_is_left_alone() -> None:
    for gap, limit in ((0.00038, 1e-3), (0.001, 1e-3), (0.0, 0.0)):
        message = f"{GAP_CLAIM} {limit:g}"
        res = _result(gap, message)
        keep_gap_claim_true(res, limit)
        assert res.message == message
    res = _result(0.05, "stopped at the time limit (60 s)")
    keep_gap_claim_true(res, 1e-3)
    assert res.message == "stopped at the time limit (60 s)"
