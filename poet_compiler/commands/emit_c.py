"""``poetc emit-c MODEL --schedule FILE.poet -o DIR``: C sources of one training step.

Writes DIR with the model tables (one kernel call per graph node, parameter initial
values, batch and output arrays, the arena of exactly the planned size), the schedule
bytecode, copies of the C runtime and reference kernels, the device files and a
Makefile (``make run-host``, ``make run-qemu``). A model with an op that has no
reference kernel gets one line naming the op and exit code 2; DIR is then untouched.
"""

from __future__ import annotations

from pathlib import Path

import typer

from poet_compiler.training_options import OPTIMIZER_HELP, TRAIN_HELP


def register(app: typer.Typer) -> None:
    @app.command("emit-c")
    def emit_c_cmd(
        model: str = typer.Argument(..., help="zoo model name or .onnx file the schedule was compiled for"),
        schedule: Path = typer.Option(..., "--schedule", "-s", help="the .poet schedule file (op granularity)"),
        out: Path = typer.Option(..., "--out", "-o", help="output directory (replaced atomically)"),
        optimizer: str = typer.Option(
            None, "--optimizer", help=OPTIMIZER_HELP
        ),
        train: str = typer.Option(None, "--train", help=TRAIN_HELP),
    ) -> None:
        """Generate C for one training step that follows the schedule, on the host or a Cortex-M."""
        from poet_compiler.codegen.emit_c import emit_c

        res = emit_c(model, schedule, out, optimizer=optimizer, train=train)
        typer.echo(f"wrote {res.out_dir}/ ({len(res.files)} files): {res.n_nodes} nodes, arena {res.arena_bytes:,} B, "
                   f"pages out {res.page_out_bytes:,} B / in {res.page_in_bytes:,} B; "
                   f"run with make -C {res.out_dir} run-host (or run-qemu)")
