"""``poetc inspect FILE.poet``: header figures, the disassembly, and the sidecar report.

The sidecar is the ``FILE.json`` that ``poetc compile`` writes beside ``FILE.poet``;
when it exists its figures (energy, time, peak RAM, budgets, ...) are printed too.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from poet_compiler.codegen.bytecode import decode, disassemble, header_figures
from poet_compiler.errors import BytecodeError
from poet_compiler.reporting import ram_text, read_sidecar


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise BytecodeError(f"cannot read {path}: {exc.strerror or exc}") from None




def register(app: typer.Typer) -> None:
    @app.command("inspect")
    def inspect(
        path: Path = typer.Argument(..., help="a .poet bytecode file"),
        listing: bool = typer.Option(True, "--listing/--no-listing", help="print the disassembly"),
        as_json: bool = typer.Option(False, "--json", help="print the figures as one JSON object"),
    ) -> None:
        """Disassemble a .poet file and print its figures (and its sidecar report's)."""
        data = _read(path)
        try:
            decoded = decode(data)
        except BytecodeError as exc:
            raise BytecodeError(f"{path}: {exc}") from None
        figures = header_figures(decoded)
        report = read_sidecar(path)
        if as_json:
            typer.echo(json.dumps({"bytecode": figures, "report": report}, indent=1, sort_keys=True))
            return
        typer.echo(f"{path}")
        width = max(len(k) for k in figures)
        for key, value in figures.items():
            typer.echo(f"  {key:<{width}}  {'-' if value is None else value}")
        if report is not None:
            if (ram := ram_text(report)) is not None:
                typer.echo(f"RAM on the device: {ram}")
            typer.echo(f"report {path.with_suffix('.json').name}")
            rwidth = max((len(k) for k in report), default=0)
            for key in sorted(report):
                value = report[key]
                if isinstance(value, (dict, list)):
                    value = json.dumps(value, sort_keys=True)
                typer.echo(f"  {key:<{rwidth}}  {'-' if value is None else value}")
        if listing:
            typer.echo(disassemble(data), nl=False)
