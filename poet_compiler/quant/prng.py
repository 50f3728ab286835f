"""The update's random numbers: a counter-based generator (docs/int8.md, "Random numbers").

The draw for element ``i`` of parameter tensor ``t`` at optimizer step ``step`` is a pure
function of (seed, step, t, i): MurmurHash3's 32-bit finalizer ``fmix32`` applied to a
per-(step, tensor) key plus the element index. A stream generator (xorshift32) would make
the bits depend on the order in which the schedule runs the update nodes and on how a C
kernel tiles a tensor; a counter-based draw depends on neither, so recomputation, paging
and any loop order give the same weights. Cost on a Cortex-M: two MUL, three EOR with a
shifted operand and an ADD per element.
"""

from __future__ import annotations

import numpy as np

DEFAULT_SEED = 0x5EED
GOLDEN = 0x9E3779B9  # 2**32 / golden ratio: spreads consecutive tensor ids over the key space
_M1, _M2 = 0x85EBCA6B, 0xC2B2AE35


def fmix32(x: np.ndarray | int) -> np.ndarray:
    """MurmurHash3's finalizer on uint32 (wrapping multiplies): a bijection with full avalanche."""
    v = np.asarray(x, dtype=np.uint64) & 0xFFFFFFFF
    v ^= v >> 16
    v = (v * _M1) & 0xFFFFFFFF
    v ^= v >> 13
    v = (v * _M2) & 0xFFFFFFFF
    v ^= v >> 16
    return v.astype(np.uint32)


def tensor_key(seed: int, step: int, tensor: int) -> int:
    """key = fmix32(fmix32(seed + step) + tensor * GOLDEN), all mod 2**32."""
    inner = int(fmix32((seed + step) & 0xFFFFFFFF))
    return int(fmix32((inner + tensor * GOLDEN) & 0xFFFFFFFF))


def draws(seed: int, step: int, tensor: int, count: int) -> np.ndarray:
    """The uint32 draws of elements 0..count-1 (C order) of a tensor: fmix32(key + i)."""
    key = tensor_key(seed, step, tensor)
    idx = (np.arange(count, dtype=np.uint64) + key) & 0xFFFFFFFF
    return fmix32(idx)
