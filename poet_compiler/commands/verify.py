"""``poetc verify MODEL --schedule FILE.poet``: run the schedule on the real model.

Decodes the program from the ``.poet`` file, re-traces MODEL with the granularity and
batch recorded in the sidecar report ``FILE.json`` (else ``--granularity``/``--batch``),
runs one training step with plain autograd and one with the schedule (paging to a real
page file), and prints the gradient difference (with an optimizer in the step: ``--steps``
steps of each, plain autograd followed by torch.optim's single-tensor step, and the
difference of the parameters and optimizer state after them), the measured peak of live activation
bytes against the simulator's prediction, the arena and the budget, and the page file's
traffic against the schedule's paging volume. Exit code 1 when the gradients, the loss or
the buffer updates are not bitwise identical, the measured peak exceeds the budget or
the page file's traffic differs from the schedule's; 2 on bad input.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from poet_compiler.errors import BytecodeError, PoetError
from poet_compiler.reporting import read_sidecar
from poet_compiler.training_options import OPTIMIZER_HELP, TRAIN_HELP
from poet_compiler.units import format_bytes

if TYPE_CHECKING:
    from poet_compiler.codegen.bytecode.format import DecodedProgram
    from poet_compiler.graph.ir import TrainingGraph
    from poet_compiler.torch_exec.verification import Verification


def _against(res: Verification) -> str:
    """Which step the gradients were checked against (docs/pytorch.md, "Random ops")."""
    if res.reference == "autograd":
        return "against eager autograd"
    return (f"against the traced step run whole, whose random draws differ from eager autograd's "
            f"(max |diff| {res.reference_gap:.3g})")


def _b(n: int | None) -> str:
    return "-" if n is None else f"{n:,} B ({format_bytes(n)})"


def _shared(expected: int, scheduled: int) -> str:
    """Where storage the graph counts twice is moved once, say what the file must see."""
    return "" if expected == scheduled else f" = {_b(expected)} of distinct storage"


def counted_beside_arena(side: dict, graph_fixed_bytes: int) -> int:
    """What the sidecar's ``ram_budget_bytes`` counts beside the arena: its ``ram_split``
    less the arena (nothing with ``activations_only``); a report written before the split
    counted the graph's fixed bytes where it says ``count_fixed``."""
    split = side.get("ram_split")
    if split is not None:
        beside = sum(v or 0 for k, v in split.items() if k not in ("arena", "total"))
        return 0 if side.get("activations_only") else beside
    return graph_fixed_bytes if side.get("count_fixed") else 0


def register(app: typer.Typer) -> None:
    @app.command("verify")
    def verify_cmd(
        model: str = typer.Argument(..., help="zoo model name the schedule was compiled for"),
        schedule: Path = typer.Option(..., "--schedule", "-s", help="the .poet schedule file"),
        page_file: Path = typer.Option(None, "--page-file", help="page file path (default: a temporary file)"),
        granularity: str = typer.Option(None, "--granularity", help="op | module (default: from the sidecar, else op)"),
        batch: int = typer.Option(None, "--batch", help="batch size (default: from the sidecar, else the model's)"),
        device: str = typer.Option(
            None, "--device", "-d", help="device profile for the simulator (default: sidecar's, else m4)"
        ),
        as_json: bool = typer.Option(False, "--json", help="print the figures as one JSON object"),
        optimizer: str = typer.Option(None, "--optimizer", help=OPTIMIZER_HELP + " (default: the sidecar's)"),
        train: str = typer.Option(None, "--train", help=TRAIN_HELP + " (default: the sidecar's)"),
        steps: int = typer.Option(
            3, "--steps", min=1, help="with an optimizer: training steps compared with torch.optim (default 3)"
        ),
    ) -> None:
        """Check a schedule on the real model: same gradients as autograd, peak within budget."""
        from poet_compiler.api import load_costs
        from poet_compiler.frontends import load_model, training_options
        from poet_compiler.torch_exec.verification import verify

        decoded = _decode(schedule)
        side = read_sidecar(schedule) or {}
        gran = granularity or side.get("granularity") or "op"
        bat = batch if batch is not None else side.get("batch")
        dev = device or side.get("device") or "m4"
        if dev == "explicit":
            dev = "m4"  # only the peak is used; costs do not change it
        # The ONNX frontend's options travel in the sidecar too, so a model compiled with
        # --loss/--input-shape is re-traced into the same graph.
        opt, patterns = training_options(optimizer, train, side)
        traced = load_model(model, granularity=gran, batch=bat,
                            onnx_loss=side.get("onnx_loss"), input_shapes=side.get("input_shapes"),
                            optimizer=opt, train=patterns)
        if traced is None:
            raise PoetError(f"{model}: verify needs a zoo model (a graph file has no weights to run)")
        graph = traced.graph
        label = f"{model} ({gran}, batch {bat if bat is not None else 'default'})"
        _check_graph(schedule, decoded, graph, model, label)
        res = verify(traced, decoded.program, load_costs(graph, dev), ram_budget_bytes=side.get("ram_budget_bytes"),
                     fixed_bytes=counted_beside_arena(side, graph.fixed_bytes), page_file=page_file, steps=steps)
        if as_json:
            typer.echo(json.dumps(res.report(), indent=1, sort_keys=True))
        else:
            rows = _rows(res, label)
            width = max(len(k) for k, _ in rows)
            for key, value in rows:
                typer.echo(f"  {key:<{width}}  {value}")
            typer.echo("OK" if res.ok else "FAIL: " + "; ".join(res.failures))
        if not res.ok:
            raise typer.Exit(1)


def _decode(schedule: Path) -> DecodedProgram:
    """The program (and node sizes) of the ``.poet`` file, or one line why not."""
    from poet_compiler.codegen.bytecode import decode

    try:
        data = schedule.read_bytes()
    except OSError as exc:
        raise BytecodeError(f"cannot read {schedule}: {exc.strerror or exc}") from None
    try:
        return decode(data)
    except BytecodeError as exc:
        raise BytecodeError(f"{schedule}: {exc}") from None


def _check_graph(schedule: Path, decoded: DecodedProgram, graph: TrainingGraph, model: str, label: str) -> None:
    """The schedule is for ``graph`` (of ``model``; ``label``: as traced): its node count,
    and each node's output bytes where the file records them."""
    program = decoded.program
    if program.n_nodes != graph.n:
        raise PoetError(f"{schedule}: the schedule is for a {program.n_nodes}-node graph but {label} has "
                        f"{graph.n} nodes")
    if decoded.sizes is not None:
        bad = next((i for i, (a, b) in enumerate(zip(decoded.sizes, graph.nodes)) if a != b.output_bytes), None)
        if bad is not None:
            raise PoetError(f"{schedule}: node {bad} has {decoded.sizes[bad]} output bytes in the schedule but "
                            f"{graph.nodes[bad].output_bytes} in {model}: the schedule is for another graph")


def _rows(res: Verification, label: str) -> list[tuple[str, str]]:
    """The figures as the table prints them, ``(key, value)`` each."""
    sim = res.simulated_peak_bytes
    ratio = res.measured_peak_bytes / sim if sim else float("nan")
    return [
        ("model", f"{label}: {res.n_nodes} nodes, {res.n_instructions} instructions"),
        (
            "gradients",
            f"max |diff| = {res.max_abs_grad_diff:.3g} over {res.n_grads} tensors "
            f"({'bitwise identical' if res.grads_bitwise else 'DIFFERENT'}) {_against(res)}",
        ) if res.optimizer is None else (
            f"after {res.steps} steps",
            f"{res.optimizer} vs torch.optim (foreach=False): parameters max |diff| = "
            f"{res.max_abs_param_diff:.3g} over {res.n_params} tensors "
            f"({'bitwise identical' if res.params_bitwise else 'DIFFERENT'}), optimizer state max |diff| = "
            f"{res.max_abs_state_diff:.3g} ({'bitwise identical' if res.state_bitwise else 'DIFFERENT'})",
        ),
        *([(
            "random ops",
            f"{res.n_random}, their {res.n_replays} recomputation(s) replayed from stashed generator states",
        )] if res.n_random else []),
        (
            "loss, buffers",
            f"loss {'identical' if res.loss_bitwise else 'DIFFERENT'}, "
            f"buffer updates {'identical' if res.buffers_bitwise else 'DIFFERENT'}",
        ),
        ("measured peak", _b(res.measured_peak_bytes) + " live activations, by storage"),
        ("simulated peak", f"{_b(sim)} (measured/simulated {ratio:.4f})"),
        ("arena", _b(res.arena_bytes)),
        (
            "budget",
            _b(res.ram_budget_bytes)
            + (f" (incl. {res.fixed_bytes_counted:,} B beside the arena)" if res.fixed_bytes_counted else ""),
        ),
        (
            "page file written",
            f"{_b(res.page_out_bytes)}; schedule pages out {_b(res.schedule_page_out_bytes)}"
            + _shared(res.expected_page_out_bytes, res.schedule_page_out_bytes),
        ),
        (
            "page file read",
            f"{_b(res.page_in_bytes)}; schedule pages in {_b(res.schedule_page_in_bytes)}"
            + _shared(res.expected_page_in_bytes, res.schedule_page_in_bytes),
        ),
        (
            "wall time",
            f"scheduled {res.scheduled_wall_s * 1e3:.1f} ms, autograd {res.autograd_wall_s * 1e3:.1f} ms",
        ),
    ]
