"""``poetc export MODEL -o model.onnx [--opset N] [--training]``: write a model as ONNX.

MODEL is a zoo model name, or an ONNX file: then the file is converted by the ONNX
frontend and exported again — with its symbolic dimensions fixed by ``--input-shape``
and at the requested opset — which is also a full check that poetc can convert it.
The output is checked by onnx.checker and written atomically; on any error nothing is
written.
"""

from __future__ import annotations

import typer

from poet_compiler.units import format_bytes


def register(app: typer.Typer) -> None:
    @app.command("export")
    def export(
        model: str = typer.Argument(..., help="zoo model name (see `poetc models`) or an .onnx file"),
        output: str = typer.Option(..., "-o", "--output", help="ONNX file to write"),
        opset: int = typer.Option(17, "--opset", help="ONNX opset (13..20; 18+ with --dynamo)"),
        training: bool = typer.Option(
            False, "--training", help="export training semantics (BatchNorm on batch statistics, no weight folding)"
        ),
        batch: int | None = typer.Option(None, "--batch", help="batch size of a zoo model (default: its own)"),
        input_shape: list[str] = typer.Option(
            [], "--input-shape", help="NAME=D0,D1,... for an ONNX input with symbolic dims (repeatable)"
        ),
        dynamo: bool = typer.Option(False, "--dynamo", help="use the torch.export-based exporter (eval only)"),
    ) -> None:
        """Export a zoo model (or re-export a converted ONNX file) to an ONNX file."""
        from poet_compiler.frontends.onnx import load_onnx_module
        from poet_compiler.frontends.onnx.export import export_module, export_zoo_model
        from poet_compiler.frontends.onnx.shapes import parse_input_shapes

        if model.lower().endswith(".onnx"):
            converted = load_onnx_module(model, input_shapes=parse_input_shapes(input_shape))
            size = export_module(
                converted.module, converted.example_inputs, output,
                opset=opset, training=training, dynamo=dynamo, name=model,
            )
        else:
            if input_shape:
                typer.echo("note: --input-shape applies to ONNX inputs only; ignored", err=True)
            size = export_zoo_model(model, output, opset=opset, training=training, batch=batch, dynamo=dynamo)
        mode = "training" if training else "eval"
        typer.echo(f"wrote {output}: {model}, opset {opset}, {mode} mode, {format_bytes(size)}")
