"""The integer primitives of the int8 training step (docs/int8.md, "Primitives").

Every function here is an exact integer function: its operands are Python ints or NumPy
integer arrays (computed in int64, which holds every intermediate the spec allows), its
rounding rule is named, and its saturation is explicit. ``wrap32`` is the one place where
a value is reduced modulo 2**32: the spec's int32 accumulators wrap, which keeps integer
addition associative, so C kernels may sum in any order and tile freely.

``requantize`` is CMSIS-NN's ``arm_nn_requantize`` in its default (double rounding) build:
``arm_nn_doubling_high_mult_no_sat`` then ``arm_nn_divide_by_power_of_two``. ``mul_shift``
is the single-rounding 64-bit form the backward and the update use. Floats appear only in
:func:`quantize_multiplier`, which runs on the host when the scales are fixed.
"""

from __future__ import annotations

import math

import numpy as np

INT8_MIN, INT8_MAX = -128, 127
GRAD_MAX = 127          # gradients and weights are symmetric: [-127, 127], so negation never saturates
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1

IntArray = np.ndarray


def as_i64(x: IntArray | int) -> IntArray:
    """``x`` as an int64 array (the spec's integers never need more)."""
    return np.asarray(x, dtype=np.int64)


def wrap32(x: IntArray | int) -> IntArray:
    """``x`` reduced modulo 2**32 into [-2**31, 2**31): two's complement int32 wrap-around."""
    return ((as_i64(x) + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def saturate(x: IntArray | int, lo: int, hi: int) -> IntArray:
    return np.clip(as_i64(x), lo, hi)


def doubling_high_mult(a: IntArray | int, m: int) -> IntArray:
    """``arm_nn_doubling_high_mult_no_sat``: floor((a * m + 2**30) / 2**31), a and m int32.

    The rounding is half up (towards +inf) on the doubled product; with m >= 0 the result
    fits int32 (the only overflow, a = m = -2**31, cannot occur for a multiplier)."""
    return (as_i64(a) * int(m) + (1 << 30)) >> 31


def divide_by_pot(a: IntArray | int, exponent: int | IntArray) -> IntArray:
    """``arm_nn_divide_by_power_of_two``: a / 2**exponent rounded half away from zero,
    exponent in [0, 31]."""
    a = as_i64(a)
    e = as_i64(exponent)
    mask = (as_i64(1) << e) - 1
    remainder = a & mask
    threshold = (mask >> 1) + (a < 0)
    return (a >> e) + (remainder > threshold)


def requantize(acc: IntArray | int, multiplier: IntArray | int, shift: IntArray | int) -> IntArray:
    """``arm_nn_requantize`` (CMSIS-NN default build): acc * multiplier * 2**shift, rounded.

    ``shift`` > 0 shifts ``acc`` left first (wrapping, as the int32 C code does);
    ``shift`` < 0 is a rounding right shift after the doubling high multiply. Per-channel
    ``multiplier``/``shift`` broadcast against ``acc``."""
    shift = as_i64(shift)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    shifted = wrap32(as_i64(acc) << left)
    high = (shifted * as_i64(multiplier) + (1 << 30)) >> 31
    return divide_by_pot(high, right)


def rshift_round(a: IntArray | int, n: int | IntArray) -> IntArray:
    """a / 2**n rounded half away from zero (n >= 0; ``divide_by_pot`` for any int64)."""
    return divide_by_pot(a, n)


def mul_shift(x: IntArray | int, multiplier: IntArray | int, n: IntArray | int) -> IntArray:
    """floor((x * multiplier + 2**(n-1)) / 2**n): x * multiplier / 2**n rounded half up.

    x int32, multiplier in [0, 2**31), n in [1, 62]: the product fits int64 and so does
    the rounding term, on the device as here (one SMULL and a 64-bit shift). Callers keep
    n in that range with :func:`clamp_shift`; results are saturated by the caller."""
    x = as_i64(x)
    n = as_i64(n)
    if np.any(n < 1) or np.any(n > 62):
        raise ValueError(f"mul_shift: n must be in [1, 62], got {n.min()}..{n.max()}")
    return (x * as_i64(multiplier) + (as_i64(1) << (n - 1))) >> n


def clamp_shift(n: IntArray | int) -> IntArray:
    """A right shift of :func:`mul_shift` limited to [1, 62]: beyond 62 every result of an
    int32 times a multiplier < 2**31 rounds to 0 anyway; below 1 the caller's value is
    more than 2**31 times its target range and saturates anyway."""
    return np.clip(as_i64(n), 1, 62)


def nbits(a: IntArray | int) -> IntArray:
    """Bit length of a non-negative integer (0 for 0): 32 - clz(a) on the device."""
    a = as_i64(a)
    if np.any(a < 0):
        raise ValueError("nbits of a negative value")
    out = np.zeros(a.shape, dtype=np.int64)
    v = a.copy()
    for step in (32, 16, 8, 4, 2, 1):
        big = v >= (1 << step)
        out += np.where(big, step, 0)
        v = np.where(big, v >> step, v)
    return out + (v > 0)


def abs_max(a: IntArray) -> int:
    """max |a| over an array (0 when empty), capped at 2**31 - 1 as the device's uint32
    running maximum of a saturated magnitude is."""
    if a.size == 0:
        return 0
    return int(min(int(np.max(np.abs(as_i64(a)))), INT32_MAX))


def quantize_multiplier(real: float) -> tuple[int, int]:
    """(multiplier, shift) with real ~= multiplier * 2**(shift - 31), multiplier in
    [2**30, 2**31): TFLite's QuantizeMultiplier (frexp, round half away from zero). Host
    only: the device receives the two integers."""
    if not real > 0.0 or not math.isfinite(real):
        if real == 0.0:
            return 0, 0
        raise ValueError(f"a multiplier must be a positive finite number, got {real}")
    mantissa, exponent = math.frexp(real)
    q = math.floor(mantissa * (1 << 31) + 0.5)
    if q == (1 << 31):
        q //= 2
        exponent += 1
    if exponent < -31:
        return 0, 0
    return q, exponent
