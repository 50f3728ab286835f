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
        """List the zoo: parameters, op/module-level node counts, default batch."""
        import models

        from poet_compiler.frontends import trace_zoo
        from poet_compiler.graph.coarsen import coarsen_by_module

        table = Table(title="poetc model zoo")
        for col in ("name", "params", "batch", "op nodes (fwd+bwd)", "module nodes (fwd+bwd)", "description"):
            table.add_column(col)
        for name in models.names():
            spec = models.get(name)
            module = spec.build()
            n_params = sum(p.numel() for p in module.parameters())
            op_s = mod_s = "-"
            if trace:
                graph = trace_zoo(name).graph
                coarse = coarsen_by_module(graph)[0]
                op_s = f"{graph.n} ({graph.count('forward')}+{graph.count('backward')})"
                mod_s = f"{coarse.n} ({coarse.count('forward')}+{coarse.count('backward')})"
            table.add_row(name, f"{n_params:,}", str(spec.default_batch), op_s, mod_s, spec.description)
        Console(width=200).print(table)
