"""Graphs and valid Programs (with arena offsets) for the bytecode and runtime tests.

The real linearizer and arena planner live elsewhere; these helpers build programs that
obey the simulator's rules (docs/model.md) on their own: a ResNet-like training graph,
and a Belady-style eviction policy under a RAM budget that drops (recomputes) or pages
out activations, with a first-fit arena allocator for offsets.
"""

from __future__ import annotations

import random

from poet_compiler.graph.ir import Node, TrainingGraph
from poet_compiler.schedule.program import Instruction, Op, Program


def training_graph(forward: list[tuple[str, str, list[int], int]], name: str = "g",
                   workspace: int = 0) -> TrainingGraph:
    """Forward nodes (name, op_class, inputs, bytes) + a loss + a mirrored backward pass.

    Backward node of forward node f reads the gradients of f's consumers and f's saved
    inputs (as autograd does for conv/matmul), and produces a gradient of f's size.
    """
    nodes: list[Node] = []
    for i, (nm, cls, ins, size) in enumerate(forward):
        nodes.append(Node(i, nm, "forward", f"aten.{cls}", cls, tuple(ins), size,  # type: ignore[arg-type]
                          workspace_bytes=workspace if cls == "conv" else 0))
    nf = len(forward)
    nodes.append(Node(nf, "loss", "loss", "aten.nll_loss", "reduction", (nf - 1,), 4))
    consumers: list[list[int]] = [[] for _ in range(nf)]
    for i, (_, _, ins, _) in enumerate(forward):
        for j in ins:
            consumers[j].append(i)
    grad_of: dict[int, int] = {}
    for f in reversed(range(nf)):
        gid = len(nodes)
        ins = [grad_of[c] for c in consumers[f]] or [nf]
        ins += [j for j in forward[f][2]]
        nm, cls, _, size = forward[f]
        nodes.append(Node(gid, f"{nm}_bwd", "backward", f"aten.{cls}_backward", cls,  # type: ignore[arg-type]
                          tuple(sorted(set(ins))), size))
        grad_of[f] = gid
    return TrainingGraph(name=name, nodes=tuple(nodes))


def chain_graph(n_forward: int, size: int = 1024) -> TrainingGraph:
    fwd = [(f"l{i}", "elementwise", [i - 1] if i else [], size * (1 + i % 3)) for i in range(n_forward)]
    return training_graph(fwd, name=f"chain{n_forward}")


def resnet18_cifar_graph() -> TrainingGraph:
    """ResNet-18 for CIFAR-10 at batch 1, fp32: conv/bn/relu per layer, 4 stages x 2 blocks."""
    fwd: list[tuple[str, str, list[int], int]] = []

    def add(name: str, cls: str, ins: list[int], size: int) -> int:
        fwd.append((name, cls, ins, size))
        return len(fwd) - 1

    x = add("conv1", "conv", [], 64 * 32 * 32 * 4)
    x = add("bn1", "norm", [x], 64 * 32 * 32 * 4)
    x = add("relu1", "elementwise", [x], 64 * 32 * 32 * 4)
    ch, hw = 64, 32
    for stage, out_ch in enumerate((64, 128, 256, 512)):
        for block in range(2):
            stride = 2 if (stage > 0 and block == 0) else 1
            o_hw = hw // stride
            size = out_ch * o_hw * o_hw * 4
            p = f"layer{stage + 1}.{block}"
            y = add(f"{p}.conv1", "conv", [x], size)
            y = add(f"{p}.bn1", "norm", [y], size)
            y = add(f"{p}.relu1", "elementwise", [y], size)
            y = add(f"{p}.conv2", "conv", [y], size)
            y = add(f"{p}.bn2", "norm", [y], size)
            s = x
            if stride != 1 or out_ch != ch:
                s = add(f"{p}.shortcut.conv", "conv", [x], size)
                s = add(f"{p}.shortcut.bn", "norm", [s], size)
            y = add(f"{p}.add", "elementwise", [y, s], size)
            x = add(f"{p}.relu2", "elementwise", [y], size)
            ch, hw = out_ch, o_hw
    x = add("avgpool", "reduction", [x], 512 * 4)
    add("fc", "matmul", [x], 10 * 4)
    return training_graph(fwd, name="resnet18_cifar")


class FirstFit:
    """First-fit allocator over a free list: deterministic offsets, high-water arena."""

    def __init__(self, align: int = 16) -> None:
        self.align = align
        self.live: dict[int, tuple[int, int]] = {}
        self.high = 0

    def alloc(self, node: int, size: int) -> int:
        size = -(-size // self.align) * self.align
        at = 0
        for start, end in sorted(self.live.values()):
            if at + size <= start:
                break
            at = max(at, end)
        self.live[node] = (at, at + size)
        self.high = max(self.high, at + size)
        return at

    def free(self, node: int) -> None:
        del self.live[node]


def budget_program(graph: TrainingGraph, budget: int | None = None, *, paging: bool = True,
                   offsets: bool = True, seed: int = 0) -> Program:
    """A valid Program computing every node in order, evicting under ``budget`` bytes.

    Eviction is Belady-like (farthest next use first); an evicted tensor is paged out
    (when ``paging`` and a coin says so) or dropped and recomputed when next needed.
    """
    rng = random.Random(seed)
    n, cons, sizes = graph.n, graph.consumers, [nd.output_bytes for nd in graph.nodes]
    ins_of = [nd.inputs for nd in graph.nodes]
    out: list[Instruction] = []
    ff = FirstFit()
    resident: dict[int, int] = {}
    flash: set[int] = set()

    def emit(op: Op, node: int = -1, off: int | None = None) -> None:
        out.append(Instruction(op, node, off if offsets else None))

    work = [nd.workspace_bytes for nd in graph.nodes]

    def bring(i: int) -> None:
        if i in resident:
            return
        if i in flash:
            resident[i] = ff.alloc(i, sizes[i])
            emit(Op.PAGE_IN, i, resident[i])
            emit(Op.FENCE)
            return
        for j in ins_of[i]:
            bring(j)
        resident[i] = ff.alloc(i, sizes[i] + work[i])   # workspace follows the output
        emit(Op.COMPUTE, i, resident[i])

    def free(i: int) -> None:
        emit(Op.FREE, i, resident.pop(i))
        ff.free(i)

    for t in range(n):
        need = set(ins_of[t])
        for i in sorted(need):
            bring(i)
        resident[t] = ff.alloc(t, sizes[t] + work[t])
        emit(Op.COMPUTE, t, resident[t])
        # Free recompute temporaries and everything without a future reader.
        for i in sorted(resident):
            if i != n - 1 and not any(c > t for c in cons[i]):
                free(i)
        if budget is None:
            continue
        live = sum(sizes[i] for i in resident)
        while live > budget:
            cands = [i for i in resident if i != n - 1 and any(c > t for c in cons[i])]
            if not cands:
                break
            victim = max(cands, key=lambda i: (min(c for c in cons[i] if c > t), i))
            if paging and victim not in flash and rng.random() < 0.5:
                emit(Op.PAGE_OUT, victim, resident[victim])
                emit(Op.FENCE)
                flash.add(victim)
            free(victim)
            live -= sizes[victim]
    arena = ff.high if offsets else None
    return Program(n_nodes=n, instructions=tuple(out), arena_bytes=arena)


def peak_live_bytes(program: Program, graph: TrainingGraph) -> int:
    """Reference peak of docs/model.md: live bytes after every instruction, plus the
    workspace during a COMPUTE (a PAGE_IN holds its buffer from its issue on)."""
    live: set[int] = set()
    peak = 0
    for ins in program:
        if ins.op in (Op.COMPUTE, Op.PAGE_IN):
            live.add(ins.node)
            work = graph.nodes[ins.node].workspace_bytes if ins.op is Op.COMPUTE else 0
            peak = max(peak, sum(graph.nodes[i].output_bytes for i in live) + work)
        elif ins.op is Op.FREE:
            live.discard(ins.node)
    return peak


def checkpoint_all_peak(graph: TrainingGraph) -> int:
    return peak_live_bytes(budget_program(graph, None), graph)


def assemble(*, sizes: list[int], arena: int | None, offsets: list[int] | None, code: bytes,
             n_instr: int, flags: int | None = None, n_nodes: int | None = None,
             tail: bytes = b"", version: int | None = None, magic: bytes = b"POET",
             size_section: bytes | None = None, workspace_section: bytes | None = None,
             arena_raw: bytes | None = None) -> bytes:
    """Hand-assemble a .poet file (valid length and CRC) around a raw instruction stream,
    to build files the encoder would refuse to write. ``size_section`` /
    ``workspace_section`` (and ``arena_raw``, the arena varint) replace the generated
    tables with raw bytes."""
    from poet_compiler.codegen import bytecode as bc

    f = bc.F_SIZES | bc.F_OFFSETS | (bc.F_ARENA if arena is not None else 0)
    f |= bc.F_WORKSPACE if workspace_section is not None else 0
    f = f if flags is None else flags
    n = len(sizes) if n_nodes is None else n_nodes
    rest = bc._uvarint(n) + bc._uvarint(n_instr) + (bc._leb128(arena) if arena is not None else b"")
    rest = rest if arena_raw is None else bc._uvarint(n) + bc._uvarint(n_instr) + arena_raw
    if f & bc.F_SIZES:
        rest += bc._size_section(sizes) if size_section is None else size_section
    rest += workspace_section or b""
    rest += bc._offset_table(offsets or [], bc._palette(sizes)) if f & bc.F_OFFSETS else b""
    rest += code + tail
    total = 10 + len(rest)
    while 10 + len(bc._uvarint(total)) + len(rest) != total:
        total = 10 + len(bc._uvarint(total)) + len(rest)
    body = bc._uvarint(total) + rest
    head = magic + bytes([bc.VERSION if version is None else version, f])
    crc = bc.file_crc(head + b"\0\0\0\0" + body)
    return head + crc.to_bytes(4, "little") + body


def fix_crc(data: bytes) -> bytes:
    """Recompute the CRC field of (possibly corrupted) .poet bytes."""
    from poet_compiler.codegen.bytecode import file_crc

    if len(data) < 10:
        return data
    return data[:6] + file_crc(data).to_bytes(4, "little") + data[10:]


def op(code: int, imm: int) -> bytes:
    """One instruction's first byte (plus escape varint) — see docs/bytecode.md."""
    from poet_compiler.codegen.bytecode import _first_byte

    return _first_byte(code, imm)


def corruption_cases() -> dict[str, tuple[bytes, str]]:
    """One file per error class of docs/bytecode.md, with the code both decoders give.

    Base: three 16-byte nodes, a 48-byte arena, offsets 0/16/32.
    """
    from poet_compiler.codegen import bytecode as bc

    sizes, offs = [16, 16, 16], [0, 16, 32]
    # Allocations: opcode 0 (COMPUTE_SEQ) with placement 0 = explicit, then the slot zz(delta).
    # COMPUTE 0 @0 ; COMPUTE 1 @16 ; FREE 0 ; COMPUTE 2 @32   (opcode 3 = FREE_C)
    good_code = op(0, 0) + b"\x00" + op(0, 0) + b"\x02" + op(3, 1) + op(0, 0) + b"\x02"
    good = assemble(sizes=sizes, arena=48, offsets=offs, code=good_code, n_instr=4)

    def with_code(code: bytes, n_instr: int, **kw) -> bytes:
        args = dict(sizes=sizes, arena=48, offsets=offs)
        args.update(kw)
        # Trailing FENCEs keep n_instr >= the offset-table size (never reached).
        return assemble(code=code + op(7, 0) * 3, n_instr=n_instr + 3, **args)  # type: ignore[arg-type]

    flipped = bytearray(good)
    flipped[-1] ^= 0x40
    # Size palette: one entry whose code (2^28 << 5 | 31) means 2^59, one past version 3's
    # limit; and one whose 10-byte code runs past 64 bits.
    overflow = b"\x01" + bc._leb128((1 << 28) << 5 | 31)
    code65 = b"\x01" + b"\xff" * 9 + b"\x02"
    # Workspace: palette [8], bitmap with bit 3 set although there are only 3 nodes.
    stray = b"\x01\x23\x09\x00"
    return {
        "ok": (good, "POET_OK"),
        "truncated": (good[:-1], "POET_E_TRUNCATED"),
        "short_header": (good[:7], "POET_E_TRUNCATED"),
        "magic": (b"XOET" + good[4:], "POET_E_MAGIC"),
        "version": (good[:4] + bytes([good[4] ^ 3]) + good[5:], "POET_E_VERSION"),
        "flags": (fix_crc(good[:5] + bytes([good[5] | 0x80]) + good[6:]), "POET_E_FLAGS"),
        "length": (good + b"\0", "POET_E_LENGTH"),
        "crc": (bytes(flipped), "POET_E_CRC"),
        "varint": (with_code(op(7, 31)[:1] + b"\x80\x00", 1), "POET_E_MALFORMED"),
        "palette_overflow": (with_code(op(7, 0), 1, size_section=overflow + b"\x00"), "POET_E_MALFORMED"),
        "palette_code_65_bits": (with_code(op(7, 0), 1, size_section=code65 + b"\x00"), "POET_E_MALFORMED"),
        "arena_limit": (with_code(op(7, 0), 1, arena=1 << 59), "POET_E_OFFSET"),
        "arena_varint_65_bits": (with_code(op(7, 0), 1, arena_raw=b"\xb0" + b"\x80" * 8 + b"\x02"),
                                 "POET_E_MALFORMED"),
        "v2_ok": (assemble(sizes=sizes, arena=48, offsets=offs, code=good_code, n_instr=4, version=2), "POET_OK"),
        # Version 2 reads with version 3's limits: an arena past 2^32 (which no version-2
        # writer wrote) is accepted, 2^59 is not.
        "v2_wide_arena": (with_code(op(7, 0), 1, arena=(1 << 33) + 48, version=2), "POET_OK"),
        "v2_arena_limit": (with_code(op(7, 0), 1, arena=1 << 59, version=2), "POET_E_OFFSET"),
        "workspace_bitmap": (with_code(op(7, 0), 1, workspace_section=stray), "POET_E_MALFORMED"),
        "huge_instr_count": (with_code(good_code, 1_000_000), "POET_E_COUNT"),
        "offset_table_count": (assemble(sizes=sizes, arena=48, offsets=offs, code=op(7, 0), n_instr=1),
                               "POET_E_COUNT"),
        "huge_node_count": (assemble(sizes=[16], n_nodes=1 << 21, arena=48, offsets=[0], code=b"", n_instr=0),
                            "POET_E_COUNT"),
        "size_index": (with_code(op(7, 0), 1, size_section=b"\x03\x24\x24\x24\x03"), "POET_E_COUNT"),
        "opcode": (with_code(op(7, 1), 1), "POET_E_OPCODE"),
        "node": (with_code(op(0, 0) + b"\x00" + op(3, 10), 2), "POET_E_NODE"),
        "offset_index": (with_code(op(0, 0) + bytes([20]), 1), "POET_E_OFFSET"),
        "offset_past_arena": (with_code(op(0, 0) + b"\x00", 1, arena=40, offsets=[32]), "POET_E_OFFSET"),
        "place_above_rank": (with_code(op(0, 3), 1), "POET_E_OFFSET"),
        "place_below_rank": (with_code(op(0, 4), 1), "POET_E_OFFSET"),
        "place_below_arena": (with_code(op(0, 2), 1, arena=8, offsets=[]), "POET_E_OFFSET"),
        "state_free": (with_code(op(3, 2), 1), "POET_E_STATE"),
        "state_page_in": (with_code(op(6, 0) + b"\x00\x00", 1), "POET_E_STATE"),
        "overlap": (with_code(op(0, 0) + b"\x00" + op(0, 0) + b"\x02", 2, offsets=[0, 8]), "POET_E_OVERLAP"),
    }


def decoder_verdict(data: bytes) -> str:
    """What the Python decoder says of ``data``: ``POET_OK`` or its error code, which must
    be one of the documented codes (the names the C runtime gives them too)."""
    from poet_compiler.codegen import bytecode as bc

    try:
        bc.decode(data)
    except bc.BytecodeFormatError as exc:
        assert exc.code in {v for k, v in vars(bc).items() if k.startswith("E_")}, exc.code
        return exc.code
    return "POET_OK"
