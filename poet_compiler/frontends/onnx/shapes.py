"""Parsing ``--input-shape NAME=D0,D1,...`` options (shared by every command that
reads ONNX files)."""

from __future__ import annotations

from collections.abc import Iterable

from poet_compiler.errors import FrontendError


def parse_input_shapes(specs: Iterable[str]) -> dict[str, tuple[int, ...]]:
    """``["x=1,3,32,32", "ids=2x64"]`` -> ``{"x": (1, 3, 32, 32), "ids": (2, 64)}``."""
    out: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        name, sep, dims = spec.partition("=")
        name = name.strip()
        if not sep or not name or not dims.strip():
            raise FrontendError(f"--input-shape '{spec}': expected NAME=D0,D1,... (e.g. input=1,3,32,32)")
        try:
            shape = tuple(int(d) for d in dims.replace("x", ",").split(",") if d.strip())
        except ValueError:
            raise FrontendError(f"--input-shape '{spec}': dimensions must be positive integers") from None
        if not shape or any(d <= 0 for d in shape):
            raise FrontendError(f"--input-shape '{spec}': dimensions must be positive integers")
        if name in out:
            raise FrontendError(f"--input-shape: '{name}' given twice")
        out[name] = shape
    return out
