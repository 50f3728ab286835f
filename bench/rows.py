"""What a bench writes: its rows as JSON lines (``OUT.jsonl``) and as a Markdown table
(``OUT.md``), so every result file under bench/results/ has the same two shapes."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

Column = tuple[str, Callable[[dict], object]]


def gap_text(row: dict) -> str:
    """A row's relative gap as a percentage, or ``-``."""
    return "-" if row.get("gap") is None else f"{100 * row['gap']:.3f} %"


def figure(value: float | None) -> str:
    """An energy or a bound to six significant digits, or ``-``."""
    return "-" if value is None else f"{value:.6g}"


def write_rows(out: Path, rows: list[dict], intro: Sequence[str], columns: Sequence[Column],
               notes: Sequence[str] = ()) -> None:
    """``OUT.jsonl`` (a row a line) and ``OUT.md``: ``intro``, the table of ``columns``
    (header, cell of a row), then ``notes`` after a blank line."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = [*intro, "| " + " | ".join(h for h, _ in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(cell(r)) for _, cell in columns) + " |" for r in rows]
    if notes:
        lines += ["", *notes]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
