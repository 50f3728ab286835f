"""``poetc models``: the model zoo with parameter counts and graph sizes."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table


def register(app: typer.Typer) -> None:
    @app.command("models")
    def models_cmd(
        trace: bool = typer.Option(True, "--trace/--no-trace", help="trace each model to count nodes"),
    ) -> None:
        """List the zoo: parameters, op/module/layer-level node counts, default batch."""
        import models
        from poet_compiler.frontends import trace_zoo
        from poet_compiler.graph.coarsen import coarsen_to

        table = Table(title="poetc model zoo")
        for col in ("name", "params", "batch", "op nodes (fwd+bwd)", "module nodes (fwd+bwd)",
                    "layer nodes (fwd+bwd)", "description"):
            table.add_column(col)
        for name in models.names():
            spec = models.get(name)
            module = spec.build()
            n_params = sum(p.numel() for p in module.parameters())
            counts = ["-", "-", "-"]
            if trace:
                graph = trace_zoo(name).graph
                levels = (graph, coarsen_to(graph, "module")[0], coarsen_to(graph, "layer")[0])
                counts = [f"{g.n} ({g.count('forward')}+{g.count('backward')})" for g in levels]
            table.add_row(name, f"{n_params:,}", str(spec.default_batch), *counts, spec.description)
        Console(width=200).print(table)
