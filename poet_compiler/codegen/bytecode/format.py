"""The ``.poet`` format's constants, error classes and decoded values (docs/bytecode.md)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from poet_compiler.errors import BytecodeError
from poet_compiler.schedule.program import Program

MAGIC = b"POET"
VERSION = 3            # what encode() writes for a program without MOVE (byte for byte as before)
MOVE_VERSION = 4       # version 3 + MOVE: what encode() writes for a program with one
READ_VERSIONS = (2, 3, 4)  # what decode() reads (docs/bytecode.md, "Versions")
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
#                     MOVE prev_compute + d to a placed offset      [1 + zz(d)] [slot]
#                     (version 4: code 7 with a nonzero immediate)
CODE_NAMES = ("COMPUTE_SEQ", "COMPUTE_NEW", "COMPUTE_X", "FREE_C", "FREE_F",
              "PAGE_OUT", "PAGE_IN", "FENCE")

IMM_ESCAPE = 31
U32 = 0xFFFFFFFF
U64 = (1 << 64) - 1
MAX_NODES = 1 << 20     # far above any real graph; bounds the decoder's work


@dataclass(frozen=True)
class Limits:
    """The width limits of one format version; the layout is the same in versions 2, 3 and
    4 (the decoders apply version 3's to all; the encoder keeps to the version it writes).

    ``max_bytes``: the arena and every offset are below it (``POET_E_OFFSET``);
    ``max_value``: every size / workspace palette value is below it (``POET_E_MALFORMED``);
    ``max_entry_code``: the largest palette entry code; ``max_wide``: the largest arena
    varint and offset-table gap code. A varint is at most ``ceil(bits(limit) / 7)``
    bytes long and at most its limit (``POET_E_MALFORMED``); every other varint (counts,
    lengths, immediates, placement codes, slots) is at most 2^32 - 1.
    """

    version: int
    max_bytes: int
    max_value: int
    max_entry_code: int
    max_wide: int


# Version 2: offsets share a 32-bit word with two state bits on the device (< 1 GiB);
# encode(version=2) keeps to these limits, so that version-2 runtimes read the file.
# Version 3: any RAM size. Version 4: version 3 plus MOVE, same limits. The decoders read
# every version with version 3's limits.
# Byte quantities are below 2^59 (512 PiB), so that a palette entry code
# ((v >> t) << 5 | t) fits 64 bits and offset + size + workspace never overflows
# 64-bit arithmetic; varints of those quantities take up to 10 bytes.
LIMITS = {
    2: Limits(2, max_bytes=1 << 30, max_value=1 << 32, max_entry_code=(1 << 35) - 1, max_wide=U32),
    3: Limits(3, max_bytes=1 << 59, max_value=1 << 59, max_entry_code=U64, max_wide=U64),
    4: Limits(4, max_bytes=1 << 59, max_value=1 << 59, max_entry_code=U64, max_wide=U64),
}
MAX_ARENA = LIMITS[VERSION].max_bytes   # arena and offsets: < MAX_ARENA (this version)
MAX_VALUE = LIMITS[VERSION].max_value   # output and workspace bytes of a node: < MAX_VALUE

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


# --------------------------------------------------------------------------- CRC
def file_crc(data: bytes) -> int:
    """CRC-32 of a whole file except its CRC field (bytes 6..9): magic, version and
    flags are covered too, so no single flipped bit anywhere goes unnoticed."""
    return zlib.crc32(data[PREFIX_BYTES:], zlib.crc32(data[:6])) & U32
