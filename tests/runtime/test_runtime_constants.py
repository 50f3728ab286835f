"""The C runtime's opcode and format constants are the Python format's: read from
runtime/c/poet_runtime.h and poet_runtime.c (no compiler needed) and compared with
poet_compiler/codegen/bytecode/format.py and the Op enum, so that a change on one side
without the other fails here rather than on a device."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from poet_compiler.codegen.bytecode import format as fmt
from poet_compiler.schedule.program import Op

RUNTIME = Path(__file__).resolve().parents[2] / "runtime" / "c"
HEADER = (RUNTIME / "poet_runtime.h").read_text(encoding="utf-8")
SOURCE = (RUNTIME / "poet_runtime.c").read_text(encoding="utf-8")


def _c_int(text: str) -> int:
    """A C integer literal (decimal or hex, with a ``u`` suffix) or a parenthesized one."""
    return int(text.strip().strip("()").rstrip("uUlL"), 0)


def _defines(text: str) -> dict[str, int]:
    """``#define NAME <integer literal>`` lines."""
    return {m[1]: _c_int(m[2]) for m in re.finditer(r"^#define\s+(\w+)\s+(\(?(?:0x[0-9A-Fa-f]+|\d+)[uUlL]*\)?)\b",
                                                    text, re.M)}


def _enum(text: str, name: str | None) -> dict[str, int]:
    """The members of ``enum name { ... }`` (``None``: the first anonymous enum whose first
    member starts with ``C_``), with C's implicit numbering."""
    pattern = rf"enum\s+{name}\s*\{{(.*?)\}}" if name else r"enum\s*\{\s*(C_.*?)\}"
    body = re.search(pattern, text, re.S)
    assert body is not None, f"no enum {name or 'C_...'} in the runtime"
    members: dict[str, int] = {}
    value = -1
    for item in re.sub(r"/\*.*?\*/", "", body[1], flags=re.S).split(","):
        if not item.strip():
            continue
        key, _, given = item.partition("=")
        value = _c_int(given) if given.strip() else value + 1
        members[key.strip()] = value
    return members


def test_the_opcodes_reported_to_the_caller_are_the_op_enum() -> None:
    assert _enum(HEADER, "poet_op") == {f"POET_OP_{op.name}": int(op) for op in Op}


def test_the_instruction_codes_are_the_formats() -> None:
    """The low 3 bits of an instruction's first byte, in format.py's order (CODE_NAMES),
    and the escape of its 5-bit immediate."""
    codes = _enum(SOURCE, None)
    python = {name: getattr(fmt, "C_" + name) for name in fmt.CODE_NAMES}
    assert list(codes.values()) == list(python.values()) == list(range(len(fmt.CODE_NAMES)))
    # The C names abbreviate the three COMPUTE codes (C_SEQ, C_NEW, C_X); the rest match.
    assert [n.removeprefix("C_") for n in codes][3:] == list(fmt.CODE_NAMES)[3:]
    assert _defines(SOURCE)["IMM_ESCAPE"] == fmt.IMM_ESCAPE
    assert _defines(SOURCE)["PREFIX"] == fmt.PREFIX_BYTES


def test_the_header_flags_versions_and_limits_are_the_formats() -> None:
    defs = _defines(HEADER)
    flags = {name: bit for bit, name in fmt.FLAG_NAMES.items()}
    assert {k.removeprefix("POET_F_"): v for k, v in defs.items() if k.startswith("POET_F_")} == flags
    assert f"flags & ~0x{fmt.F_KNOWN:X}u" in SOURCE, "the runtime's mask of known flags is not F_KNOWN"
    assert defs["POET_VERSION"] == max(fmt.READ_VERSIONS) and defs["POET_VERSION_MIN"] == min(fmt.READ_VERSIONS)
    assert defs["POET_VERSION_MOVE"] == fmt.MOVE_VERSION
    assert defs["POET_FORMAT_MAX_BYTES"] == fmt.LIMITS[fmt.VERSION].max_bytes
    assert defs["POET_MAX_NODES"] == fmt.MAX_NODES


@pytest.mark.parametrize("name", [v for k, v in vars(fmt).items() if k.startswith("E_")])
def test_every_error_class_of_the_decoder_is_a_runtime_status(name: str) -> None:
    assert name in _enum(HEADER, "poet_status")
