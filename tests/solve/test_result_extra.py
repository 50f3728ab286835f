"""ResultExtra: typed report extras that keep the report's keys exactly (set vs unset)."""

from __future__ import annotations

import pytest

from poet_compiler.solve.result import FIELD_NAMES, MEASURED_KEYS, Result, ResultExtra


def _result(**extra) -> Result:
    return Result(status="feasible", strategy="s", mode="poet", ram_budget_bytes=1, deadline_s=None,
                  extra=ResultExtra(**extra))


def test_only_set_fields_are_reported_and_explicit_none_is_kept():
    r = _result(fragmentation=1.0)
    assert "fragmentation" in r.report() and "min_ram_bytes" not in r.report()
    r.extra.set(min_ram_bytes=None)
    assert r.report()["min_ram_bytes"] is None
    r.extra.unset("min_ram_bytes")
    assert "min_ram_bytes" not in r.report()
    # Exactly the fixed keys when nothing is set.
    assert set(_result().report()) == {*Result.REPORT_KEYS, "arena_bytes", "message"}


def test_unknown_name_is_refused():
    with pytest.raises(TypeError, match="no field"):
        ResultExtra().set(not_a_figure=1)


def test_merge_is_dict_update():
    a = ResultExtra(solver_used="a", gap_limit=0.1)
    b = ResultExtra(solver_used="b")
    b.set(cover_bound_j=None)
    a.merge(b, warm_start_found=True)
    assert a.to_dict() == {"solver_used": "b", "gap_limit": 0.1, "cover_bound_j": None, "warm_start_found": True}
    c = ResultExtra(solver_used="c")
    c.merge(a, overwrite=False)
    assert c.solver_used == "c" and c.gap_limit == 0.1 and "cover_bound_j" in c.names()


def test_model_stats_and_no_private_field_in_report():
    e = ResultExtra()
    e.set_model_stats({"variables": 3, "binaries": 2, "constraints": 1, "nonzeros": 4, "u_t": 0.5})
    assert e.to_dict() == {"model_variables": 3, "model_binaries": 2, "model_constraints": 1, "model_nonzeros": 4}
    assert "_set" not in FIELD_NAMES and "stage_s" in FIELD_NAMES


def test_every_seconds_figure_is_declared_measured_or_a_result():
    """A new wall-time figure must be marked measured, or the sweep's pool/Ray/in-process
    equality breaks on it (as an untyped key once did in a clean-clone CI run)."""
    # Results and inputs in seconds: the step's time, the deadline, the time limit the user gave.
    results_in_seconds = {"runtime_s", "deadline_s", "min_deadline_s", "min_deadline_lower_s", "time_limit_s"}
    seconds = {k for k in (*FIELD_NAMES, *Result.REPORT_KEYS) if k.endswith("_s")}
    # The measured figures that are not seconds: peak memory (it differs from run to run too)
    # and the note that says how long a solve took of its limit.
    measured_other = {"peak_rss_mb", "memory_peak_mb", "effort_note"}
    assert measured_other <= MEASURED_KEYS
    assert seconds - results_in_seconds == MEASURED_KEYS - measured_other
