"""The int8 primitives against hand-computed values and CMSIS-NN's documented convention
(arm_nn_doubling_high_mult_no_sat: (a*m + 2**30) >> 31; arm_nn_divide_by_power_of_two:
half away from zero; arm_nn_requantize: left shift, high multiply, rounding right shift)."""

from __future__ import annotations

import numpy as np
import pytest

from poet_compiler.quant import fixedpoint as fp
from poet_compiler.quant import prng


def test_doubling_high_mult_rounds_half_up():
    # 2**30 * 2**30 = 2**60; doubled high word = 2**29 exactly.
    assert int(fp.doubling_high_mult(1 << 30, 1 << 30)) == 1 << 29
    # a*m = 2**30 is exactly half a unit of 2**31: rounds up to 1; -2**30 rounds up to 0.
    assert int(fp.doubling_high_mult(1 << 15, 1 << 15)) == 1
    assert int(fp.doubling_high_mult(-(1 << 15), 1 << 15)) == 0
    # -(2**30 + 1) is just past the half: floor((-2**30 - 1 + 2**30) / 2**31) = -1.
    assert int(fp.doubling_high_mult(-((1 << 30) + 1), 1)) == -1


@pytest.mark.parametrize("a,e,expected", [
    (5, 1, 3), (-5, 1, -3), (4, 1, 2), (-4, 1, -2), (7, 2, 2), (-7, 2, -2), (6, 2, 2), (-6, 2, -2), (9, 0, 9),
])
def test_divide_by_pot_rounds_half_away_from_zero(a, e, expected):
    assert int(fp.divide_by_pot(a, e)) == expected


def test_requantize_matches_real_multiplication():
    # 0.75 = 0.75 * 2**0: multiplier 0.75 * 2**31, shift 0.
    m, s = fp.quantize_multiplier(0.75)
    assert (m, s) == (3 << 29, 0)
    assert int(fp.requantize(100, m, s)) == 75
    # 0.001: a right shift; 12345 * 0.001 = 12.345 -> 12.
    m, s = fp.quantize_multiplier(0.001)
    assert s < 0 and int(fp.requantize(12345, m, s)) == 12
    # 1.5 = 0.75 * 2**1: shift 1 shifts acc left first, then only the high multiply rounds
    # (half up): -7 * 1.5 = -10.5 -> -10.
    m, s = fp.quantize_multiplier(1.5)
    assert s == 1 and int(fp.requantize(-7, m, s)) == -10


def test_requantize_hand_computed_double_rounding():
    # acc 3, multiplier 2**30 (0.5), shift -1 (0.25 in all): high = (3*2**30 + 2**30) >> 31 = 2
    # (1.5 rounded up), then 2 / 2 = 1. A single rounding of 0.75 would also give 1; with acc 5:
    # high = (5*2**30 + 2**30) >> 31 = 3, 3 / 2 = 1.5 -> 2 (away from zero), single rounding 1.25 -> 1.
    assert int(fp.requantize(3, 1 << 30, -1)) == 1
    assert int(fp.requantize(5, 1 << 30, -1)) == 2


def test_quantize_multiplier_is_tflite_convention():
    for real in (1e-5, 0.3, 0.5, 0.999999999, 1.0, 3.7):
        m, s = fp.quantize_multiplier(real)
        assert (1 << 30) <= m < (1 << 31)
        assert abs(m * 2.0 ** (s - 31) - real) <= real * 2.0 ** -30
    assert fp.quantize_multiplier(0.0) == (0, 0)


def test_mul_shift_single_rounding_and_range():
    assert int(fp.mul_shift(3, 1 << 30, 31)) == 2       # 1.5 -> 2 (half up)
    assert int(fp.mul_shift(-3, 1 << 30, 31)) == -1     # -1.5 -> -1 (half up)
    assert int(fp.mul_shift((1 << 31) - 1, (1 << 31) - 1, 62)) == 1
    with pytest.raises(ValueError):
        fp.mul_shift(1, 1, 63)


def test_wrap32_is_twos_complement():
    assert int(fp.wrap32(1 << 31)) == -(1 << 31)
    assert int(fp.wrap32(-(1 << 31) - 1)) == (1 << 31) - 1
    # wrapped sums are associative: any order, same bits
    rng = np.random.default_rng(0)
    v = rng.integers(-(1 << 31), 1 << 31, 1000)
    assert int(fp.wrap32(v.sum())) == int(fp.wrap32(fp.wrap32(v[:500].sum()) + fp.wrap32(v[500:][::-1].sum())))


def test_nbits():
    assert [int(x) for x in fp.nbits(np.array([0, 1, 2, 3, 127, 128, (1 << 31) - 1]))] == [0, 1, 2, 2, 7, 8, 31]


def test_fmix32_reference_values():
    # MurmurHash3 fmix32 by hand: fmix32(0) = 0; fmix32(1) = 0x514E28B7 (the public reference value).
    assert int(prng.fmix32(0)) == 0
    assert int(prng.fmix32(1)) == 0x514E28B7


def test_draws_depend_only_on_the_counter():
    a = prng.draws(7, 3, 2, 100)
    assert np.array_equal(a[40:60], prng.draws(7, 3, 2, 100)[40:60])
    assert not np.array_equal(a, prng.draws(7, 4, 2, 100))
    assert not np.array_equal(a, prng.draws(7, 3, 3, 100))
    # uniform enough for rounding: the top 16 bits average to 2**15 within 2 %
    top = prng.draws(1, 0, 0, 1 << 16).astype(np.int64) >> 16
    assert abs(top.mean() - (1 << 15)) < 0.02 * (1 << 15)
