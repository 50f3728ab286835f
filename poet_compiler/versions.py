"""The versions of poetc and of the libraries that decide its answers.

Recorded in every sidecar report (``versions``) and printed by ``poetc --version``: with
the same inputs, flags, thread count and these versions, a schedule is reproducible.
Read from the installed distributions' metadata, so no solver library is imported
(highspy and OR-Tools may not share a process).
"""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version

# Report key -> distribution name.
DISTRIBUTIONS = {"poetc": "poet-compiler", "torch": "torch", "ortools": "ortools", "highspy": "highspy",
                 "onnx": "onnx", "numpy": "numpy"}


def versions() -> dict[str, str]:
    """``{"poetc": ..., "torch": ..., "ortools": ..., "highspy": ..., "onnx": ..., "numpy": ...,
    "python": ...}``; "not installed" for a missing one."""
    out: dict[str, str] = {}
    for key, dist in DISTRIBUTIONS.items():
        try:
            out[key] = version(dist)
        except PackageNotFoundError:
            out[key] = "not installed"
    out["python"] = platform.python_version()
    return out
