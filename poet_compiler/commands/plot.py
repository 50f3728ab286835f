"""``poetc plot FILE.poet|FILE.json|SWEEP.csv --kind grid|memory|ram|deadline -o out.png``.

A schedule is read from its bytecode; the node table (names, inputs), the size and
workspace sections give the graph that the simulator replays for the memory plot, and
the sidecar report ``FILE.json`` beside it gives the RAM budget. A sweep CSV draws the
energy curves instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from poet_compiler.errors import PoetError

KINDS = ("grid", "memory", "ram", "deadline")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise PoetError(f"cannot read report {path}: {exc}") from None
    from poet_compiler.schemas import validate_report  # lazy: pydantic models, built at import

    return validate_report(data, str(path))


def schedule_paths(path: Path) -> tuple[Path, Path | None]:
    """(.poet, sidecar .json or None) for either file of the pair."""
    if path.suffix == ".json":
        poet = path.with_suffix(".poet")
        if not poet.exists():
            raise PoetError(f"{path}: no schedule {poet.name} beside the report")
        return poet, path
    if not path.exists():
        raise PoetError(f"{path}: no such file")
    side = path.with_suffix(".json")
    return path, side if side.exists() else None


def plot_schedule_file(path: Path, kind: str) -> Any:
    """Figure of a compiled schedule (``grid`` or ``memory``)."""
    from poet_compiler.codegen.bytecode import decode
    from poet_compiler.codegen.bytecode.to_graph import graph_from_decoded, zero_costs
    from poet_compiler.viz import plot_grid, plot_memory

    poet, side = schedule_paths(path)
    decoded = decode(poet.read_bytes())
    report = _read_json(side) if side is not None else {}
    graph = graph_from_decoded(decoded, name=str(report.get("model") or poet.stem))
    title_bits = [graph.name]
    if report.get("device"):
        title_bits.append(f"on {report['device']}")
    if kind == "grid":
        return plot_grid(graph if decoded.nodes is not None else None, decoded.program,
                         title=" ".join(title_bits) + ": schedule")
    if decoded.sizes is None:
        raise PoetError(
            f"{poet}: the bytecode has no size table; cannot draw memory (recompile without stripping sizes)"
        )
    budget = report.get("ram_budget_bytes")
    arena = decoded.program.arena_bytes if decoded.program.arena_bytes is not None else report.get("arena_bytes")
    # Live bytes do not depend on time or energy: zero costs replay the same timeline.
    return plot_memory(graph, zero_costs(graph.n), decoded.program, budget, arena,
                       title=" ".join(title_bits) + ": memory over the program")


def register(app: typer.Typer) -> None:
    @app.command("plot")
    def plot_cmd(
        source: Path = typer.Argument(..., help="schedule (.poet), its report (.json), or a sweep CSV"),
        kind: str = typer.Option(None, "--kind", "-k", help="grid | memory (schedules); ram | deadline (sweep CSVs)"),
        output: Path = typer.Option(None, "-o", "--output", help="PNG file (default: SOURCE-KIND.png)"),
    ) -> None:
        """Draw a schedule grid, its memory over time, or a sweep's energy curves as PNG."""
        from poet_compiler.viz import save_png

        is_csv = source.suffix.lower() == ".csv"
        kind = kind or ("ram" if is_csv else "grid")
        if kind not in KINDS:
            raise PoetError(f"unknown --kind {kind!r}; expected one of {', '.join(KINDS)}")
        if is_csv:
            if kind not in ("ram", "deadline"):
                raise PoetError(f"--kind {kind} needs a schedule; a sweep CSV plots --kind ram or deadline")
            from poet_compiler.comparison import plot, read_sweep

            fig = plot(read_sweep(source), kind=kind)   # rows validated against the sweep-row schema
        else:
            if kind not in ("grid", "memory"):
                raise PoetError(f"--kind {kind} needs a sweep CSV; a schedule plots --kind grid or memory")
            fig = plot_schedule_file(source, kind)
        out = output or source.with_name(f"{source.stem}-{kind}.png")
        save_png(fig, out)
        typer.echo(f"wrote {out}")
