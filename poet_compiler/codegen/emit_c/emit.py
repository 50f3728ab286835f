"""Orchestration of ``emit-c``: read the schedule, trace the model, render, write."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from poet_compiler.codegen.emit_c import train as loop_tables
from poet_compiler.codegen.emit_c.bundle import DEFAULT_STACK, manifest_bytes, render_static, write_atomically
from poet_compiler.codegen.emit_c.csource import generate, input_bytes
from poet_compiler.codegen.emit_c.errors import EmitError
from poet_compiler.codegen.emit_c.resolve import resolve
from poet_compiler.codegen.emit_c.train import TrainLoop
from poet_compiler.errors import BytecodeError
from poet_compiler.schedule.program import Op, Program

if TYPE_CHECKING:
    from poet_compiler.frontends.torch.traced import TracedModel

NEVER = 0xFFFFFFFF


@dataclass(frozen=True)
class EmitResult:
    out_dir: Path
    n_nodes: int
    arena_bytes: int
    page_out_bytes: int
    page_in_bytes: int
    files: tuple[str, ...]
    stack_bytes: int = DEFAULT_STACK   # the Cortex-M4 build's stack region


def plan_for(program: Program, sizes: list[int]) -> tuple[list[int], int, int]:
    """Page-file slot of every node (packed, in node order, 4-byte aligned; NEVER for
    nodes the program never pages out) and the program's page-out / page-in bytes."""
    paged = sorted({ins.node for ins in program.instructions if ins.op is Op.PAGE_OUT})
    slots = [NEVER] * len(sizes)
    pos = 0
    for i in paged:
        slots[i] = pos
        pos += (sizes[i] + 3) // 4 * 4
    out_b = sum(sizes[ins.node] for ins in program.instructions if ins.op is Op.PAGE_OUT)
    in_b = sum(sizes[ins.node] for ins in program.instructions if ins.op is Op.PAGE_IN)
    return slots, out_b, in_b


def _output_role(k: int, n_grads: int) -> str:
    """Graph outputs are (loss, *gradients, *buffer updates)."""
    return "loss" if k == 0 else ("grad" if k <= n_grads else "update")


def _read_schedule(schedule: Path) -> tuple[bytes, Any]:
    from poet_compiler.codegen.bytecode import decode

    try:
        data = Path(schedule).read_bytes()
    except OSError as exc:
        raise EmitError(f"cannot read {schedule}: {exc.strerror or exc}") from None
    try:
        return data, decode(data)
    except BytecodeError as exc:
        raise EmitError(f"{schedule}: {exc}") from None


def firmware_stack(schedule: Path) -> tuple[int, str]:
    """The Cortex-M4 build's stack region (bytes) and the profile it comes from: the
    reserve of the schedule's device (its sidecar's) when that profile has one, else m4's
    (the firmware is a Cortex-M4 one), else :data:`DEFAULT_STACK`."""
    from poet_compiler.devices.profile import load_profile
    from poet_compiler.errors import ProfileError
    from poet_compiler.schemas import read_sidecar  # here: pydantic models built at import

    device = (read_sidecar(Path(schedule)) or {}).get("device")
    for name in dict.fromkeys([d for d in (device, "m4") if d and d != "explicit"]):
        try:
            reserve = load_profile(name).reserve
        except ProfileError:
            continue
        if reserve is not None:
            return reserve.stack_bytes, name
    return DEFAULT_STACK, "m4"


def load_traced(model: str, schedule: Path, optimizer: str | None = None, train: str | None = None) -> TracedModel:
    """The model traced the way the schedule was compiled (batch, ONNX options, optimizer
    and trained subset from the sidecar ``.json`` when there is one, unless given); op
    granularity, which the kernels need."""
    from poet_compiler.frontends import load_model, training_options
    from poet_compiler.schemas import read_sidecar  # here: pydantic models built at import

    side = read_sidecar(Path(schedule)) or {}
    gran = side.get("granularity") or "op"
    if gran != "op":
        raise EmitError(f"{schedule}: compiled at granularity {gran!r}; emit-c needs an op-level schedule "
                        "(compile with --granularity op)")
    opt, patterns = training_options(optimizer, train, side)
    tm = load_model(model, granularity="op", batch=side.get("batch"),
                    onnx_loss=side.get("onnx_loss"), input_shapes=side.get("input_shapes"),
                    optimizer=opt, train=patterns)
    if tm is None:
        raise EmitError(f"{model}: emit-c needs a zoo model or an ONNX file (a graph file has no weights)")
    return tm


def emit_c(model: str, schedule: Path, out_dir: Path, train_loop: TrainLoop | None = None, *,
           optimizer: str | None = None, train: str | None = None, stack_bytes: int | None = None) -> EmitResult:
    """Write the C sources of one training step of ``model`` following ``schedule`` or, with
    ``train_loop``, of a firmware that trains it over data set files (:mod:`.train`)
    (``optimizer``/``train``: as compiled, by default from the sidecar; ``stack_bytes``: the
    Cortex-M4 build's stack region, by default the profile's, :func:`firmware_stack`)."""
    if Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise EmitError(f"{out_dir} exists and is not a directory")
    data, decoded = _read_schedule(schedule)
    program = decoded.program
    tm = load_traced(model, schedule, optimizer, train)
    tm.require_weights("emit-c")
    graph = tm.graph
    if program.n_nodes != graph.n:
        raise EmitError(f"{schedule}: the schedule is for a {program.n_nodes}-node graph but {model} has {graph.n}")
    sizes = [n.output_bytes for n in graph.nodes]
    if decoded.sizes is not None and list(decoded.sizes) != sizes:
        bad = next(i for i, (a, b) in enumerate(zip(decoded.sizes, sizes)) if a != b)
        raise EmitError(f"{schedule}: node {bad} has {decoded.sizes[bad]} B in the schedule but {sizes[bad]} B "
                        f"in {model}: the schedule is for another graph")
    if program.arena_bytes is None or not decoded.flags & 0x04:
        raise EmitError(f"{schedule}: not executable (no arena plan); compile it with poetc compile")
    misaligned = next((ins for ins in program.instructions if ins.offset is not None and ins.offset % 4), None)
    if misaligned is not None:
        raise EmitError(f"{schedule}: {misaligned} is not 4-byte aligned; the float32 kernels need aligned buffers")

    res = resolve(tm)
    slots, out_b, in_b = plan_for(program, sizes)
    train_tables = loop_tables.tables(tm, res) if train_loop is not None else None
    src = generate(tm, res, data, arena_bytes=program.arena_bytes, flash_slots=slots, model_name=graph.name)
    stack, stack_device = firmware_stack(schedule) if stack_bytes is None else (stack_bytes, "m4")
    files = render_static(graph.name, Path(schedule).name, program.arena_bytes, train=train_loop is not None,
                          stack=stack, device=stack_device)
    files.update({"model.h": src.model_h.encode(), "model.c": src.model_c.encode(),
                  "schedule.c": src.schedule_c.encode(),
                  "input.bin": input_bytes(tm, res, tm.example_inputs, tm.target)})
    if train_loop is not None and train_tables is not None:
        files.update(loop_tables.sources(train_tables, train_loop))
    csize = {"float": 4, "int32_t": 4, "int64_t": 8}
    manifest = {
        "format": "poet-emit-c/1",
        "model": model,
        "graph": graph.name,
        "schedule": Path(schedule).name,
        "n_nodes": graph.n,
        "arena_bytes": program.arena_bytes,
        "stack_bytes": stack,
        "n_instructions": len(program.instructions),
        "page_out_bytes": out_b,
        "page_in_bytes": in_b,
        "n_compute": program.count(Op.COMPUTE),
        "inputs": [{"name": a.name, "ctype": a.ctype, "shape": list(a.shape), "bytes": a.numel * csize[a.ctype]}
                   for a in res.arrays if a.role in ("input", "target")],
        "outputs": [{"name": a.name, "fx": a.fx, "role": _output_role(k, len(tm.grad_names)) if a.role == "output"
                     else a.role, "ctype": a.ctype, "shape": list(a.shape), "bytes": a.numel * csize[a.ctype]}
                    for k, a in enumerate(res.outputs)],
        "nodes": [{"id": n.id, "name": n.name, "op": n.op, "op_class": n.op_class, "kind": n.kind,
                   "flops": n.flops, "output_bytes": n.output_bytes} for n in graph.nodes],
    }
    if train_loop is not None and train_tables is not None:
        manifest["train"] = loop_tables.manifest_part(train_tables, train_loop)
    files["manifest.json"] = manifest_bytes(manifest)
    write_atomically(Path(out_dir), files)
    return EmitResult(Path(out_dir), graph.n, program.arena_bytes, out_b, in_b, tuple(sorted(files)), stack)
