"""Build the reference kernels (runtime/c/kernels) as a host shared library for ctypes.

Shared by the kernel tests: one gcc call per test session, into a temporary directory.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

KERNELS = Path(__file__).resolve().parents[2] / "runtime" / "c" / "kernels"


def build(out_dir: Path) -> ctypes.CDLL:
    """Compile every kernel source into ``out_dir/libpoet_kernels.so`` and load it."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    lib = out_dir / "libpoet_kernels.so"
    sources = sorted(str(p) for p in KERNELS.glob("*.c"))
    # -ffp-contract=off: no fused multiply-adds, so the host rounds like the plain C.
    cmd = [cc, "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off", "-shared", "-fPIC",
           f"-I{KERNELS}", *sources, "-o", str(lib), "-lm"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(lib))


def fptr(a: np.ndarray) -> ctypes.c_void_p:
    """Pointer to a float32/int32 C-contiguous numpy array (the caller keeps it alive)."""
    assert a.flags.c_contiguous
    return ctypes.c_void_p(a.ctypes.data)


def i32(values: list[int]) -> ctypes.Array:
    return (ctypes.c_int32 * max(len(values), 1))(*values)
