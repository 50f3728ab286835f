"""``poetc emit-c MODEL --schedule FILE.poet -o DIR``: C sources of one training step.

Writes DIR with the model tables (one kernel call per graph node, parameter initial
values, batch and output arrays, the arena of exactly the planned size), the schedule
bytecode, copies of the C runtime and reference kernels, the device files and a
Makefile (``make run-host``, ``make run-qemu``). A model with an op that has no
reference kernel gets one line naming the op and exit code 2; DIR is then untouched.

With ``--train-loop`` DIR is a firmware that trains: ``--epochs`` passes over a data set
file (``train.bin``) read through the storage callbacks, each step following the
schedule, the update after it (SGD at ``--lr``/``--momentum``) unless the schedule
carries its optimizer's update nodes, a loss line every ``--log-every`` steps,
held-out accuracy on ``test.bin`` before and after, and the final parameters in
``params_out.bin`` (see the directory's README.md and runtime/c/device/train_main.c).
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
        train_loop: bool = typer.Option(False, "--train-loop",
                                        help="a firmware that trains over data set files, not one step"),
        epochs: int = typer.Option(1, "--epochs", help="--train-loop: passes over train.bin"),
        lr: float = typer.Option(0.05, "--lr", help="--train-loop: SGD learning rate when the schedule has no "
                                 "update nodes"),
        momentum: float = typer.Option(0.0, "--momentum", help="--train-loop: SGD momentum (as --lr)"),
        log_every: int = typer.Option(1, "--log-every", help="--train-loop: print the loss every N steps"),
    ) -> None:
        """Generate C for one training step (or, with --train-loop, a training loop) that follows the schedule."""
        from poet_compiler.codegen.emit_c import TrainLoop, emit_c

        loop = TrainLoop(epochs=epochs, lr=lr, momentum=momentum, log_every=log_every) if train_loop else None
        res = emit_c(model, schedule, out, loop, optimizer=optimizer, train=train)
        typer.echo(f"wrote {res.out_dir}/ ({len(res.files)} files): {res.n_nodes} nodes, arena {res.arena_bytes:,} B, "
                   f"pages out {res.page_out_bytes:,} B / in {res.page_in_bytes:,} B; "
                   f"run with make -C {res.out_dir} run-host (or run-qemu)"
                   + (" next to train.bin and test.bin" if train_loop else ""))
