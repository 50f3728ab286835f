"""Palettes of byte sizes: entry codes, packed indices, the size and workspace tables
(docs/bytecode.md, "Size table and workspace table")."""

from __future__ import annotations

from poet_compiler.codegen.bytecode.varint import _leb128, _uvarint


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
    """LEB128 of a palette entry code (up to 64 bits; 35 in version 2)."""
    return _leb128(value)


def _palette(values: list[int]) -> list[int]:
    """Distinct values, most frequent first (ties: smaller value first)."""
    freq: dict[int, int] = {}
    for v in values:
        freq[v] = freq.get(v, 0) + 1
    return sorted(freq, key=lambda v: (-freq[v], v))


def _palette_bytes(palette: list[int]) -> bytes:
    """count (varint), then one entry code (varint, up to 64 bits) per entry."""
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
