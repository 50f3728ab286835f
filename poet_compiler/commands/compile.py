"""``poetc compile MODEL --device DEV --ram SIZE``: the product's main verb."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from poet_compiler.errors import PoetError
from poet_compiler.reporting import SUMMARY_KEYS, fmt, ram_text, time_split
from poet_compiler.training_options import OPTIMIZER_HELP, TRAIN_HELP


def print_summary(report: dict, console: Console | None = None) -> None:
    table = Table(title=f"poetc: {report['model']} on {report['device']}", show_header=False)
    for key in SUMMARY_KEYS:
        if key in report and key not in ("message", "effort_note"):  # each printed on its own line
            table.add_row(key, fmt(key, report[key]))
    if (ram := ram_text(report)) is not None:
        table.add_row("RAM on the device", ram)   # what --ram covers (solve/ram.py)
    if (split := time_split(report)) is not None:
        table.add_row("time", split)     # the whole command, and which stage used it
    (console or Console()).print(table)


# The options of ``poetc compile``, one type each (typer reads the option from the annotation).
Model = Annotated[str, typer.Argument(help="zoo model name, poet-graph/1 .json file, or .onnx file")]
Device = Annotated[str | None, typer.Option("--device", "-d", help="device profile name or path (e.g. m4)")]
Ram = Annotated[str | None, typer.Option(
    "--ram",
    help="RAM the training step gets on the device (arena, parameters, gradients, optimizer state, batch, "
         "outputs, runtime reserve): 256k, 256KiB, 1.5M, bytes, or 50% (the fixed bytes plus half of "
         "checkpoint-all's activation peak); default: the device's RAM")]
Deadline = Annotated[str | None, typer.Option(
    "--deadline", help="deadline: 120ms, 2s, or 1.5x the compute-only time")]
Mode = Annotated[str, typer.Option("--mode", help="poet | remat | paging | none")]
Strategy = Annotated[str, typer.Option("--strategy", help="optimal (MILP) or a baseline name")]
Solver = Annotated[str, typer.Option(
    "--solver", help="auto (CP-SAT for the optimal strategy) | cpsat | highs | gurobi")]
Formulation = Annotated[str, typer.Option("--formulation", help="fast | dense")]
TimeLimit = Annotated[float | None, typer.Option(
    "--time-limit",
    help="seconds for the whole command (start-up and tracing included): without --effort it sets "
         "the effort, 0.3 deterministic s per second, so a longer limit searches longer; default: "
         "the 'default' effort under a 600 s cap. A solve the wall cap stops reports stopped_by=time "
         "and may differ from run to run")]
Effort = Annotated[str | None, typer.Option(
    "--effort",
    help="work the optimal solve may spend: quick | default | thorough (5 / 30 / 120), or deterministic "
         "seconds (default: 0.3 per second of --time-limit, else 'default'); same input and flags, same bytes")]
Threads = Annotated[int, typer.Option("--threads", help="solver threads")]
MemoryLimit = Annotated[str | None, typer.Option(
    "--memory-limit",
    help="poetc's memory (itself and its solver processes) at which a solver is stopped, "
         "keeping its latest solution: 3.6G (default), 1.5G, or none")]
Gap = Annotated[float | None, typer.Option(
    "--gap", help="stop once proven within this relative gap of optimal (default 0.001 above 40 nodes, 0 below)")]
Output = Annotated[Path | None, typer.Option(
    "-o", "--output", help="schedule file (.poet); report goes beside it (.json)")]
Strip = Annotated[bool, typer.Option("--strip", help="omit the node table from the bytecode")]
Granularity = Annotated[str, typer.Option(
    "--granularity", help="op | module | layer | auto (coarser graphs solve faster)")]
Batch = Annotated[int | None, typer.Option("--batch", help="batch size for zoo models")]
Loss = Annotated[str | None, typer.Option(
    "--loss", help="ONNX models: cross_entropy | mse | sum (default: from the output shape)")]
InputShape = Annotated[list[str], typer.Option(
    "--input-shape", help="ONNX models: NAME=D0,D1,... for an input with symbolic dims (repeatable)")]
ActivationsOnly = Annotated[bool, typer.Option(
    "--activations-only",
    help="--ram covers the arena alone (POET's convention, to compare with the paper and its peers)")]
Optimizer = Annotated[str | None, typer.Option("--optimizer", help=OPTIMIZER_HELP)]
Train = Annotated[str | None, typer.Option("--train", help=TRAIN_HELP)]
AsJson = Annotated[bool, typer.Option("--json", help="print the report as JSON on stdout")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="no progress line")]
Report = Annotated[Path | None, typer.Option(
    "--report", help="also write a self-contained report (.html or .md)")]


def compile_cmd(model: Model, device: Device = None, ram: Ram = None, deadline: Deadline = None,
                mode: Mode = "poet", strategy: Strategy = "optimal", solver: Solver = "auto",
                formulation: Formulation = "fast", time_limit: TimeLimit = None, effort: Effort = None,
                threads: Threads = 2, memory_limit: MemoryLimit = None, gap: Gap = None, output: Output = None,
                strip: Strip = False, granularity: Granularity = "op", batch: Batch = None, loss: Loss = None,
                input_shape: InputShape = [],  # noqa: B006 - typer's empty list, never mutated
                activations_only: ActivationsOnly = False, optimizer: Optimizer = None, train: Train = None,
                as_json: AsJson = False, quiet: Quiet = False, report: Report = None) -> None:
    """Find the least-energy schedule within the RAM budget and deadline, and write it."""
    from poet_compiler.api import compile as compile_model
    from poet_compiler.command_start import command_started

    out = schedule_path(model, output)
    shapes = None
    if input_shape:
        from poet_compiler.frontends.onnx.shapes import parse_input_shapes

        shapes = parse_input_shapes(input_shape)
    c = compile_model(
        model, device, ram, deadline, mode=mode, strategy=strategy, solver=solver,
        formulation=formulation, time_limit_s=time_limit, threads=threads, gap=gap, effort=effort,
        activations_only=activations_only, granularity=granularity, batch=batch,
        progress=not (quiet or as_json), onnx_loss=loss, input_shapes=shapes, memory_limit=memory_limit,
        started=command_started(),   # the command's wall time is what --time-limit bounds
        optimizer=optimizer, train=train,
    )
    rep = c.report()
    if c.result.ok:
        path, sidecar = c.save(out, strip=strip)
        rep["schedule_file"] = str(path)
        if report is not None:
            from poet_compiler.reporting import write_report

            write_report(c, report)
    if as_json:
        typer.echo(json.dumps(rep, indent=1, sort_keys=True))
    else:
        print_summary(rep)
        if c.result.ok:
            typer.echo(f"wrote {rep['schedule_file']} and {Path(rep['schedule_file']).with_suffix('.json')}")
        if rep.get("effort_note") and not quiet:
            typer.echo(rep["effort_note"], err=True)
    if not c.result.ok:
        msg = c.result.message
        typer.echo(msg if msg.startswith(c.result.status) else f"{c.result.status}: {msg}", err=True)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("compile")(compile_cmd)


def schedule_path(model: str, output: Path | None) -> Path:
    """Where the schedule goes (its report beside it, as ``.json``), checked before any
    work: neither may overwrite the input. Without ``-o``: ``<model stem>.poet`` in the
    current folder, or ``<stem>.schedule.poet`` where the report would land on the input
    graph (``poetc compile net.json`` run beside ``net.json``)."""
    source = Path(model).resolve() if Path(model).is_file() else None

    def clashes(out: Path) -> bool:
        return source is not None and source in (out.resolve(), out.with_suffix(".json").resolve())

    if output is not None:
        if clashes(output):
            raise PoetError(f"-o {output}: the schedule or its report ({output.with_suffix('.json')}) would "
                            f"overwrite the input {model}; choose another name")
        return output
    out = Path(f"{Path(model).stem}.poet")
    return Path(f"{Path(model).stem}.schedule.poet") if clashes(out) else out
