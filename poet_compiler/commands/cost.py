"""``poetc cost MODEL --device DEV``: one training step with no remat and no paging.

Every node is computed once; time is the sum of compute times and energy is their
dynamic energy plus static power over that time (docs/model.md with no transfers).
"Fits RAM?" compares the device's RAM with the checkpoint-all peak (PyTorch's default:
every tensor freed after its last use) from the same simulator every schedule passes,
the 100% of ``--ram 50%``.
"""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from poet_compiler.devices.cost_model import costs_for, step_cost
from poet_compiler.devices.profile import load_profile
from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.units import format_bytes


def load_any_graph(source: str, batch: int | None = None) -> TrainingGraph:
    """A zoo model / ONNX / poet-graph/1 file through the frontends; plain JSON files without them."""
    try:
        from poet_compiler.frontends import load_graph
    except ImportError:
        from poet_compiler.graph.io import read_graph

        return read_graph(source)
    kwargs: dict[str, Any] = {"batch": batch} if batch is not None else {}
    return load_graph(source, **kwargs)


def step_report(graph: TrainingGraph, device: str) -> dict[str, Any]:
    """The per-step figures of ``graph`` on ``device`` (a profile name or path)."""
    from poet_compiler.solve.budgets import reference

    profile = load_profile(device)
    table = costs_for(graph, profile)
    cost = step_cost(table)
    peak = reference(graph, table).peak_bytes
    flops = sum(n.flops for n in graph.nodes)
    return {
        "model": graph.name,
        "device": profile.name,
        "nodes": graph.n,
        "flops": flops,
        "time_s": cost["time_s"],
        "energy_j": cost["energy_j"],
        "dynamic_j": cost["dynamic_j"],
        "static_j": cost["static_j"],
        "activation_bytes": graph.activation_bytes,
        "checkpoint_all_peak_bytes": peak,
        "ram_bytes": profile.ram_bytes,
        "fits_ram": peak <= profile.ram_bytes,
    }


def register(app: typer.Typer) -> None:
    @app.command("cost")
    def cost(
        model: str = typer.Argument(..., help="zoo model name, poet-graph/1 .json file, or .onnx file"),
        device: list[str] = typer.Option(..., "--device", "-d", help="device profile name or path; repeat for several"),
        batch: int = typer.Option(None, "--batch", help="batch size for zoo models"),
        as_json: bool = typer.Option(False, "--json", help="print JSON on stdout"),
    ) -> None:
        """Cost of one training step (no remat, no paging) on one or more devices."""
        graph = load_any_graph(model, batch)
        rows = [step_report(graph, d) for d in device]
        if as_json:
            typer.echo(json.dumps(rows if len(rows) > 1 else rows[0], indent=2))
            return
        table = Table(
            title=f"{graph.name}: one training step, no remat, no paging ({graph.n} nodes, {rows[0]['flops']:,} FLOP)"
        )
        for col in ("device", "time", "energy", "dynamic", "static", "peak", "fits RAM?"):
            table.add_column(col)
        for r in rows:
            fits = "yes" if r["fits_ram"] else "no (needs remat/paging)"
            table.add_row(str(r["device"]), f"{r['time_s']:.4g} s", f"{r['energy_j']:.4g} J",
                          f"{r['dynamic_j']:.4g} J", f"{r['static_j']:.4g} J",
                          format_bytes(int(r["checkpoint_all_peak_bytes"])), fits)
        Console().print(table)
