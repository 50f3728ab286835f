"""``poetc devices [NAME]``: list the shipped device profiles, or show one in full with sources."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from poet_compiler.devices.profile import (
    DeviceProfile,
    leaves,
    list_profiles,
    load_profile,
)
from poet_compiler.units import format_bytes


def _si(value: float, unit: str) -> str:
    """Engineering notation: 6.37e6, 'FLOP/s' -> '6.37 MFLOP/s'."""
    for factor, prefix in (
        (1e12, "T"),
        (1e9, "G"),
        (1e6, "M"),
        (1e3, "k"),
        (1.0, ""),
        (1e-3, "m"),
        (1e-6, "u"),
        (1e-9, "n"),
        (1e-12, "p"),
    ):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def format_value(path: str, value: object) -> str:
    """Human form of one profile figure, by the unit in its field name."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    leaf = path.rsplit(".", 1)[-1]
    if leaf.endswith("_bytes"):
        return f"{format_bytes(value)} ({int(value):,} B)" if value >= 1024 else f"{int(value)} B"
    for suffix, unit in (("_bps", "B/s"), ("_flops", "FLOP/s"), ("_j_per_flop", "J/FLOP"), ("_j_per_byte", "J/B"),
                         ("_hz", "Hz"), ("_s", "s"), ("_j", "J"), ("_w", "W")):
        if leaf.endswith(suffix):
            return _si(float(value), unit) if value else f"0 {unit}"
    return str(value)


def summary_row(p: DeviceProfile) -> list[str]:
    return [
        p.name,
        format_bytes(p.ram_bytes),
        _si(p.compute.conv.throughput_flops, "FLOP/s"),
        _si(p.compute.conv.energy_j_per_flop, "J"),
        _si(p.memory.bandwidth_bps, "B/s"),
        f"{_si(p.page_in.latency_s, 's')} + {_si(p.page_in.bandwidth_bps, 'B/s')}",
        f"{_si(p.page_out.latency_s, 's')} + {_si(p.page_out.bandwidth_bps, 'B/s')}",
        _si(p.static_power_w, "W") if p.static_power_w else "0 W",
        "yes" if p.dma else "no",
    ]


def register(app: typer.Typer) -> None:
    @app.command("devices")
    def devices(
        name: str = typer.Argument(None, help="a profile name (e.g. m4) or a profile .json path; omit to list all"),
    ) -> None:
        """List device profiles with key figures, or show one profile in full with its sources."""
        console = Console()
        if name is None:
            table = Table(title="device profiles (poetc devices NAME for details)")
            names = list_profiles()
            table.add_column("name", min_width=max(len(n) for n in names), no_wrap=True)  # never cut a name
            for col in ("RAM", "conv roof", "conv J/FLOP", "mem BW", "page-in", "page-out", "static", "DMA"):
                table.add_column(col)
            for n in names:
                table.add_row(*summary_row(load_profile(n)))
            console.print(table)
            return
        p = load_profile(name)
        console.print(f"[bold]{p.name}[/bold]: {p.description}")
        table = Table(show_header=True)
        table.add_column("field")
        table.add_column("value")
        table.add_column("source")
        data = p.model_dump(exclude={"format", "name", "description", "sources", "op_table"}, exclude_none=True)
        for path, value in leaves(data):
            c = p.citation(path)
            table.add_row(path, format_value(path, value), f"{c.kind}: {c.ref}" if c else "")
        if p.op_table:
            c = p.citation("op_table")
            table.add_row("op_table", f"{len(p.op_table)} measured op signatures", f"{c.kind}: {c.ref}" if c else "")
        console.print(table)
