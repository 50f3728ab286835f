"""``poetc profile -o profiles/host.json``: measure this machine and write its device profile."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from poet_compiler.commands.devices import summary_row
from poet_compiler.devices.profile import write_profile


def register(app: typer.Typer) -> None:
    @app.command("profile")
    def profile(
        output: Path = typer.Option(..., "-o", "--output", help="profile file to write (e.g. profiles/host.json)"),
        model: str = typer.Option(
            None, "--model", help="also time every op signature of this zoo model (per-op table)"
        ),
        power_w: float = typer.Option(
            None, "--power-w", help="power drawn above idle while busy, W (needed when RAPL is not readable)"
        ),
        idle_w: float = typer.Option(0.0, "--idle-w", help="static (idle) power, W, used with --power-w"),
        page_file: Path = typer.Option(
            None,
            "--page-file",
            help="file on the local disk to page to (default: a temporary file in the current directory)",
        ),
        name: str = typer.Option("host", "--name", help="profile name"),
        quick: bool = typer.Option(False, "--quick", help="fewer sizes and shorter runs (a few seconds)"),
    ) -> None:
        """Measure compute, memory, paging and energy figures of this machine and write a profile."""
        from poet_compiler.devices.profiler import profile_host

        p = profile_host(name=name, quick=quick, power_w=power_w, idle_w=idle_w, page_file=page_file, model=model)
        write_profile(p, output)
        cols = ("name", "RAM", "conv roof", "conv J/FLOP", "mem BW", "page-in", "page-out", "static", "DMA")
        Console().print(f"wrote {output}  (energy from {p.measurement.energy_from if p.measurement else '?'})")
        for col, val in zip(cols, summary_row(p)):
            Console().print(f"  {col:12s} {val}")
