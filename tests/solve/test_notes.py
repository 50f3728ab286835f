"""Notes: typed, frozen report fields that keep the report's keys exactly (set vs unset);
a Result is frozen."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from poet_compiler.solve.result import FIELD_NAMES, MEASURED_KEYS, Notes, Result


def _result(**notes) -> Result:
    return Result(status="feasible", strategy="s", mode="poet", ram_budget_bytes=1, deadline_s=None,
                  notes=Notes(notes))


def test_only_set_fields_are_reported_and_explicit_none_is_kept():
    r = _result(fragmentation=1.0)
    assert "fragmentation" in r.report() and "min_ram_bytes" not in r.report()
    noted = dataclasses.replace(r, notes=r.notes.set(min_ram_bytes=None))
    assert noted.report()["min_ram_bytes"] is None
    assert "min_ram_bytes" not in dataclasses.replace(noted, notes=noted.notes.without("min_ram_bytes")).report()
    # Exactly the fixed keys when nothing is set.
    assert set(_result().report()) == {*Result.REPORT_KEYS, "arena_bytes", "message"}


def test_report_keys_follow_the_declaration_order_whatever_the_order_set():
    a = Notes(stopped_by="gap").set(fragmentation=1.0, solver_used="cpsat")
    b = Notes(solver_used="cpsat", fragmentation=1.0).set(stopped_by="gap")
    assert list(a.to_dict()) == list(b.to_dict()) == ["fragmentation", "stopped_by", "solver_used"]


def test_unknown_name_is_refused():
    with pytest.raises(TypeError, match="no field"):
        Notes().set(not_a_figure=1)
    with pytest.raises(AttributeError, match="no field"):
        Notes().not_a_figure  # noqa: B018


def test_merge_is_dict_update():
    a = Notes(solver_used="a", gap_limit=0.1)
    b = Notes(solver_used="b").set(cover_bound_j=None)
    merged = a.merge(b, warm_start_found=True)
    assert merged.to_dict() == {"solver_used": "b", "gap_limit": 0.1, "cover_bound_j": None, "warm_start_found": True}
    assert a.to_dict() == {"solver_used": "a", "gap_limit": 0.1}      # a new value: a is unchanged
    c = Notes(solver_used="c").merge(merged, overwrite=False)
    assert c.solver_used == "c" and c.gap_limit == 0.1 and "cover_bound_j" in c.names()
    assert c.min_ram_bytes is None and "min_ram_bytes" not in c


def test_notes_and_results_are_frozen_and_cross_processes():
    r = _result(stage_s={"cover": 1.0}, stopped_by="proof")
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.energy_j = 1.0  # type: ignore[misc]
    with pytest.raises(AttributeError, match="frozen"):
        r.notes.stopped_by = "gap"
    again = pickle.loads(pickle.dumps(r))
    assert again == r and again.report() == r.report() and again.notes.stopped_by == "proof"


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
