"""``poetc trace MODEL``: trace a model's training step and write it as poet-graph/1."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from poet_compiler.training_options import OPTIMIZER_HELP, TRAIN_HELP
from poet_compiler.units import format_bytes


def register(app: typer.Typer) -> None:
    @app.command("trace")
    def trace(
        model: str = typer.Argument(..., help="zoo model name, .onnx or poet-graph/1 .json file"),
        output: str = typer.Option(None, "-o", "--output", help="write the graph here (poet-graph/1 JSON)"),
        granularity: str = typer.Option(
            "op", "--granularity", help="op | module | layer | auto (layer, merged to <= 80 nodes)"
        ),
        batch: int = typer.Option(None, "--batch", help="batch size (default: the model's)"),
        loss: str = typer.Option(
            None, "--loss", help="ONNX models: cross_entropy | mse | sum (default: from the output shape)"
        ),
        input_shape: list[str] = typer.Option(
            [], "--input-shape", help="ONNX models: NAME=D0,D1,... for an input with symbolic dims (repeatable)"
        ),
        optimizer: str = typer.Option(
            None, "--optimizer", help=OPTIMIZER_HELP
        ),
        train: str = typer.Option(None, "--train", help=TRAIN_HELP),
    ) -> None:
        """Trace MODEL's joint forward+backward graph; print a summary; optionally write it."""
        from poet_compiler.frontends import load_graph, training_options
        from poet_compiler.graph.io import write_graph

        shapes = None
        if input_shape:
            from poet_compiler.frontends.onnx.shapes import parse_input_shapes

            shapes = parse_input_shapes(input_shape)
        opt, patterns = training_options(optimizer, train)
        graph = load_graph(model, granularity=granularity, batch=batch, input_shapes=shapes, onnx_loss=loss,
                           optimizer=opt, train=patterns)
        if output:
            write_graph(graph, output)
        s = graph.summary()
        table = Table(title=f"{graph.name} ({granularity} granularity)", show_header=False)
        for key in ("nodes", "forward", "loss", "backward", "update", "edges"):
            table.add_row(key, str(s[key]))
        for key in ("activation_bytes", "max_node_bytes", "param_bytes", "input_bytes"):
            table.add_row(key, format_bytes(s[key]))
        table.add_row("flops", f"{s['flops']:,}")
        if output:
            table.add_row("written", output)
        Console().print(table)
