"""The ``.poet`` schedule bytecode: encoder, validating decoder and disassembler.

The format is specified byte by byte in ``docs/bytecode.md``; this module and the C
runtime (``runtime/c/poet_runtime.c``) implement the same rules and report the same
error classes (``BytecodeError.code`` is the C runtime's ``POET_E_*`` name).

Design in one paragraph: a 10-byte fixed prefix (magic, version, flags, CRC32), a few
varint counts, then compact tables — output sizes as a palette of distinct values
(varint entry codes: odd part and power of two) plus fixed-width per-node indices,
workspace sizes as a sparse table (palette, bitmap, indices of the nodes that have
one), and the few allocation offsets that placement codes cannot name — then one
instruction per 1–2 bytes: the low 3 bits of the first byte are an opcode, the high 5
bits an immediate (31 = "more in a varint"). Node ids are predicted (next node after
the previous compute, the next never-computed node, or a small delta from the previous
free / page transfer). An allocation (COMPUTE, PAGE_IN) names its offset by a
placement code — "at 0 or right after the r-th live buffer end", "right below the r-th
live buffer start" — or, failing that, by an offset-table slot; a FREE or PAGE_OUT
touches the buffer where that node currently lives, which the decoder tracks in an
n-entry table. The optional node table (names, kinds, op labels, op classes, input
lists) sits at the end and ``strip=True`` drops it; the device runtime never reads it.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

from poet_compiler.errors import BytecodeError
from poet_compiler.graph.ir import KINDS, OP_CLASSES, TrainingGraph
from poet_compiler.schedule.program import Instruction, Op, Program

MAGIC = b"POET"
VERSION = 2
PREFIX_BYTES = 10  # magic(4) version(1) flags(1) crc32(4)

# Header flag bits (docs/bytecode.md, "Flags").
F_SIZES = 0x01       # output-size table present
F_WORKSPACE = 0x02   # workspace-size table present (requires F_SIZES)
F_OFFSETS = 0x04     # allocations carry arena offsets (offset palette present)
F_ARENA = 0x08       # arena size present in the header
F_NODE_TABLE = 0x10  # node table (names, kinds, ops, classes, inputs) at the end
F_KNOWN = F_SIZES | F_WORKSPACE | F_OFFSETS | F_ARENA | F_NODE_TABLE

FLAG_NAMES = {F_SIZES: "SIZES", F_WORKSPACE: "WORKSPACE", F_OFFSETS: "OFFSETS",
              F_ARENA: "ARENA", F_NODE_TABLE: "NODE_TABLE"}

# Opcodes of the instruction stream (low 3 bits of an instruction's first byte).
# Operands in [...]: the first one is the immediate, the others follow as varints.
# zz(d) is a zigzag-coded signed delta; slot = zz(palette index - previous allocation's).
C_COMPUTE_SEQ = 0   # COMPUTE prev_compute + 1                      [slot]
C_COMPUTE_NEW = 1   # COMPUTE frontier (lowest never-computed node) [slot]
C_COMPUTE_X = 2     # COMPUTE prev_compute + 1 + d                  [zz(d)] [slot]
C_FREE_C = 3        # FREE prev_compute + d                         [zz(d)]
C_FREE_F = 4        # FREE far_free + d; far_free = that node       [zz(d)]
C_PAGE_OUT = 5      # PAGE_OUT last_io + d                          [zz(d)]
C_PAGE_IN = 6       # PAGE_IN last_io + d                           [zz(d)] [slot]
C_FENCE = 7         # FENCE                                         (immediate 0)
CODE_NAMES = ("COMPUTE_SEQ", "COMPUTE_NEW", "COMPUTE_X", "FREE_C", "FREE_F",
              "PAGE_OUT", "PAGE_IN", "FENCE")

IMM_ESCAPE = 31
U32 = 0xFFFFFFFF
MAX_ARENA = 1 << 30   # offsets share a 32-bit word with two state bits on the device
MAX_NODES = 1 << 20     # far above any real graph; bounds the decoder's work

# Error classes: the names are the C runtime's error codes (poet_runtime.h).
E_TRUNCATED = "POET_E_TRUNCATED"
E_MAGIC = "POET_E_MAGIC"
E_VERSION = "POET_E_VERSION"
E_FLAGS = "POET_E_FLAGS"
E_LENGTH = "POET_E_LENGTH"
E_CRC = "POET_E_CRC"
E_MALFORMED = "POET_E_MALFORMED"
E_COUNT = "POET_E_COUNT"
E_OPCODE = "POET_E_OPCODE"
E_NODE = "POET_E_NODE"
E_OFFSET = "POET_E_OFFSET"
E_STATE = "POET_E_STATE"
E_OVERLAP = "POET_E_OVERLAP"


class BytecodeFormatError(BytecodeError):
    """A .poet file (or a Program to encode) breaks a rule; ``code`` names the class."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{message} [{code}]")
        self.code = code


# --------------------------------------------------------------------------- values
@dataclass(frozen=True)
class NodeEntry:
    """One row of the optional node table."""

    name: str
    kind: str
    op: str
    op_class: str
    inputs: tuple[int, ...]


@dataclass(frozen=True)
class DecodedProgram:
    """What a .poet file holds: the Program plus the tables that came with it."""

    program: Program
    version: int
    flags: int
    sizes: tuple[int, ...] | None           # output bytes per node (F_SIZES)
    workspace: tuple[int, ...] | None       # workspace bytes per node (F_WORKSPACE)
    graph_name: str | None                  # from the node table
    nodes: tuple[NodeEntry, ...] | None     # the node table, None when stripped
    crc: int
    sections: dict[str, int] = field(default_factory=dict)  # bytes per section

    @property
    def stripped(self) -> bool:
        return self.nodes is None

    def flag_names(self) -> list[str]:
        return [name for bit, name in FLAG_NAMES.items() if self.flags & bit]


# --------------------------------------------------------------------------- primitives
def file_crc(data: bytes) -> int:
    """CRC-32 of a whole file except its CRC field (bytes 6..9): magic, version and
    flags are covered too, so no single flipped bit anywhere goes unnoticed."""
    return zlib.crc32(data[PREFIX_BYTES:], zlib.crc32(data[:6])) & U32


def _leb128(value: int) -> bytes:
    """Unsigned LEB128 of a non-negative integer."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _uvarint(value: int) -> bytes:
    """Unsigned LEB128 (values up to 2**32 - 1)."""
    if value < 0 or value > U32:
        raise BytecodeFormatError(E_COUNT, f"value {value} does not fit an unsigned 32-bit varint")
    return _leb128(value)


def _zz(value: int) -> int:
    """Zigzag: small signed deltas become small unsigned numbers (0,-1,1,-2 -> 0,1,2,3)."""
    return (value << 1) if value >= 0 else ((-value) << 1) - 1


def _unzz(value: int) -> int:
    return (value >> 1) if not value & 1 else -((value + 1) >> 1)


def _first_byte(code: int, imm: int) -> bytes:
    """Opcode in bits 0-2, immediate in bits 3-7; immediates >= 31 continue in a varint."""
    if imm < IMM_ESCAPE:
        return bytes([code | (imm << 3)])
    return bytes([code | (IMM_ESCAPE << 3)]) + _uvarint(imm - IMM_ESCAPE)


def _entry_code(value: int) -> int:
    """Palette entry code: (value >> t) << 5 | t with t = trailing zeros (0 for value 0).
    Sizes are mostly a small odd number times a power of two, so most codes take 1-2 B."""
    if value == 0:
        return 0
    tz = min((value & -value).bit_length() - 1, 31)
    return ((value >> tz) << 5) | tz


def _entry_value(code: int) -> int:
    return (code >> 5) << (code & 31)


def _uvarint_wide(value: int) -> bytes:
    """LEB128 of up to 35 bits (palette entry codes only)."""
    return _leb128(value)


def _palette(values: list[int]) -> list[int]:
    """Distinct values, most frequent first (ties: smaller value first)."""
    freq: dict[int, int] = {}
    for v in values:
        freq[v] = freq.get(v, 0) + 1
    return sorted(freq, key=lambda v: (-freq[v], v))


def _palette_bytes(palette: list[int]) -> bytes:
    """count (varint), then one entry code (varint, up to 35 bits) per entry."""
    out = bytearray(_uvarint(len(palette)))
    for v in palette:
        out += _uvarint_wide(_entry_code(v))
    return bytes(out)


def _index_bits(count: int) -> int:
    return (count - 1).bit_length() if count > 1 else 0


def _pack(indices: list[int], bits: int) -> bytes:
    """Fixed-width indices, LSB first, as one little-endian bit string."""
    acc = 0
    for k, idx in enumerate(indices):
        acc |= idx << (k * bits)
    return acc.to_bytes((len(indices) * bits + 7) // 8, "little")


def _size_section(values: list[int]) -> bytes:
    """A palette of the distinct values plus one packed index per node."""
    pal = _palette(values)
    index = {v: k for k, v in enumerate(pal)}
    return _palette_bytes(pal) + _pack([index[v] for v in values], _index_bits(len(pal)))


def _workspace_section(values: list[int]) -> bytes:
    """Sparse: a palette of the nonzero values, a bitmap of the nodes that have one, and
    packed indices for those nodes only (most nodes of a CNN need no workspace)."""
    nonzero = [v for v in values if v]
    pal = _palette(nonzero)
    index = {v: k for k, v in enumerate(pal)}
    bitmap = sum(1 << node for node, v in enumerate(values) if v).to_bytes((len(values) + 7) // 8, "little")
    return _palette_bytes(pal) + bitmap + _pack([index[v] for v in nonzero], _index_bits(len(pal)))


# --------------------------------------------------------------------------- state
class _Machine:
    """Tracks where every node lives; shared by encoder and decoder so both apply the
    same rules as the C runtime's validation pass (docs/bytecode.md, "Validation")."""

    def __init__(self, n_nodes: int, sizes: tuple[int, ...] | None, arena: int | None,
                 check_offsets: bool, workspace: tuple[int, ...] | None = None) -> None:
        self.n = n_nodes
        self.sizes = sizes
        self.workspace = workspace
        self.arena = arena
        self.check_offsets = check_offsets
        self.where: dict[int, int | None] = {}   # resident node -> offset (None: no offsets)
        self.flash: set[int] = set()

    def _node(self, k: int, node: int) -> None:
        if not 0 <= node < self.n:
            raise BytecodeFormatError(E_NODE, f"instruction {k}: node {node} out of range 0..{self.n - 1}")

    def alloc(self, k: int, op: Op, node: int, offset: int | None) -> None:
        self._node(k, node)
        if node in self.where:
            raise BytecodeFormatError(E_STATE, f"instruction {k}: {op.name} {node} but node {node} is already in RAM")
        if op is Op.PAGE_IN and node not in self.flash:
            raise BytecodeFormatError(E_STATE, f"instruction {k}: PAGE_IN {node} but node {node} was never paged out")
        if self.check_offsets and offset is not None and self.sizes is not None:
            # A compute's workspace lies right after its output, for that compute only.
            size = self.sizes[node] + (self.workspace[node] if self.workspace and op is Op.COMPUTE else 0)
            if self.arena is not None and offset + size > self.arena:
                raise BytecodeFormatError(
                    E_OFFSET, f"instruction {k}: {op.name} {node} @{offset} + {size} B overruns the {self.arena} B arena")
            if size:
                for other, at in self.where.items():
                    osize = self.sizes[other]
                    if osize and at is not None and offset < at + osize and at < offset + size:
                        raise BytecodeFormatError(
                            E_OVERLAP, f"instruction {k}: {op.name} {node} @{offset}+{size} overlaps live node {other} @{at}+{osize}")
        elif self.check_offsets and offset is not None and self.arena is not None and offset > self.arena:
            raise BytecodeFormatError(E_OFFSET, f"instruction {k}: {op.name} {node} @{offset} is past the {self.arena} B arena")
        self.where[node] = offset

    def extent(self, op: Op, node: int) -> int:
        """Bytes an allocation occupies while it happens: output, plus workspace for a COMPUTE."""
        assert self.sizes is not None
        return self.sizes[node] + (self.workspace[node] if self.workspace and op is Op.COMPUTE else 0)

    def ends(self) -> list[int]:
        """"Above" candidates, ascending: 0 and the end of every resident buffer."""
        assert self.sizes is not None
        return sorted({0} | {at + self.sizes[j] for j, at in self.where.items() if at is not None})

    def starts(self) -> list[int]:
        """"Below" candidates, descending: the arena's end and the start of every resident buffer."""
        assert self.arena is not None
        return sorted({self.arena} | {at for at in self.where.values() if at is not None}, reverse=True)

    def place_code(self, op: Op, node: int, offset: int) -> int | None:
        """Smallest placement code that yields ``offset`` (docs/bytecode.md), or None."""
        if self.sizes is None:
            return None
        best: int | None = None
        ends = self.ends()
        if offset in ends:
            best = 2 * ends.index(offset) + 1
        if self.arena is not None:
            target = offset + self.extent(op, node)
            starts = self.starts()
            if target in starts:
                code = 2 * starts.index(target) + 2
                best = code if best is None else min(best, code)
        return best

    def place(self, k: int, op: Op, node: int, code: int) -> int:
        """Offset of placement code ``code`` >= 1 for ``node`` (range-checked by the caller)."""
        if self.sizes is None or (code % 2 == 0 and self.arena is None):
            raise BytecodeFormatError(E_OFFSET, f"instruction {k}: placement code {code} needs the "
                                                f"{'size table' if self.sizes is None else 'arena size'}")
        rank = (code - 1) // 2
        cands = self.ends() if code % 2 else self.starts()
        if rank >= len(cands):
            raise BytecodeFormatError(E_OFFSET, f"instruction {k}: placement code {code} asks for candidate "
                                                f"{rank} of {len(cands)}")
        if code % 2:
            return cands[rank]
        offset = cands[rank] - self.extent(op, node)
        if offset < 0:
            raise BytecodeFormatError(E_OFFSET, f"instruction {k}: {op.name} {node} placed below "
                                                f"@{cands[rank]} starts before the arena")
        return offset

    def touch(self, k: int, op: Op, node: int) -> int | None:
        """FREE / PAGE_OUT: the node must be resident; returns its offset."""
        self._node(k, node)
        if node not in self.where:
            raise BytecodeFormatError(E_STATE, f"instruction {k}: {op.name} {node} but node {node} is not in RAM")
        at = self.where[node]
        if op is Op.FREE:
            del self.where[node]
        else:
            self.flash.add(node)
        return at


# --------------------------------------------------------------------------- encoder
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
           report: dict[str, Any] | None = None) -> bytes:
    """Encode ``program`` as .poet bytes (docs/bytecode.md). Deterministic.

    ``graph`` supplies output/workspace sizes (needed by the device runtime) and the node
    table; ``strip=True`` leaves the node table out. If ``report`` is a dict it receives
    the size figures: bytes per section, total, bytes per instruction.
    """
    n = program.n_nodes
    if not 0 <= n <= MAX_NODES:
        raise BytecodeFormatError(E_COUNT, f"cannot encode: {n} nodes (the format allows 0..{MAX_NODES})")
    if graph is not None and graph.n != n:
        raise BytecodeFormatError(E_COUNT, f"cannot encode: program has {n} nodes but graph {graph.name!r} has {graph.n}")
    if program.arena_bytes is not None and not 0 <= program.arena_bytes < MAX_ARENA:
        raise BytecodeFormatError(E_OFFSET, f"cannot encode: arena of {program.arena_bytes} B is outside 0..{MAX_ARENA - 1}")
    with_offsets = _offsets_mode(program)
    sizes = tuple(nd.output_bytes for nd in graph.nodes) if graph is not None else None
    workspace = tuple(nd.workspace_bytes for nd in graph.nodes) if graph is not None else None
    if sizes is not None and any(not 0 <= s <= U32 for s in sizes):
        raise BytecodeFormatError(E_COUNT, "cannot encode: a node's output_bytes does not fit 32 bits")
    if workspace is not None and any(not 0 <= w <= U32 for w in workspace):
        raise BytecodeFormatError(E_COUNT, "cannot encode: a node's workspace_bytes does not fit 32 bits")

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
    places: dict[int, int | None] = {}   # allocation index -> placement code (None: offset table)
    for k, ins in enumerate(program):
        if ins.op is Op.FENCE:
            if ins.node != -1 or ins.offset is not None:
                raise BytecodeFormatError(E_OPCODE, f"cannot encode: instruction {k}: a FENCE carries no node or offset")
        elif ins.op in (Op.COMPUTE, Op.PAGE_IN):
            if with_offsets and not 0 <= ins.offset < MAX_ARENA:  # type: ignore[operator]
                raise BytecodeFormatError(E_OFFSET, f"cannot encode: instruction {k}: offset {ins.offset} out of range")
            if with_offsets:
                machine._node(k, ins.node)
                places[k] = machine.place_code(ins.op, ins.node, ins.offset)  # type: ignore[arg-type]
            machine.alloc(k, ins.op, ins.node, ins.offset)
        else:
            at = machine.touch(k, ins.op, ins.node)
            if at != ins.offset:
                raise BytecodeFormatError(
                    E_OFFSET, f"cannot encode: instruction {k} ({ins}) but node {ins.node} lives at @{at}")

    # Only offsets that no placement code reaches go to the offset table.
    offsets_pal = sorted({program.instructions[k].offset for k, v in places.items() if v is None})  # type: ignore[misc]
    off_index = {v: k for k, v in enumerate(offsets_pal)}

    # Instruction stream; predictor registers exactly as in the decoder.
    code = bytearray()
    prev_compute, frontier, far_free, last_io, prev_slot = -1, 0, 0, 0, 0

    def place(k: int) -> bytes:
        """Placement operand of allocation k: a code >= 1, or 0 plus an offset-table slot."""
        nonlocal prev_slot
        v = places[k]
        if v is not None:
            return _uvarint(v)
        index = off_index[program.instructions[k].offset]  # type: ignore[index]
        value, prev_slot = _zz(index - prev_slot), index
        return b"\x00" + _uvarint(value)

    for k, ins in enumerate(program):
        node = ins.node
        if ins.op is Op.COMPUTE:
            op_code = C_COMPUTE_SEQ if node == prev_compute + 1 else C_COMPUTE_NEW if node == frontier else C_COMPUTE_X
            if op_code == C_COMPUTE_X:
                enc = _first_byte(C_COMPUTE_X, _zz(node - prev_compute - 1)) + (place(k) if with_offsets else b"")
            elif with_offsets:
                # The placement operand is the immediate; an explicit slot follows it.
                operand = place(k)
                v = places[k]
                enc = _first_byte(op_code, v) if v is not None else _first_byte(op_code, 0) + operand[1:]
            else:
                enc = _first_byte(op_code, 0)
            prev_compute = node
            frontier = max(frontier, node + 1)
        elif ins.op is Op.FREE:
            a = _first_byte(C_FREE_C, _zz(node - prev_compute))
            b = _first_byte(C_FREE_F, _zz(node - far_free))
            if len(a) <= len(b):
                enc = a
            else:
                enc, far_free = b, node
        elif ins.op is Op.PAGE_OUT:
            enc = _first_byte(C_PAGE_OUT, _zz(node - last_io))
            last_io = node
        elif ins.op is Op.PAGE_IN:
            enc = _first_byte(C_PAGE_IN, _zz(node - last_io)) + (place(k) if with_offsets else b"")
            last_io = node
        else:
            enc = _first_byte(C_FENCE, 0)
        code += enc

    sec_sizes = _size_section(list(sizes)) if sizes is not None else b""
    sec_ws = _workspace_section(list(workspace)) if flags & F_WORKSPACE else b""  # type: ignore[arg-type]
    size_pal = _palette(list(sizes)) if sizes is not None else []
    sec_off = _offset_table(offsets_pal, size_pal) if with_offsets else b""
    sec_table = _node_table(graph) if flags & F_NODE_TABLE else b""  # type: ignore[arg-type]

    counts = _uvarint(n) + _uvarint(len(program))
    if flags & F_ARENA:
        counts += _uvarint(program.arena_bytes)  # type: ignore[arg-type]
    rest = counts + sec_sizes + sec_ws + sec_off + bytes(code) + sec_table
    # file_len counts itself; its own varint length depends on the total, so iterate.
    total = PREFIX_BYTES + len(rest)
    while PREFIX_BYTES + len(_uvarint(total)) + len(rest) != total:
        total = PREFIX_BYTES + len(_uvarint(total)) + len(rest)
    body = _uvarint(total) + rest
    crc = file_crc(MAGIC + bytes([VERSION, flags, 0, 0, 0, 0]) + body)
    data = MAGIC + bytes([VERSION, flags]) + crc.to_bytes(4, "little") + body
    assert len(data) == total
    if report is not None:
        header = PREFIX_BYTES + len(_uvarint(total)) + len(counts)
        report.update({
            "total_bytes": total, "header_bytes": header, "sizes_bytes": len(sec_sizes),
            "workspace_bytes": len(sec_ws), "offsets_bytes": len(sec_off), "code_bytes": len(code),
            "node_table_bytes": len(sec_table), "instructions": len(program),
            "bytes_per_instruction": (total / len(program)) if len(program) else 0.0,
            "code_bytes_per_instruction": (len(code) / len(program)) if len(program) else 0.0,
            "offset_table": len(offsets_pal),
            "placed": sum(v is not None for v in places.values()), "allocations": len(places), "stripped": not flags & F_NODE_TABLE,
        })
    return data


def _offset_table(offsets: list[int], size_pal: list[int]) -> bytes:
    """Sorted distinct offsets as gaps: a gap equal to size-palette entry v is coded v,
    any other gap g is coded len(size_pal) + g (a packing planner's gaps are sizes)."""
    out = bytearray(_uvarint(len(offsets)))
    index = {v: k for k, v in enumerate(size_pal)}
    prev = 0
    for off in offsets:
        gap = off - prev
        out += _uvarint(index[gap] if gap in index else len(size_pal) + gap)
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


# --------------------------------------------------------------------------- decoder
class _Reader:
    """Bounds-checked cursor; every read past the end is a TRUNCATED error."""

    def __init__(self, data: bytes, pos: int, end: int) -> None:
        self.data, self.pos, self.end = data, pos, end

    def need(self, count: int, what: str) -> None:
        if count > self.end - self.pos:
            raise BytecodeFormatError(E_TRUNCATED, f"truncated: {what} needs {count} B at byte {self.pos}, "
                                                   f"{self.end - self.pos} left")

    def u8(self, what: str) -> int:
        self.need(1, what)
        self.pos += 1
        return self.data[self.pos - 1]

    def raw(self, count: int, what: str) -> bytes:
        self.need(count, what)
        self.pos += count
        return self.data[self.pos - count:self.pos]

    def varint(self, what: str, wide: bool = False) -> int:
        """LEB128, minimal, at most 5 bytes; below 2**32 unless ``wide`` (palette entries)."""
        start, value = self.pos, 0
        for shift in range(0, 35, 7):
            byte = self.u8(what)
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                if (value > U32 and not wide) or (byte == 0 and self.pos - start > 1):
                    raise BytecodeFormatError(E_MALFORMED, f"bad varint for {what} at byte {start} "
                                                           "(overflow or not minimal)")
                return value
        raise BytecodeFormatError(E_MALFORMED, f"bad varint for {what} at byte {start} (longer than 5 bytes)")

    def imm(self, first: int, what: str) -> int:
        value = first >> 3
        if value == IMM_ESCAPE:
            value += self.varint(what)
            if value > U32:
                raise BytecodeFormatError(E_MALFORMED, f"immediate of {what} at byte {self.pos} overflows 32 bits")
        return value

    def string(self, what: str) -> str:
        raw = self.raw(self.varint(what), what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise BytecodeFormatError(E_MALFORMED, f"{what} at byte {self.pos - len(raw)} is not UTF-8") from None


def _read_palette(r: _Reader, limit: int, what: str) -> list[int]:
    count = r.varint(f"{what} count")
    if count > limit:
        raise BytecodeFormatError(E_COUNT, f"{what}: {count} entries but at most {limit} allowed")
    r.need(count, f"{what} entries")
    out = []
    for k in range(count):
        value = _entry_value(r.varint(f"{what} entry {k}", wide=True))
        if value > U32:
            raise BytecodeFormatError(E_MALFORMED, f"{what}: entry {k} ({value}) overflows 32 bits")
        out.append(value)
    if limit and not out:
        raise BytecodeFormatError(E_COUNT, f"{what}: empty palette for {limit} nodes")
    return out


def _read_indices(r: _Reader, count: int, pal: list[int], what: str) -> list[int]:
    bits = _index_bits(len(pal))
    acc = int.from_bytes(r.raw((count * bits + 7) // 8, f"{what} indices"), "little")
    mask = (1 << bits) - 1
    out = []
    for k in range(count):
        idx = (acc >> (k * bits)) & mask
        if idx >= len(pal):
            raise BytecodeFormatError(E_COUNT, f"{what}: index {k} uses palette entry {idx} of {len(pal)}")
        out.append(pal[idx])
    return out


def _read_size_section(r: _Reader, n: int) -> tuple[list[int], tuple[int, ...]]:
    pal = _read_palette(r, n, "size table")
    return pal, tuple(_read_indices(r, n, pal, "size table"))


def _read_workspace_section(r: _Reader, n: int) -> tuple[int, ...]:
    pal = _read_palette(r, n, "workspace table")
    bitmap = int.from_bytes(r.raw((n + 7) // 8, "workspace bitmap"), "little")
    if bitmap >> n:
        raise BytecodeFormatError(E_MALFORMED, f"workspace bitmap: bits set past node {n - 1}")
    nodes = [i for i in range(n) if bitmap >> i & 1]
    values = dict(zip(nodes, _read_indices(r, len(nodes), pal, "workspace table")))
    return tuple(values.get(i, 0) for i in range(n))


def _read_offset_table(r: _Reader, limit: int, size_pal: list[int]) -> list[int]:
    count = r.varint("offset table count")
    if count > limit:
        raise BytecodeFormatError(E_COUNT, f"offset table: {count} entries but only {limit} instructions")
    r.need(count, "offset table")
    out: list[int] = []
    prev = 0
    for j in range(count):
        v = r.varint(f"offset table entry {j}")
        gap = size_pal[v] if v < len(size_pal) else v - len(size_pal)
        if j and gap == 0:
            raise BytecodeFormatError(E_MALFORMED, f"offset table: entry {j} repeats the previous offset")
        prev += gap
        if prev >= MAX_ARENA:
            raise BytecodeFormatError(E_OFFSET, f"offset table: entry {j} ({prev}) exceeds the {MAX_ARENA} B limit")
        out.append(prev)
    return out


def _check_prefix(data: bytes) -> tuple[int, int, int]:
    """Magic, version, flags, declared length, CRC: the checks the runtime does first."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise BytecodeFormatError(E_MALFORMED, f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) < PREFIX_BYTES + 1:
        if data[:len(MAGIC)] != MAGIC[:len(data)]:
            raise BytecodeFormatError(E_MAGIC, f"not a .poet file (magic {data[:4]!r}, expected {MAGIC!r})")
        raise BytecodeFormatError(E_TRUNCATED, f"truncated: {len(data)} B is shorter than the {PREFIX_BYTES + 1} B header")
    if data[:4] != MAGIC:
        raise BytecodeFormatError(E_MAGIC, f"not a .poet file (magic {data[:4]!r}, expected {MAGIC!r})")
    version, flags = data[4], data[5]
    if version != VERSION:
        raise BytecodeFormatError(E_VERSION, f"unsupported .poet version {version} (this poetc reads version {VERSION})")
    if flags & ~F_KNOWN or (flags & F_WORKSPACE and not flags & F_SIZES):
        raise BytecodeFormatError(E_FLAGS, f"unknown or inconsistent flags 0x{flags:02x}")
    r = _Reader(data, PREFIX_BYTES, len(data))
    declared = r.varint("file length")
    if declared > len(data):
        raise BytecodeFormatError(E_TRUNCATED, f"truncated: header declares {declared} B, file has {len(data)} B")
    if declared < len(data):
        raise BytecodeFormatError(E_LENGTH, f"header declares {declared} B but the file has {len(data)} B "
                                            "(trailing bytes)")
    crc = int.from_bytes(data[6:10], "little")
    actual = file_crc(data)
    if crc != actual:
        raise BytecodeFormatError(E_CRC, f"CRC mismatch: header says 0x{crc:08x}, content is 0x{actual:08x}")
    return flags, crc, r.pos


def decode(data: bytes) -> DecodedProgram:
    """Parse and validate .poet bytes; any defect raises :class:`BytecodeFormatError`."""
    flags, crc, pos = _check_prefix(data)
    data = bytes(data)
    r = _Reader(data, pos, len(data))
    n = r.varint("node count")
    n_instr = r.varint("instruction count")
    arena = r.varint("arena size") if flags & F_ARENA else None
    if arena is not None and arena >= MAX_ARENA:
        raise BytecodeFormatError(E_OFFSET, f"arena of {arena} B exceeds the {MAX_ARENA} B limit")
    if n > MAX_NODES:
        raise BytecodeFormatError(E_COUNT, f"{n} nodes exceed the format's limit of {MAX_NODES}")
    header_end = r.pos
    # Every instruction takes at least one byte: a count beyond the file is a lie.
    if n_instr > r.end - r.pos:
        raise BytecodeFormatError(E_COUNT, f"{n_instr} instructions cannot fit in the {r.end - r.pos} B left")
    size_pal, sizes = _read_size_section(r, n) if flags & F_SIZES else ([], None)
    sizes_end = r.pos
    workspace = _read_workspace_section(r, n) if flags & F_WORKSPACE else None
    ws_end = r.pos
    offsets = _read_offset_table(r, n_instr, size_pal) if flags & F_OFFSETS else None
    if offsets and arena is not None and offsets[-1] > arena:
        raise BytecodeFormatError(E_OFFSET, f"offset table: offset {offsets[-1]} lies past the {arena} B arena")
    off_end = r.pos
    if n_instr > r.end - r.pos:
        raise BytecodeFormatError(E_COUNT, f"{n_instr} instructions cannot fit in the {r.end - r.pos} B left")

    machine = _Machine(n, sizes, arena, offsets is not None, workspace)
    instrs: list[Instruction] = []
    prev_compute, frontier, far_free, last_io, prev_slot = -1, 0, 0, 0, 0

    def offset_at(k: int, op: Op, node: int, v: int) -> int:
        """Resolve placement operand v of allocation k (docs/bytecode.md, "Placement")."""
        nonlocal prev_slot
        assert offsets is not None
        machine._node(k, node)   # a "below" placement needs the node's size
        if v:
            return machine.place(k, op, node, v)
        index = prev_slot + _unzz(r.varint(f"instruction {k} slot"))
        if not 0 <= index < len(offsets):
            raise BytecodeFormatError(E_OFFSET, f"instruction {k}: offset index {index} outside the "
                                                f"{len(offsets)}-entry offset table")
        prev_slot = index
        return offsets[index]

    for k in range(n_instr):
        at = r.pos
        first = r.u8(f"instruction {k}")
        code = first & 7
        imm = r.imm(first, f"instruction {k}")
        off: int | None = None
        if code in (C_COMPUTE_SEQ, C_COMPUTE_NEW, C_COMPUTE_X):
            if code == C_COMPUTE_X:
                node = prev_compute + 1 + _unzz(imm)
                v = r.varint(f"instruction {k} placement") if offsets is not None else 0
            else:
                node = prev_compute + 1 if code == C_COMPUTE_SEQ else frontier
                v = imm
                if offsets is None and imm:
                    raise BytecodeFormatError(E_OPCODE, f"instruction {k} at byte {at}: nonzero operand without offsets")
            if offsets is not None:
                off = offset_at(k, Op.COMPUTE, node, v)
            machine.alloc(k, Op.COMPUTE, node, off)
            instrs.append(Instruction(Op.COMPUTE, node, off))
            prev_compute, frontier = node, max(frontier, node + 1)
        elif code in (C_FREE_C, C_FREE_F):
            node = (prev_compute if code == C_FREE_C else far_free) + _unzz(imm)
            off = machine.touch(k, Op.FREE, node)
            instrs.append(Instruction(Op.FREE, node, off))
            if code == C_FREE_F:
                far_free = node
        elif code == C_PAGE_OUT:
            node = last_io + _unzz(imm)
            off = machine.touch(k, Op.PAGE_OUT, node)
            instrs.append(Instruction(Op.PAGE_OUT, node, off))
            last_io = node
        elif code == C_PAGE_IN:
            node = last_io + _unzz(imm)
            if offsets is not None:
                off = offset_at(k, Op.PAGE_IN, node, r.varint(f"instruction {k} placement"))
            machine.alloc(k, Op.PAGE_IN, node, off)
            instrs.append(Instruction(Op.PAGE_IN, node, off))
            last_io = node
        else:
            if imm:
                raise BytecodeFormatError(E_OPCODE, f"instruction {k} at byte {at}: FENCE with operand {imm}")
            instrs.append(Instruction(Op.FENCE))
    code_end = r.pos

    graph_name: str | None = None
    nodes: tuple[NodeEntry, ...] | None = None
    if flags & F_NODE_TABLE:
        graph_name, nodes = _read_node_table(r, n)
    if r.pos != r.end:
        raise BytecodeFormatError(E_MALFORMED, f"{r.end - r.pos} unexpected bytes after the last section at byte {r.pos}")
    sections = {"header": header_end, "sizes": sizes_end - header_end, "workspace": ws_end - sizes_end,
                "offsets": off_end - ws_end, "code": code_end - off_end, "node_table": r.end - code_end,
                "total": r.end}
    program = Program(n_nodes=n, instructions=tuple(instrs), arena_bytes=arena)
    return DecodedProgram(program=program, version=VERSION, flags=flags, sizes=sizes, workspace=workspace,
                          graph_name=graph_name, nodes=nodes, crc=crc, sections=sections)


def _read_node_table(r: _Reader, n: int) -> tuple[str, tuple[NodeEntry, ...]]:
    # Each node takes at least 5 bytes; refuse impossible counts before looping.
    if n * 5 > r.end - r.pos:
        raise BytecodeFormatError(E_TRUNCATED, f"truncated: node table for {n} nodes needs at least {n * 5} B")
    graph_name = r.string("graph name")
    entries = []
    for node in range(n):
        name = r.string(f"node {node} name")
        kind = r.u8(f"node {node} kind")
        op = r.string(f"node {node} op")
        op_class = r.u8(f"node {node} op class")
        if kind >= len(KINDS) or op_class >= len(OP_CLASSES):
            raise BytecodeFormatError(E_MALFORMED, f"node table: node {node} has kind {kind} / op class {op_class}")
        count = r.varint(f"node {node} input count")
        if count > r.end - r.pos:
            raise BytecodeFormatError(E_TRUNCATED, f"truncated: node {node} lists {count} inputs")
        inputs = []
        for _ in range(count):
            delta = r.varint(f"node {node} input")
            if delta > node - 1:
                raise BytecodeFormatError(E_NODE, f"node table: node {node} reads a node id below 0")
            inputs.append(node - 1 - delta)
        entries.append(NodeEntry(name, KINDS[kind], op, OP_CLASSES[op_class], tuple(inputs)))
    return graph_name, tuple(entries)


# --------------------------------------------------------------------------- disassembler
def header_figures(decoded: DecodedProgram) -> dict[str, Any]:
    """Key figures of a decoded file, for printing."""
    p = decoded.program
    total = decoded.sections.get("total", 0)
    return {
        "version": decoded.version,
        "flags": "|".join(decoded.flag_names()) or "-",
        "crc32": f"0x{decoded.crc:08x}",
        "file_bytes": total,
        "nodes": p.n_nodes,
        "instructions": len(p),
        "compute": p.n_compute, "recompute": p.n_recompute,
        "page_out": p.n_page_out, "page_in": p.n_page_in,
        "free": p.count(Op.FREE), "fence": p.count(Op.FENCE),
        "arena_bytes": p.arena_bytes,
        "bytes_per_instruction": round(total / len(p), 3) if len(p) else 0.0,
        **{f"section_{k}_bytes": v for k, v in decoded.sections.items() if k != "total"},
    }


def disassemble(data: bytes) -> str:
    """Human-readable listing: header figures, then one line per instruction."""
    decoded = decode(data)
    figs = header_figures(decoded)
    lines = [f"; .poet v{figs['version']}  flags {figs['flags']}  crc {figs['crc32']}  {figs['file_bytes']} B"
             + (f"  graph {decoded.graph_name!r}" if decoded.graph_name is not None else "")]
    lines.append(f"; nodes {figs['nodes']}  instructions {figs['instructions']}  "
                 f"arena {figs['arena_bytes'] if figs['arena_bytes'] is not None else '-'} B  "
                 f"{figs['bytes_per_instruction']} B/instruction")
    lines.append("; sections: " + ", ".join(f"{k} {v} B" for k, v in decoded.sections.items() if k != "total"))
    lines.append(f"; compute {figs['compute']} (recompute {figs['recompute']})  free {figs['free']}  "
                 f"page_out {figs['page_out']}  page_in {figs['page_in']}  fence {figs['fence']}")
    for k, ins in enumerate(decoded.program):
        text = str(ins)
        if ins.op is not Op.FENCE:
            if decoded.sizes is not None:
                text += f" ({decoded.sizes[ins.node]} B)"
            if decoded.nodes is not None:
                text += f"  ; {decoded.nodes[ins.node].name}"
        lines.append(f"{k:6d}  {text}")
    return "\n".join(lines) + "\n"
