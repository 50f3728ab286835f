"""The validating decoder: .poet bytes to a DecodedProgram, checks in the C runtime's order."""

from __future__ import annotations

from poet_compiler.codegen.bytecode.format import (
    C_COMPUTE_NEW,
    C_COMPUTE_SEQ,
    C_COMPUTE_X,
    C_FREE_C,
    C_FREE_F,
    C_PAGE_IN,
    C_PAGE_OUT,
    E_COUNT,
    E_CRC,
    E_FLAGS,
    E_LENGTH,
    E_MAGIC,
    E_MALFORMED,
    E_NODE,
    E_OFFSET,
    E_OPCODE,
    E_TRUNCATED,
    E_VERSION,
    F_ARENA,
    F_KNOWN,
    F_NODE_TABLE,
    F_OFFSETS,
    F_SIZES,
    F_WORKSPACE,
    IMM_ESCAPE,
    LIMITS,
    MAGIC,
    MAX_NODES,
    MOVE_VERSION,
    PREFIX_BYTES,
    READ_VERSIONS,
    U32,
    VERSION,
    BytecodeFormatError,
    DecodedProgram,
    Limits,
    NodeEntry,
    file_crc,
)
from poet_compiler.codegen.bytecode.machine import _Machine
from poet_compiler.codegen.bytecode.palette import _entry_value, _index_bits
from poet_compiler.codegen.bytecode.varint import _unzz
from poet_compiler.graph.ir import KINDS, OP_CLASSES
from poet_compiler.schedule.program import Instruction, Op, Program


class _Reader:
    """Bounds-checked cursor; every read past the end is a TRUNCATED error."""

    def __init__(self, data: bytes, pos: int, end: int, lim: Limits = LIMITS[VERSION]) -> None:
        self.data, self.pos, self.end, self.lim = data, pos, end, lim

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

    def varint(self, what: str, limit: int = U32) -> int:
        """LEB128, minimal, value <= ``limit``, at most ceil(bits(limit) / 7) bytes (5 for
        the default 2**32 - 1; 10 for version 3's 64-bit byte quantities)."""
        start, value = self.pos, 0
        longest = (limit.bit_length() + 6) // 7
        for shift in range(0, 7 * longest, 7):
            byte = self.u8(what)
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                if value > limit or (byte == 0 and self.pos - start > 1):
                    raise BytecodeFormatError(E_MALFORMED, f"bad varint for {what} at byte {start} "
                                                           "(overflow or not minimal)")
                return value
        raise BytecodeFormatError(E_MALFORMED, f"bad varint for {what} at byte {start} "
                                               f"(longer than {longest} bytes)")

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
        value = _entry_value(r.varint(f"{what} entry {k}", r.lim.max_entry_code))
        if value >= r.lim.max_value:
            raise BytecodeFormatError(E_MALFORMED, f"{what}: entry {k} ({value}) overflows "
                                                   f"{(r.lim.max_value - 1).bit_length()} bits")
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
        v = r.varint(f"offset table entry {j}", r.lim.max_wide)
        gap = size_pal[v] if v < len(size_pal) else v - len(size_pal)
        if j and gap == 0:
            raise BytecodeFormatError(E_MALFORMED, f"offset table: entry {j} repeats the previous offset")
        prev += gap
        if prev >= r.lim.max_bytes:
            raise BytecodeFormatError(E_OFFSET, f"offset table: entry {j} ({prev}) exceeds the {r.lim.max_bytes} B "
                                                f"limit of format version {r.lim.version}")
        out.append(prev)
    return out


def _check_prefix(data: bytes) -> tuple[int, int, int, int]:
    """Magic, version, flags, declared length, CRC: the checks the runtime does first."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise BytecodeFormatError(E_MALFORMED, f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) < PREFIX_BYTES + 1:
        if data[:len(MAGIC)] != MAGIC[:len(data)]:
            raise BytecodeFormatError(E_MAGIC, f"not a .poet file (magic {data[:4]!r}, expected {MAGIC!r})")
        raise BytecodeFormatError(E_TRUNCATED,
                                  f"truncated: {len(data)} B is shorter than the {PREFIX_BYTES + 1} B header")
    if data[:4] != MAGIC:
        raise BytecodeFormatError(E_MAGIC, f"not a .poet file (magic {data[:4]!r}, expected {MAGIC!r})")
    version, flags = data[4], data[5]
    if version not in READ_VERSIONS:
        raise BytecodeFormatError(E_VERSION, f"unsupported .poet version {version} (this poetc reads versions "
                                             f"{', '.join(map(str, READ_VERSIONS))}: compile the schedule again)")
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
    return version, flags, crc, r.pos


def decode(data: bytes) -> DecodedProgram:
    """Parse and validate .poet bytes; any defect raises :class:`BytecodeFormatError`."""
    version, flags, crc, pos = _check_prefix(data)
    data = bytes(data)
    # Versions 2 and 4 have version 3's layout: all are read with version 3's (wider) limits.
    r = _Reader(data, pos, len(data), LIMITS[max(version, VERSION)])
    n, n_instr, arena = _read_counts(r, version, flags)
    header_end = r.pos
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
    code = _Code(r, version, offsets, _Machine(n, sizes, arena, offsets is not None, workspace))
    instrs = [code.instruction(k) for k in range(n_instr)]
    code_end = r.pos
    graph_name: str | None = None
    nodes: tuple[NodeEntry, ...] | None = None
    if flags & F_NODE_TABLE:
        graph_name, nodes = _read_node_table(r, n)
    if r.pos != r.end:
        raise BytecodeFormatError(E_MALFORMED,
                                  f"{r.end - r.pos} unexpected bytes after the last section at byte {r.pos}")
    sections = {"header": header_end, "sizes": sizes_end - header_end, "workspace": ws_end - sizes_end,
                "offsets": off_end - ws_end, "code": code_end - off_end, "node_table": r.end - code_end,
                "total": r.end}
    program = Program(n_nodes=n, instructions=tuple(instrs), arena_bytes=arena)
    return DecodedProgram(program=program, version=version, flags=flags, sizes=sizes, workspace=workspace,
                          graph_name=graph_name, nodes=nodes, crc=crc, sections=sections)


def _read_counts(r: _Reader, version: int, flags: int) -> tuple[int, int, int | None]:
    """The header's node and instruction counts and arena size, each within its limit."""
    n = r.varint("node count")
    n_instr = r.varint("instruction count")
    arena = r.varint("arena size", r.lim.max_wide) if flags & F_ARENA else None
    if arena is not None and arena >= r.lim.max_bytes:
        raise BytecodeFormatError(E_OFFSET, f"arena of {arena} B exceeds the {r.lim.max_bytes} B limit of "
                                            f"format version {version}")
    if n > MAX_NODES:
        raise BytecodeFormatError(E_COUNT, f"{n} nodes exceed the format's limit of {MAX_NODES}")
    # Every instruction takes at least one byte: a count beyond the file is a lie.
    if n_instr > r.end - r.pos:
        raise BytecodeFormatError(E_COUNT, f"{n_instr} instructions cannot fit in the {r.end - r.pos} B left")
    return n, n_instr, arena


class _Code:
    """The code section, read one instruction at a time: the delta bases of its operands
    (the previous compute, the compute frontier, the last far FREE, the last transfer, the
    last offset slot) and the :class:`_Machine` that checks each instruction."""

    def __init__(self, r: _Reader, version: int, offsets: list[int] | None, machine: _Machine) -> None:
        self.r, self.version, self.offsets, self.machine = r, version, offsets, machine
        self.prev_compute, self.frontier, self.far_free, self.last_io, self.prev_slot = -1, 0, 0, 0, 0

    def offset_at(self, k: int, op: Op, node: int, v: int) -> int:
        """Resolve placement operand v of allocation k (docs/bytecode.md, "Placement")."""
        offsets = self.offsets
        assert offsets is not None
        self.machine._node(k, node)   # a "below" placement needs the node's size
        if v:
            return self.machine.place(k, op, node, v)
        index = self.prev_slot + _unzz(self.r.varint(f"instruction {k} slot"))
        if not 0 <= index < len(offsets):
            raise BytecodeFormatError(E_OFFSET, f"instruction {k}: offset index {index} outside the "
                                                f"{len(offsets)}-entry offset table")
        self.prev_slot = index
        return offsets[index]

    def _placed(self, k: int, op: Op, node: int) -> int | None:
        """The offset of a PAGE_IN or MOVE from its placement operand (None without offsets)."""
        if self.offsets is None:
            return None
        return self.offset_at(k, op, node, self.r.varint(f"instruction {k} placement"))

    def instruction(self, k: int) -> Instruction:
        r, machine = self.r, self.machine
        at = r.pos
        first = r.u8(f"instruction {k}")
        code = first & 7
        imm = r.imm(first, f"instruction {k}")
        if code in (C_COMPUTE_SEQ, C_COMPUTE_NEW, C_COMPUTE_X):
            return self._compute(k, at, code, imm)
        if code in (C_FREE_C, C_FREE_F):
            node = (self.prev_compute if code == C_FREE_C else self.far_free) + _unzz(imm)
            ins = Instruction(Op.FREE, node, machine.touch(k, Op.FREE, node))
            if code == C_FREE_F:
                self.far_free = node
            return ins
        if code == C_PAGE_OUT:
            node = self.last_io = self.last_io + _unzz(imm)
            return Instruction(Op.PAGE_OUT, node, machine.touch(k, Op.PAGE_OUT, node))
        if code == C_PAGE_IN:
            node = self.last_io + _unzz(imm)
            off = self._placed(k, Op.PAGE_IN, node)
            machine.alloc(k, Op.PAGE_IN, node, off)
            self.last_io = node
            return Instruction(Op.PAGE_IN, node, off)
        if imm and self.version >= MOVE_VERSION:
            # MOVE (version 4): code 7 with immediate 1 + zz(node - prev_compute), then a place.
            node = self.prev_compute + _unzz(imm - 1)
            off = self._placed(k, Op.MOVE, node)
            machine.move(k, node, off)
            return Instruction(Op.MOVE, node, off)
        if imm:
            raise BytecodeFormatError(E_OPCODE, f"instruction {k} at byte {at}: FENCE with operand {imm} "
                                                f"(a MOVE needs format version {MOVE_VERSION}, not {self.version})")
        return Instruction(Op.FENCE)

    def _compute(self, k: int, at: int, code: int, imm: int) -> Instruction:
        if code == C_COMPUTE_X:
            node = self.prev_compute + 1 + _unzz(imm)
            v = self.r.varint(f"instruction {k} placement") if self.offsets is not None else 0
        else:
            node = self.prev_compute + 1 if code == C_COMPUTE_SEQ else self.frontier
            v = imm
            if self.offsets is None and imm:
                raise BytecodeFormatError(E_OPCODE, f"instruction {k} at byte {at}: nonzero operand without offsets")
        off = self.offset_at(k, Op.COMPUTE, node, v) if self.offsets is not None else None
        self.machine.alloc(k, Op.COMPUTE, node, off)
        self.prev_compute, self.frontier = node, max(self.frontier, node + 1)
        return Instruction(Op.COMPUTE, node, off)


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
