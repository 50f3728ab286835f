"""Self-contained compile reports: ``write_report(compilation, "out.html" | "out.md")``.

Both formats hold the summary figures (the simulator's, as in the sidecar JSON), the
schedule grid and the memory plot, and the head of the instruction listing. Plots are
embedded as base64 PNG data URIs in both, so the report is one file that can be mailed
or attached to a CI run (Markdown viewers that refuse data URIs show the alt text).
No timestamps: the same compilation gives the same bytes.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import TYPE_CHECKING, Any

from poet_compiler.errors import PoetError
from poet_compiler.fileio import atomic_write_text
from poet_compiler.units import format_bytes

if TYPE_CHECKING:
    from poet_compiler.compilation import Compilation

# Rows of the summary table, in reading order; other report keys follow in an appendix.
SUMMARY_KEYS = (
    "status", "strategy", "mode", "energy_j", "runtime_s", "peak_ram_bytes", "arena_bytes",
    "ram_budget_bytes", "deadline_s", "lower_bound_j", "gap", "stopped_by", "effort_note", "solve_time_s", "n_nodes",
    "n_compute", "n_page_in", "n_page_out", "n_move", "solver", "formulation",
    "checkpoint_all_peak_bytes", "checkpoint_all_runtime_s", "checkpoint_all_energy_j", "message",
)
LISTING_LINES = 400  # the head of the program; the .poet file holds all of it


def read_sidecar(poet_path: Path) -> dict[str, Any] | None:
    """The report written beside a schedule, validated (:func:`poet_compiler.schemas.read_sidecar`)."""
    # Imported here: the schemas build pydantic models at import, which every poetc
    # command would otherwise pay at start (reporting is imported by the CLI).
    from poet_compiler.schemas import read_sidecar as read

    return read(poet_path)


def fmt(key: str, value: Any) -> str:
    """A figure as a reader wants it: bytes in KiB/MiB, joules and seconds with units."""
    if value is None or value == "":
        return "-"
    if key.endswith("_bytes") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{format_bytes(value)} ({int(value):,} B)"
    if key == "gap" and isinstance(value, float):
        return f"{100 * value:.3f}%"
    if key.endswith("_j") and isinstance(value, float):
        return f"{value:.6g} J"
    if key.endswith("_s") and isinstance(value, float):
        return f"{value:.6g} s"
    return str(value)


def time_split(report: dict[str, Any]) -> str | None:
    """Where a compile's time went, in one line ("20.6 s: startup 1.4, trace 6.4, warm_starts
    5.1, cover 2.9, guided 3.7, finalize 1.0"): the command's start, tracing and costing, then the solve's stages
    (``stage_s``) in the order they ran, each shown from 0.05 s on; None without
    ``compile_s`` (a report not written by ``poetc compile``)."""
    total = report.get("compile_s")
    if not isinstance(total, (int, float)):
        return None
    parts = [("startup", report.get("startup_s")), ("trace", report.get("trace_s")),
             ("costing", report.get("costing_s")),
             *(report.get("stage_s") or {}).items()]
    shown = [f"{name} {secs:.1f}" for name, secs in parts if isinstance(secs, (int, float)) and secs >= 0.05]
    return f"{total:.1f} s: " + ", ".join(shown) if shown else f"{total:.1f} s"


_SPLIT_LABELS = (("arena", "arena"), ("params", "parameters"), ("grads", "gradients"),
                 ("optimizer_state", "optimizer state"), ("batch", "batch"), ("outputs", "outputs"),
                 ("reserve", "runtime reserve"))


def ram_text(report: dict[str, Any]) -> str | None:
    """The RAM on the device in one line ("arena 194.9 KiB + parameters 20.7 KiB + ... =
    246.3 KiB of the 256.0 KiB budget, which counts all of it"); None without ``ram_split``.
    With ``activations_only`` the budget is the arena's and the line says so."""
    split = report.get("ram_split")
    if not isinstance(split, dict):
        return None
    parts = [f"{label} {format_bytes(split[key])}" for key, label in _SPLIT_LABELS if split.get(key)]
    total = split.get("total")
    line = " + ".join(parts) + (f" = {format_bytes(total)}" if total is not None else "")
    budget = report.get("ram_budget_bytes")
    if isinstance(budget, int):
        line += (f"; the {format_bytes(budget)} budget covers the arena alone (--activations-only)"
                 if report.get("activations_only") else f" of the {format_bytes(budget)} budget")
    device = report.get("device_ram_bytes")
    if isinstance(device, int):
        line += f" (device RAM {format_bytes(device)})"
    return line


def report_figures(c: Compilation) -> list[tuple[str, bytes]]:
    """(caption, PNG) for the schedule grid and the memory plot; none without a program."""
    from poet_compiler.viz import plot_grid, plot_memory, png_bytes

    program = c.result.program
    if program is None:
        return []
    grid = plot_grid(c.graph, c.result.schedule if c.result.schedule is not None else program,
                     title=f"{c.model} on {c.device}: schedule ({c.result.strategy}, {c.result.mode})")
    memory = plot_memory(c.graph, c.costs, program, c.problem.activation_budget,
                         c.result.arena_bytes if c.result.arena_bytes is not None else program.arena_bytes,
                         title=f"{c.model} on {c.device}: memory over the program")
    return [("Schedule grid (stage x node)", png_bytes(grid)), ("Memory over the program", png_bytes(memory))]


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _rows(report: dict[str, Any]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    main = [(k, fmt(k, report[k])) for k in SUMMARY_KEYS if k in report]
    if (ram := ram_text(report)) is not None:
        main.append(("RAM on the device", ram))
    rest = [(k, fmt(k, report[k])) for k in sorted(report) if k not in SUMMARY_KEYS]
    return main, rest


def _listing(c: Compilation) -> str:
    program = c.result.program
    if program is None:
        return ""
    names = [n.name for n in c.graph.nodes]
    lines = []
    for k, ins in enumerate(program.instructions[:LISTING_LINES]):
        who = f"  ({names[ins.node]})" if 0 <= ins.node < len(names) else ""
        lines.append(f"{k:6d}  {ins}{who}")
    if len(program) > LISTING_LINES:
        lines.append(f"... {len(program) - LISTING_LINES} more instructions (see the .poet file / poetc inspect)")
    return "\n".join(lines)


def render_html(c: Compilation) -> str:
    report = c.report()
    main, rest = _rows(report)
    esc = html.escape
    title = f"poetc report: {c.model} on {c.device}"
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', f"<title>{esc(title)}</title>",
        "<style>body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 10px;text-align:left}"
        "th{background:#f3f5f9}img{max-width:100%;border:1px solid #eee}pre{background:#f7f7f7;padding:1em;"
        "overflow-x:auto;font-size:12px}.status-ok{color:#1a7f37}.status-bad{color:#b3261e}</style>",
        "</head><body>", f"<h1>{esc(title)}</h1>",
    ]
    cls = "status-ok" if c.result.ok else "status-bad"
    parts.append(f'<p class="{cls}"><b>{esc(str(c.result.status))}</b>'
                 + (f": {esc(c.result.message)}" if c.result.message else "") + "</p>")
    parts.append("<h2>Summary</h2><table>")
    parts += [f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in main]
    parts.append("</table>")
    for caption, png in report_figures(c):
        parts.append(f"<h2>{esc(caption)}</h2><img alt=\"{esc(caption)}\" src=\"{_data_uri(png)}\">")
    if rest:
        parts.append("<h2>All figures</h2><table>")
        parts += [f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rest]
        parts.append("</table>")
    listing = _listing(c)
    if listing and c.result.program is not None:
        parts.append(f"<h2>Program</h2><details><summary>{len(c.result.program)} instructions</summary>"
                     f"<pre>{esc(listing)}</pre></details>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(c: Compilation) -> str:
    report = c.report()
    main, rest = _rows(report)
    out = [f"# poetc report: {c.model} on {c.device}", "",
           f"**{c.result.status}**" + (f": {c.result.message}" if c.result.message else ""), "",
           "## Summary", "", "| figure | value |", "|---|---|"]
    out += [f"| {_md_cell(k)} | {_md_cell(v)} |" for k, v in main]
    for caption, png in report_figures(c):
        out += ["", f"## {caption}", "", f"![{caption}]({_data_uri(png)})"]
    if rest:
        out += ["", "## All figures", "", "| figure | value |", "|---|---|"]
        out += [f"| {_md_cell(k)} | {_md_cell(v)} |" for k, v in rest]
    listing = _listing(c)
    if listing:
        out += ["", "## Program", "", "```", listing, "```"]
    return "\n".join(out) + "\n"


def write_report(compilation: Compilation, path: str | Path) -> Path:
    """Write the report as .html or .md (chosen by the suffix), atomically."""
    out = Path(path)
    suffix = out.suffix.lower()
    if suffix in (".html", ".htm"):
        text = render_html(compilation)
    elif suffix in (".md", ".markdown"):
        text = render_markdown(compilation)
    else:
        raise PoetError(f"report {out}: unknown format {out.suffix or '(no suffix)'!r}; use .html or .md")
    atomic_write_text(out, text)
    return out
