"""The encoder: a validated Program (and its graph) to .poet bytes.

Two walks over the Program, each a :class:`ProgramInterpreter`: :class:`_Validator`
applies the decoder's rules and picks the placement codes (the offset table holds only
the offsets no code reaches, so it is known only after the whole walk), then
:class:`_Emitter` writes the instruction stream.
"""

from __future__ import annotations

from typing import Any

from poet_compiler.codegen.bytecode.format import (
    C_COMPUTE_NEW,
    C_COMPUTE_SEQ,
    C_COMPUTE_X,
    C_FENCE,
    C_FREE_C,
    C_FREE_F,
    C_PAGE_IN,
    C_PAGE_OUT,
    E_COUNT,
    E_OFFSET,
    E_OPCODE,
    E_STATE,
    E_VERSION,
    F_ARENA,
    F_NODE_TABLE,
    F_OFFSETS,
    F_SIZES,
    F_WORKSPACE,
    LIMITS,
    MAGIC,
    MAX_NODES,
    MOVE_VERSION,
    PREFIX_BYTES,
    READ_VERSIONS,
    VERSION,
    BytecodeFormatError,
    file_crc,
)
from poet_compiler.codegen.bytecode.machine import _Machine
from poet_compiler.codegen.bytecode.palette import _palette, _size_section, _workspace_section
from poet_compiler.codegen.bytecode.varint import _first_byte, _leb128, _uvarint, _zz
from poet_compiler.graph.ir import KINDS, OP_CLASSES, TrainingGraph
from poet_compiler.schedule.interpreter import ProgramInterpreter
from poet_compiler.schedule.program import Instruction, Op, Program


def _offsets_mode(program: Program) -> bool:
    """True when every non-FENCE instruction has an offset, False when none has."""
    have = [ins.offset is not None for ins in program if ins.op is not Op.FENCE]
    if not any(have):
        return False
    if not all(have):
        k = next(i for i, ins in enumerate(program) if ins.op is not Op.FENCE and ins.offset is None)
        raise BytecodeFormatError(
            E_OFFSET, f"cannot encode: instruction {k} ({program.instructions[k]}) has no arena offset but others do")
    for k, ins in enumerate(program):
        if ins.op is Op.FENCE and (ins.offset is not None or ins.node != -1):
            raise BytecodeFormatError(E_OPCODE, f"cannot encode: instruction {k}: a FENCE carries no node or offset")
    return True


def encode(program: Program, graph: TrainingGraph | None = None, *, strip: bool = False,
           report: dict[str, Any] | None = None, version: int | None = None) -> bytes:
    """Encode ``program`` as .poet bytes (docs/bytecode.md). Deterministic.

    ``graph`` supplies output/workspace sizes (needed by the device runtime) and the node
    table; ``strip=True`` leaves the node table out. If ``report`` is a dict it receives
    the size figures: bytes per section, total, bytes per instruction. ``version=None``
    writes the lowest version that holds the program: 3 without a MOVE (the same bytes as
    before version 4 existed), 4 with one. ``version=2`` writes the previous format
    (same layout, offsets and arena below 1 GiB) for runtimes that predate version 3;
    versions 2, 3 and 4 of the same MOVE-free program differ only in the version byte
    and the CRC.
    """
    version = _version(program, version)
    lim = LIMITS[version]
    n = program.n_nodes
    _check_counts(program, graph, version)
    with_offsets = _offsets_mode(program)
    _check_node_sizes(graph, version)
    sizes = tuple(nd.output_bytes for nd in graph.nodes) if graph is not None else None
    workspace = tuple(nd.workspace_bytes for nd in graph.nodes) if graph is not None else None
    flags = 0
    if sizes is not None:
        flags |= F_SIZES
        if any(workspace or ()):
            flags |= F_WORKSPACE
    if with_offsets:
        flags |= F_OFFSETS
    if program.arena_bytes is not None:
        flags |= F_ARENA
    if graph is not None and not strip:
        flags |= F_NODE_TABLE

    # Validate the program with the decoder's own rules, so that what we write decodes.
    machine = _Machine(n, sizes, program.arena_bytes, with_offsets, workspace)
    places = _Validator(program, machine, with_offsets, lim.max_bytes).run()
    # Only offsets that no placement code reaches go to the offset table.
    offsets_pal = sorted({off for k, v in places.items() if v is None and (off := program.instructions[k].offset)
                          is not None})
    off_index = {v: k for k, v in enumerate(offsets_pal)}
    code = _Emitter(program, places, off_index, with_offsets).run()

    sec_sizes = _size_section(list(sizes)) if sizes is not None else b""
    sec_ws = _workspace_section(list(workspace)) if flags & F_WORKSPACE else b""  # type: ignore[arg-type]
    size_pal = _palette(list(sizes)) if sizes is not None else []
    sec_off = _offset_table(offsets_pal, size_pal) if with_offsets else b""
    sec_table = _node_table(graph) if flags & F_NODE_TABLE else b""  # type: ignore[arg-type]
    counts = _uvarint(n) + _uvarint(len(program))
    if flags & F_ARENA:
        counts += _leb128(program.arena_bytes)  # type: ignore[arg-type]  # < lim.max_bytes
    data = _framed(version, flags, counts + sec_sizes + sec_ws + sec_off + code + sec_table)
    if report is not None:
        total = len(data)
        header = PREFIX_BYTES + len(_uvarint(total)) + len(counts)
        report.update({
            "total_bytes": total, "header_bytes": header, "sizes_bytes": len(sec_sizes),
            "workspace_bytes": len(sec_ws), "offsets_bytes": len(sec_off), "code_bytes": len(code),
            "node_table_bytes": len(sec_table), "instructions": len(program),
            "bytes_per_instruction": (total / len(program)) if len(program) else 0.0,
            "code_bytes_per_instruction": (len(code) / len(program)) if len(program) else 0.0,
            "offset_table": len(offsets_pal),
            "placed": sum(v is not None for v in places.values()), "allocations": len(places),
            "stripped": not flags & F_NODE_TABLE,
        })
    return data


def _version(program: Program, version: int | None) -> int:
    """The format version to write: the one asked for (checked), else the lowest that holds
    the program."""
    has_move = any(ins.op is Op.MOVE for ins in program)
    if version is None:
        version = MOVE_VERSION if has_move else VERSION
    if version not in READ_VERSIONS:
        raise BytecodeFormatError(E_VERSION, f"cannot encode: format version {version} (this poetc writes "
                                             f"{', '.join(map(str, READ_VERSIONS))})")
    if has_move and version < MOVE_VERSION:
        raise BytecodeFormatError(E_VERSION, f"cannot encode: the program has a MOVE, which needs format version "
                                             f"{MOVE_VERSION} (asked for {version})")
    return version


def _check_counts(program: Program, graph: TrainingGraph | None, version: int) -> None:
    """The program's node count and arena are within the limits of format ``version``, and
    ``graph`` is its graph."""
    lim = LIMITS[version]
    n = program.n_nodes
    if not 0 <= n <= MAX_NODES:
        raise BytecodeFormatError(E_COUNT, f"cannot encode: {n} nodes (the format allows 0..{MAX_NODES})")
    if graph is not None and graph.n != n:
        raise BytecodeFormatError(E_COUNT,
                                  f"cannot encode: program has {n} nodes but graph {graph.name!r} has {graph.n}")
    if program.arena_bytes is not None and not 0 <= program.arena_bytes < lim.max_bytes:
        raise BytecodeFormatError(E_OFFSET, f"cannot encode: arena of {program.arena_bytes} B is outside "
                                            f"0..{lim.max_bytes - 1} (format version {version})")


def _check_node_sizes(graph: TrainingGraph | None, version: int) -> None:
    """Every node's output and workspace bytes fit the size fields of format ``version``."""
    lim = LIMITS[version]
    bits = (lim.max_value - 1).bit_length()
    for what in ("output_bytes", "workspace_bytes"):
        if graph is not None and any(not 0 <= getattr(nd, what) < lim.max_value for nd in graph.nodes):
            raise BytecodeFormatError(E_COUNT, f"cannot encode: a node's {what} does not fit {bits} bits "
                                               f"(format version {version})")


def _framed(version: int, flags: int, rest: bytes) -> bytes:
    """The file: magic, version, flags, CRC, its own length (a varint that counts itself),
    then ``rest``."""
    # file_len counts itself; its own varint length depends on the total, so iterate.
    total = PREFIX_BYTES + len(rest)
    while PREFIX_BYTES + len(_uvarint(total)) + len(rest) != total:
        total = PREFIX_BYTES + len(_uvarint(total)) + len(rest)
    body = _uvarint(total) + rest
    crc = file_crc(MAGIC + bytes([version, flags, 0, 0, 0, 0]) + body)
    data = MAGIC + bytes([version, flags]) + crc.to_bytes(4, "little") + body
    assert len(data) == total
    return data


class _Validator(ProgramInterpreter):
    """Checks every instruction with the decoder's rules (:class:`_Machine`) and picks
    the placement code of each allocation and MOVE; :meth:`run` returns them by
    instruction index (None: the offset goes through the offset table). A MOVE is also
    checked against the transfers in flight (docs/model.md), which the decoders do not
    track."""

    def __init__(self, program: Program, machine: _Machine, with_offsets: bool, max_bytes: int) -> None:
        super().__init__(program)
        self.machine, self.with_offsets, self.max_bytes = machine, with_offsets, max_bytes
        self.places: dict[int, int | None] = {}   # allocation / MOVE index -> placement code
        self.in_flight: set[int] = set()          # nodes paged in or out since the last FENCE

    def _place(self, ins: Instruction) -> None:
        """Record the placement code of an allocation or MOVE (with offsets)."""
        k = self.index
        if self.with_offsets:   # then every allocation and MOVE has an offset (_offsets_mode)
            off = ins.offset
            if off is None or not 0 <= off < self.max_bytes:
                raise BytecodeFormatError(E_OFFSET, f"cannot encode: instruction {k}: offset {off} out of range")
            self.machine._node(k, ins.node)
            self.places[k] = self.machine.place_code(ins.op, ins.node, off)

    def _alloc(self, ins: Instruction) -> None:
        self._place(ins)
        self.machine.alloc(self.index, ins.op, ins.node, ins.offset)

    def _touch(self, ins: Instruction) -> None:
        at = self.machine.touch(self.index, ins.op, ins.node)
        if at != ins.offset:
            raise BytecodeFormatError(
                E_OFFSET, f"cannot encode: instruction {self.index} ({ins}) but node {ins.node} lives at @{at}")

    def compute(self, ins: Instruction) -> None:
        self._alloc(ins)

    def page_in(self, ins: Instruction) -> None:
        self._alloc(ins)
        self.in_flight.add(ins.node)

    def free(self, ins: Instruction) -> None:
        self._touch(ins)

    def page_out(self, ins: Instruction) -> None:
        self._touch(ins)
        self.in_flight.add(ins.node)

    def move(self, ins: Instruction) -> None:
        self._place(ins)
        self.machine.move(self.index, ins.node, ins.offset)
        if ins.node in self.in_flight:
            raise BytecodeFormatError(E_STATE, f"cannot encode: instruction {self.index} ({ins}): node {ins.node} "
                                               "has a transfer in flight (no FENCE since its PAGE_IN / PAGE_OUT)")

    def fence(self, ins: Instruction) -> None:
        if ins.node != -1 or ins.offset is not None:
            raise BytecodeFormatError(E_OPCODE,
                                      f"cannot encode: instruction {self.index}: a FENCE carries no node or offset")
        self.in_flight.clear()

    def finish(self) -> dict[int, int | None]:
        return self.places


class _Emitter(ProgramInterpreter):
    """The instruction stream (docs/bytecode.md, "Instructions"): one method per opcode,
    with the predictor registers exactly as in the decoder; :meth:`run` returns the bytes."""

    def __init__(self, program: Program, places: dict[int, int | None], off_index: dict[int, int],
                 with_offsets: bool) -> None:
        super().__init__(program)
        self.places, self.off_index, self.with_offsets = places, off_index, with_offsets
        self.code = bytearray()
        self.prev_compute, self.frontier, self.far_free, self.last_io, self.prev_slot = -1, 0, 0, 0, 0

    def place(self) -> bytes:
        """Placement operand of the current allocation or MOVE: a code >= 1, or 0 plus an offset-table slot."""
        v = self.places[self.index]
        if v is not None:
            return _uvarint(v)
        off = self.instructions[self.index].offset
        assert off is not None   # with_offsets: every allocation has one
        index = self.off_index[off]
        value, self.prev_slot = _zz(index - self.prev_slot), index
        return b"\x00" + _uvarint(value)

    def compute(self, ins: Instruction) -> None:
        node, prev_compute = ins.node, self.prev_compute
        op_code = C_COMPUTE_SEQ if node == prev_compute + 1 else C_COMPUTE_NEW if node == self.frontier else C_COMPUTE_X
        if op_code == C_COMPUTE_X:
            enc = _first_byte(C_COMPUTE_X, _zz(node - prev_compute - 1)) + (self.place() if self.with_offsets else b"")
        elif self.with_offsets:
            # The placement operand is the immediate; an explicit slot follows it.
            operand = self.place()
            v = self.places[self.index]
            enc = _first_byte(op_code, v) if v is not None else _first_byte(op_code, 0) + operand[1:]
        else:
            enc = _first_byte(op_code, 0)
        self.prev_compute = node
        self.frontier = max(self.frontier, node + 1)
        self.code += enc

    def free(self, ins: Instruction) -> None:
        node = ins.node
        a = _first_byte(C_FREE_C, _zz(node - self.prev_compute))
        b = _first_byte(C_FREE_F, _zz(node - self.far_free))
        if len(a) <= len(b):
            self.code += a
        else:
            self.code += b
            self.far_free = node

    def page_out(self, ins: Instruction) -> None:
        self.code += _first_byte(C_PAGE_OUT, _zz(ins.node - self.last_io))
        self.last_io = ins.node

    def page_in(self, ins: Instruction) -> None:
        self.code += _first_byte(C_PAGE_IN, _zz(ins.node - self.last_io)) + (self.place() if self.with_offsets else b"")
        self.last_io = ins.node

    def move(self, ins: Instruction) -> None:
        # Code 7 with a nonzero immediate (version 4): 1 + zz(node - prev_compute), then a place.
        self.code += (_first_byte(C_FENCE, 1 + _zz(ins.node - self.prev_compute))
                      + (self.place() if self.with_offsets else b""))

    def fence(self, ins: Instruction) -> None:
        self.code += _first_byte(C_FENCE, 0)

    def finish(self) -> bytes:
        return bytes(self.code)


def _offset_table(offsets: list[int], size_pal: list[int]) -> bytes:
    """Sorted distinct offsets as gaps: a gap equal to size-palette entry v is coded v,
    any other gap g is coded len(size_pal) + g (a packing planner's gaps are sizes)."""
    out = bytearray(_uvarint(len(offsets)))
    index = {v: k for k, v in enumerate(size_pal)}
    prev = 0
    for off in offsets:
        gap = off - prev
        # Offsets are below the version's max_bytes, so a gap code fits its max_gap_code.
        out += _leb128(index[gap] if gap in index else len(size_pal) + gap)
        prev = off
    return bytes(out)


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return _uvarint(len(raw)) + raw


def _node_table(graph: TrainingGraph) -> bytes:
    out = bytearray(_string(graph.name))
    for nd in graph.nodes:
        out += _string(nd.name)
        out.append(KINDS.index(nd.kind))
        out += _string(nd.op)
        out.append(OP_CLASSES.index(nd.op_class))
        out += _uvarint(len(nd.inputs))
        for i in nd.inputs:
            out += _uvarint(nd.id - 1 - i)
    return bytes(out)
