"""``poetc check GRAPH.json``: validate a poet-graph/1 file and print its summary."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from poet_compiler.graph.io import read_graph
from poet_compiler.units import format_bytes


def register(app: typer.Typer) -> None:
    @app.command("check")
    def check(path: str = typer.Argument(..., help="a poet-graph/1 JSON file")) -> None:
        """Validate a poet-graph/1 file and print its summary."""
        graph = read_graph(path)
        s = graph.summary()
        table = Table(title=f"{path}: valid poet-graph/1", show_header=False)
        for k, v in s.items():
            table.add_row(k, format_bytes(v) if k.endswith("bytes") else str(v))
        Console().print(table)
