"""The int8 update rule (docs/int8.md, "Update"): how much of an update reaches the weights
under each rounding, the residual's invariants, the momentum's decay and the channel rule
with a residual."""

from __future__ import annotations

import numpy as np
import pytest

from poet_compiler.quant import exponents, update
from poet_compiler.quant.fixedpoint import rshift_round
from poet_compiler.quant.qmodel import Conv

ONE = 1 << update.FRACTION_BITS  # one LSB of a weight, in Q16


def _conv(weight: np.ndarray) -> Conv:
    co = weight.shape[0]
    return Conv("c", "x", "y", weight.astype(np.int8), np.zeros(co, np.int32), np.ones(co))


def _lost_fraction(rounding: update.Rounding, u: np.ndarray, steps: int) -> float:
    """1 - (what reached the weights) / (what was asked), for ``steps`` updates ``u`` (Q16)
    of weights at 0, far from any channel rescale (the codes stay in [-127, 127])."""
    q = np.zeros(u.shape, np.int64)
    r = np.zeros(u.shape, np.int64)
    for s in range(steps):
        if rounding is update.Rounding.RESIDUAL:
            q, r = update.split(update.with_residual(q, r, u))
        else:
            q = update.apply(q, u, seed=1, step=s, tensor=0, limit=127, rounding=rounding)
    reached = -(q.sum() + r.sum() / 2 ** update.RESIDUAL_BITS)
    return 1.0 - float(reached) / (float(u.sum()) * steps / ONE)


@pytest.mark.parametrize("rounding,lost", [
    (update.Rounding.TRUNCATE, 1.0),   # TTE's C cast: every update below one LSB is lost
    (update.Rounding.NEAREST, 1.0),    # below half an LSB: lost too
])
def test_rounding_without_memory_loses_small_updates(rounding, lost):
    u = np.full(4096, int(0.3 * ONE))
    assert _lost_fraction(rounding, u, 50) == pytest.approx(lost)


def test_stochastic_rounding_loses_nothing_on_average():
    u = np.full(4096, int(0.3 * ONE))
    assert abs(_lost_fraction(update.Rounding.STOCHASTIC, u, 50)) < 0.02


def test_the_residual_loses_nothing_above_its_resolution():
    rng = np.random.default_rng(0)
    u = rng.integers(ONE // 200, ONE // 3, 4096)       # 0.005 to 0.33 LSB a step
    assert abs(_lost_fraction(update.Rounding.RESIDUAL, u, 50)) < 1e-3


def test_the_residual_is_exact_in_q8():
    """q * 256 + r is the starting value minus the sum of the Q8-rounded updates, bit for bit,
    with q the nearest code and r in int8."""
    rng = np.random.default_rng(1)
    q0 = rng.integers(-100, 101, 1000)
    q, r = q0.copy(), np.zeros(1000, np.int64)
    total = np.zeros(1000, np.int64)
    for _ in range(40):
        u = rng.integers(-ONE // 2, ONE // 2, 1000)
        total += rshift_round(u, update.FRACTION_BITS - update.RESIDUAL_BITS)
        q, r = update.split(update.with_residual(q, r, u))
        assert np.all((r >= -128) & (r <= 127)) and np.all(np.abs(q) <= 127)
    assert np.array_equal(q * 256 + r, q0 * 256 - total)


def test_split_rounds_to_the_nearest_code():
    w = np.array([0, 127, 128, 129, -128, -129, 383, -384, 127 * 256 + 127, 200 * 256])
    q, r = update.split(w)
    assert q.tolist() == [0, 0, 1, 1, 0, -1, 1, -1, 127, 127]
    assert r.tolist() == [0, 127, -128, -127, -128, 127, 127, -128, 127, 127]  # the last saturated


def test_momentum_decays_to_zero():
    """A buffer no longer fed reaches 0: rounded to nearest, |buf| <= 5 would stay at
    mu = 0.9 and keep moving its weight every step."""
    mu = int(np.floor(0.9 * (1 << 15) + 0.5))
    buf = np.array([5, -5, 1, 32767, -32767])
    zero = np.zeros(5, np.int64)
    for _ in range(120):
        buf = update.momentum(buf, zero, mu, 32767)
    assert buf.tolist() == [0] * 5
    # fed a constant, it settles within 10 units (the truncation's bias) of u / (1 - mu)
    u = np.full(1, 100 * 256)  # 100 units of Q8 each step
    buf = np.zeros(1, np.int64)
    for _ in range(200):
        buf = update.momentum(buf, u, mu, 32767)
    assert 990 <= int(buf[0]) <= 1000


def test_channel_rule_carries_the_residual():
    """A channel that grows halves its Q8 weights (the residual with them): the value is kept
    to half a Q8 unit; the other channel is untouched."""
    node = _conv(np.zeros((2, 1, 1, 2)))
    w = np.array([[[[130 * 256 + 77, -3 * 256 + 5]]], [[[100 * 256 - 1, 40 * 256]]]])
    out = exponents.rescale_channels(node, w, update.RESIDUAL_BITS)
    assert node.weight_exponent.tolist() == [1, 0]
    assert np.abs(out[0] * 2 - w[0]).max() <= 1
    assert np.array_equal(out[1], w[1])
    q, r = update.split(out)
    assert np.abs(q).max() <= 127
