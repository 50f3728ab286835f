"""The ``.poet`` schedule bytecode: encoder, validating decoder and disassembler.

The format is specified byte by byte in ``docs/bytecode.md``; this package and the C
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
free / page transfer). An allocation (COMPUTE, PAGE_IN) or a MOVE (version 4: arena
compaction, code 7 with a nonzero immediate) names its offset by a
placement code — "at 0 or right after the r-th live buffer end", "right below the r-th
live buffer start" — or, failing that, by an offset-table slot; a FREE or PAGE_OUT
touches the buffer where that node currently lives, which the decoder tracks in an
n-entry table. The optional node table (names, kinds, op labels, op classes, input
lists) sits at the end and ``strip=True`` drops it; the device runtime never reads it.

Modules: :mod:`.format` (constants, flags, opcodes, limits, error classes, decoded
values, CRC), :mod:`.varint` (LEB128, zigzag, instruction first bytes), :mod:`.palette`
(size and workspace tables), :mod:`.machine` (the residency rules encoder and decoder
share), :mod:`.encode`, :mod:`.decode`, :mod:`.disasm`.
"""

from __future__ import annotations

from poet_compiler.codegen.bytecode.decode import decode
from poet_compiler.codegen.bytecode.disasm import disassemble, header_figures
from poet_compiler.codegen.bytecode.encode import _node_table, _offset_table, encode
from poet_compiler.codegen.bytecode.format import (
    C_COMPUTE_NEW,
    C_COMPUTE_SEQ,
    C_COMPUTE_X,
    C_FENCE,
    C_FREE_C,
    C_FREE_F,
    C_PAGE_IN,
    C_PAGE_OUT,
    CODE_NAMES,
    E_COUNT,
    E_CRC,
    E_FLAGS,
    E_LENGTH,
    E_MAGIC,
    E_MALFORMED,
    E_NODE,
    E_OFFSET,
    E_OPCODE,
    E_OVERLAP,
    E_STATE,
    E_TRUNCATED,
    E_VERSION,
    F_ARENA,
    F_KNOWN,
    F_NODE_TABLE,
    F_OFFSETS,
    F_SIZES,
    F_WORKSPACE,
    FLAG_NAMES,
    IMM_ESCAPE,
    LIMITS,
    MAGIC,
    MAX_ARENA,
    MAX_NODES,
    MAX_VALUE,
    MOVE_VERSION,
    PREFIX_BYTES,
    READ_VERSIONS,
    U32,
    U64,
    VERSION,
    BytecodeFormatError,
    DecodedProgram,
    Limits,
    NodeEntry,
    file_crc,
)
from poet_compiler.codegen.bytecode.palette import (
    _entry_code,
    _entry_value,
    _index_bits,
    _pack,
    _palette,
    _palette_bytes,
    _size_section,
    _workspace_section,
)
from poet_compiler.codegen.bytecode.varint import _first_byte, _leb128, _unzz, _uvarint, _zz

__all__ = [
    "C_COMPUTE_NEW", "C_COMPUTE_SEQ", "C_COMPUTE_X", "C_FENCE", "C_FREE_C", "C_FREE_F", "C_PAGE_IN", "C_PAGE_OUT",
    "CODE_NAMES", "E_COUNT", "E_CRC", "E_FLAGS", "E_LENGTH", "E_MAGIC", "E_MALFORMED", "E_NODE", "E_OFFSET",
    "E_OPCODE", "E_OVERLAP", "E_STATE", "E_TRUNCATED", "E_VERSION", "F_ARENA", "F_KNOWN", "F_NODE_TABLE",
    "F_OFFSETS", "F_SIZES", "F_WORKSPACE", "FLAG_NAMES", "IMM_ESCAPE", "LIMITS", "MAGIC", "MAX_ARENA", "MAX_NODES",
    "MAX_VALUE", "MOVE_VERSION", "PREFIX_BYTES", "READ_VERSIONS", "U32", "U64", "VERSION", "BytecodeFormatError",
    "DecodedProgram", "Limits", "NodeEntry", "decode",
    "disassemble", "encode", "file_crc", "header_figures",
    # Internals the tests use to hand-assemble files the encoder refuses to write.
    "_entry_code", "_entry_value", "_first_byte", "_index_bits", "_leb128", "_node_table", "_offset_table",
    "_pack", "_palette", "_palette_bytes", "_size_section", "_unzz", "_uvarint", "_workspace_section", "_zz",
]
