"""Varints, zigzag deltas and instruction first bytes (docs/bytecode.md, "Conventions")."""

from __future__ import annotations

from poet_compiler.codegen.bytecode.format import E_COUNT, IMM_ESCAPE, U32, BytecodeFormatError


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
