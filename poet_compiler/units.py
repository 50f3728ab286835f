"""Parsing of human sizes and durations: ``256k``, ``256KiB``, ``1.5M``, ``120ms``.

Binary multiples throughout (``k`` = 1024), as RAM sizes are quoted that way on the
datasheets poetc users read.
"""

from __future__ import annotations

import math
import re

from poet_compiler.errors import BudgetError

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_SIZE_MULT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

_TIME_RE = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*(s|ms|us|µs|ns|min)?\s*$", re.IGNORECASE)
_TIME_MULT = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0}


def parse_size(text: str | int | float, what: str = "size") -> int:
    """Parse ``256k``/``256KiB``/``1.5M``/``4096`` into a positive number of bytes."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text <= 0:
            raise BudgetError(f"{what} must be positive, got {text}")
        return text
    m = _SIZE_RE.match(str(text))
    if not m or (m.group(3) and m.group(3).lower() == "i"):
        raise BudgetError(
            f"{what} {text!r} is not a size (examples: 262144, 256k, 256KiB, 1.5M)"
        )
    value = float(m.group(1)) * _SIZE_MULT[m.group(2).lower()]
    if value <= 0 or not math.isfinite(value):
        raise BudgetError(f"{what} must be positive, got {text!r}")
    return int(round(value))


def parse_memory_limit(text: str | int | None, default: int | None) -> int | None:
    """``--memory-limit``: a size (``4G``, ``1.5G``, bytes) or ``none`` (no limit);
    None gives ``default``."""
    if text is None:
        return default
    if isinstance(text, str) and text.strip().lower() in ("none", "off", "unlimited"):
        return None
    return parse_size(text, "memory limit")


def parse_duration(text: str | float, what: str = "duration") -> float:
    """Parse ``120ms``/``2.5s``/``0.3`` (seconds) into a positive float of seconds."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = _TIME_RE.match(str(text))
        if not m:
            raise BudgetError(f"{what} {text!r} is not a duration (examples: 120ms, 2.5s, 1.5x)")
        value = float(m.group(1)) * _TIME_MULT[(m.group(2) or "s").lower()]
    if value <= 0 or not math.isfinite(value):
        raise BudgetError(f"{what} must be positive, got {text!r}")
    return value


def parse_relative(text: str, suffix: str) -> float | None:
    """Return the factor of ``1.5x`` / ``50%`` style text, or None if it has no suffix."""
    s = str(text).strip().lower()
    if not s.endswith(suffix):
        return None
    try:
        value = float(s[: -len(suffix)])
    except ValueError:
        raise BudgetError(f"{text!r} is not a number followed by {suffix!r}") from None
    if value <= 0 or not math.isfinite(value):
        raise BudgetError(f"{text!r} must be positive")
    return value / 100.0 if suffix == "%" else value


def format_bytes(n: float) -> str:
    """Short human form, binary multiples: 262144 -> '256.0 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
