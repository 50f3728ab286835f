"""Pydantic schemas of what poetc writes and reads back: the sidecar report and sweep rows.

* :class:`SidecarReport` — the JSON object ``Compilation.save`` / ``poetc compile -o``
  writes beside a ``.poet`` file (``Compilation.report()``): the Result's report
  (:attr:`Result.REPORT_KEYS`, ``arena_bytes``, ``message``, the set fields of
  :class:`~poet_compiler.solve.result.Notes`, declared by ``NoteFields``) plus the compile's own figures.
  ``poetc inspect`` and ``poetc plot`` validate it when they read it.
* :class:`SweepRow` — one row of a sweep CSV (``poetc sweep``, ``compare(output=...)``):
  the cell's labels, the same report keys, the checkpoint-all reference and
  ``activations_only`` with the ``ram_split``. Empty cells are None; dict-valued figures are compact JSON text.
  :func:`read_sweep_csv` validates every row (``poetc plot SWEEP.csv``); a cached row
  that does not match is a cache miss (:class:`poet_compiler.sweeps.Cache`).

Both are built from the dataclasses that declare the figures (``Result``,
``NoteFields``), so a new figure is typed in one place; unknown keys are refused. Only
``status`` is required: a report may hold a subset of the keys. The JSON Schemas in
``docs/schemas/`` are exported from these models: ``python -m poet_compiler.schemas``
rewrites them, ``--check`` fails when they are stale (a test runs it).
"""

from __future__ import annotations

import argparse
import ast
import csv
import inspect
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Json, ValidationError, create_model

from poet_compiler.errors import PoetError
from poet_compiler.fileio import atomic_write_text
from poet_compiler.solve.result import FIELDS, MEASURED_KEYS, NoteFields, Result

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "docs" / "schemas"

# The compile's own figures in the sidecar (Compilation.report), with their types.
COMPILE_FIELDS: dict[str, tuple[Any, str]] = {
    "model": (str, "The model's name (zoo name, file stem or class name)."),
    "device": (str, "The device profile's name."),
    "checkpoint_all_peak_bytes": (int, "Peak live bytes of checkpoint-all (the 100% of RAM budgets)."),
    "checkpoint_all_runtime_s": (float, "Step time of checkpoint-all (the 1x of deadlines)."),
    "checkpoint_all_energy_j": (float, "Energy of checkpoint-all."),
    "activations_only": (bool, "The RAM budget covers the arena alone (POET's convention, --activations-only); "
                         "false: it covers everything the step keeps in RAM on the device (ram_split)."),
    "ram_split": (dict[str, int | None], "RAM on the device, bytes: arena, params (parameters and buffers), grads "
                  "(kept until the caller's update), optimizer_state, batch, outputs (loss, new buffer values), "
                  "reserve (the device runtime's: stack, state, per-node tables, from the profile) and their total. "
                  "Counted against ram_budget_bytes unless activations_only."),
    "device_ram_bytes": (int | None, "The device profile's RAM (null: no device)."),
    "count_fixed": (bool, "Reports written before activations_only: whether parameters, gradients, optimizer "
                    "state and the batch counted against the RAM budget. No longer written."),
    "granularity": (str, "Graph granularity: op, module, layer (or auto's choice)."),
    "batch": (int | None, "The batch size, when the model was traced with one."),
    "onnx_loss": (str | None, "The loss appended to an ONNX inference graph."),
    "input_shapes": (dict[str, list[int]] | None, "Input shapes of an ONNX graph."),
    "optimizer": (str | None, "The optimizer whose update the step applies in place (a spec, docs/training.md)."),
    "train": (str | None, "The --train patterns: the parameters trained (the others frozen)."),
    "versions": (dict[str, str], "Versions of poetc, torch, OR-Tools, HiGHS, onnx, numpy and Python that "
                 "produced the schedule (what reproducing it needs)."),
}

# The labels that lead every sweep row (sweeps.LEAD_COLUMNS) and the reference columns.
SWEEP_LABELS: dict[str, str] = {
    "model": "The model label as given to the sweep.",
    "device": "The device label.",
    "ram": "The RAM budget as given (e.g. 60%, 256k).",
    "deadline": "The deadline as given (e.g. 1.5x, 120ms); empty: none.",
    "strategy": "The strategy as given (NAME or NAME:MODE).",
}

REPORT_DOCS: dict[str, str] = {
    "status": "optimal, feasible (with a gap), infeasible (with the reason) or timeout.",
    "energy_j": "Energy of one training step (simulator).",
    "runtime_s": "Time of one training step (simulator).",
    "peak_ram_bytes": "Peak live activation bytes (simulator).",
    "arena_bytes": "Size of the static arena the schedule's tensors are placed in.",
    "ram_budget_bytes": "The RAM budget in bytes.",
    "deadline_s": "The deadline in seconds (null: none).",
    "lower_bound_j": "A proven lower bound on the energy of every schedule within the budgets.",
    "gap": "(energy - bound) / energy.",
    "solve_time_s": "Wall time of the strategy.",
    "message": "Why: the reason for infeasible/timeout, the stopping rule, notes.",
}


def _attribute_docs(cls: type) -> dict[str, str]:
    """The docstring under each annotated attribute of ``cls`` (the style of NoteFields)."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    pending: list[str] = []
    for node in body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            pending.append(node.target.id)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            text = " ".join(node.value.value.split())
            for name in pending:     # a docstring under a group of fields documents all of them
                docs[name] = text
            pending = []
        else:
            pending = []
    return docs


def _doc(name: str, doc: str | None) -> str | None:
    if name in MEASURED_KEYS:
        return f"{doc + ' ' if doc else ''}Measured wall time: differs from run to run (not a result)."
    return doc


def _report_fields() -> dict[str, tuple[Any, Any]]:
    """Result.report()'s keys: the fixed figures, then every field of NoteFields."""
    hints = typing.get_type_hints(Result)
    extra_hints = typing.get_type_hints(NoteFields)
    extra_docs = _attribute_docs(NoteFields)
    out: dict[str, tuple[Any, Any]] = {}
    for name in (*Result.REPORT_KEYS, "arena_bytes", "message"):
        tp = Literal["optimal", "feasible", "infeasible", "timeout"] if name == "status" else hints[name]
        out[name] = (tp, Field(... if name == "status" else None, description=_doc(name, REPORT_DOCS.get(name))))
    for f in FIELDS:
        out[f.name] = (extra_hints[f.name], Field(None, description=_doc(f.name, extra_docs.get(f.name))))
    return out


class _Report(BaseModel):
    model_config = ConfigDict(extra="forbid")


SidecarReport: type[BaseModel] = create_model(  # type: ignore[call-overload]
    "SidecarReport",
    __base__=_Report,
    __doc__="The sidecar report written beside a .poet schedule (Compilation.report()).",
    **_report_fields(),
    **{k: (tp, Field(None, description=doc)) for k, (tp, doc) in COMPILE_FIELDS.items()},
)


def _csv_type(tp: Any) -> Any:
    """A figure's type in a CSV cell: dict-valued ones are JSON text; an empty cell is None."""
    origin = typing.get_origin(tp)
    members = typing.get_args(tp) if origin in (typing.Union, types.UnionType) else (tp,)
    inner = [a for a in members if a is not type(None)]
    if len(inner) == 1 and typing.get_origin(inner[0]) is dict:
        return Json[inner[0]] | None  # type: ignore[valid-type,misc]
    return tp | None


def _sweep_fields() -> dict[str, tuple[Any, Any]]:
    out: dict[str, tuple[Any, Any]] = {k: (str | None, Field(None, description=doc)) for k, doc in SWEEP_LABELS.items()}
    for name, (tp, field) in _report_fields().items():
        if name == "status":
            tp = Literal["optimal", "feasible", "infeasible", "timeout", "error"]
            field = Field(..., description=REPORT_DOCS["status"] + " error: the cell's input was refused.")
        out[name] = (_csv_type(tp), field)
    for k in ("checkpoint_all_peak_bytes", "checkpoint_all_runtime_s", "checkpoint_all_energy_j", "activations_only",
              "ram_split", "device_ram_bytes"):
        tp, doc = COMPILE_FIELDS[k]
        out[k] = (_csv_type(tp), Field(None, description=doc))
    return out


SweepRow: type[BaseModel] = create_model(  # type: ignore[call-overload]
    "SweepRow",
    __base__=_Report,
    __doc__="One row of a sweep CSV (one solved cell); empty cells are null.",
    **_sweep_fields(),
)


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "(top level)"
    msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {msg}{more}"


def validate_report(data: Any, source: str) -> dict[str, Any]:
    """``data`` checked against :class:`SidecarReport`; returned as read (PoetError: one line)."""
    if not isinstance(data, dict):
        raise PoetError(f"sidecar report {source} is not a JSON object")
    try:
        SidecarReport.model_validate(data)
    except ValidationError as exc:
        raise PoetError(f"sidecar report {source} does not match the report schema: {_first_error(exc)}") from None
    return data


def read_sidecar(poet_path: str | Path) -> dict[str, Any] | None:
    """The report written beside a schedule (``X.poet`` -> ``X.json``), or None if absent;
    validated against :class:`SidecarReport` (PoetError: one line)."""
    side = Path(poet_path).with_suffix(".json")
    if not side.is_file():
        return None
    try:
        data = json.loads(side.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PoetError(f"sidecar report {side} is not readable JSON: {exc}") from None
    return validate_report(data, str(side))


def is_sweep_row(row: dict[str, Any]) -> bool:
    """Whether ``row`` (a sweep row as cached: JSON scalars) matches :class:`SweepRow`."""
    try:
        SweepRow.model_validate(row)
    except ValidationError:
        return False
    return True


def read_sweep_csv(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a sweep CSV, each validated against :class:`SweepRow` (PoetError: one line)."""
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            rows = [{k: (v if v != "" else None) for k, v in row.items()} for row in csv.DictReader(fh)]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise PoetError(f"cannot read sweep CSV {path}: {exc}") from None
    for i, row in enumerate(rows, start=2):       # line numbers: the header is line 1
        if None in row:
            raise PoetError(f"sweep CSV {path}: line {i} has more cells than the header")
        try:
            SweepRow.model_validate(row)
        except ValidationError as exc:
            raise PoetError(f"sweep CSV {path}: line {i}: {_first_error(exc)}") from None
    return rows


SCHEMAS: dict[str, type[BaseModel]] = {"report.schema.json": SidecarReport, "sweep-row.schema.json": SweepRow}


def schema_texts() -> dict[str, str]:
    """File name -> JSON Schema text, as committed in docs/schemas/."""
    return {name: json.dumps(model.model_json_schema(), indent=1, sort_keys=True) + "\n"
            for name, model in SCHEMAS.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m poet_compiler.schemas",
                                 description="Write (or --check) the JSON Schemas in docs/schemas/.")
    ap.add_argument("--check", action="store_true", help="exit 1 when a committed schema is stale")
    ap.add_argument("--dir", type=Path, default=SCHEMA_DIR)
    args = ap.parse_args(argv)
    stale = []
    for name, text in schema_texts().items():
        target = args.dir / name
        current = target.read_text(encoding="utf-8") if target.is_file() else None
        if current == text:
            continue
        if args.check:
            stale.append(name)
        else:
            atomic_write_text(target, text)
            print(f"wrote {target}")
    if stale:
        print(f"stale: {', '.join(stale)} (run python -m poet_compiler.schemas)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
