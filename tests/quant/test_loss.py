"""The integer softmax cross-entropy (docs/int8.md, "Loss") against float64 exp and
PyTorch's cross-entropy, at several logit exponents."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from poet_compiler.quant import loss


@pytest.mark.parametrize("scale", [0.002, 0.04, 0.5])
@pytest.mark.parametrize("k", [-3, 0, 2])
def test_exp_is_within_one_q8_step_of_float(scale, k):
    m_e, sh_e = loss.log2e_multiplier(scale)
    d = np.arange(256)
    got = loss.exp_q15(d, m_e, loss.exp_shift(sh_e, k))
    want = 32768.0 * np.exp(-scale * 2.0 ** k * d)
    assert int(got[0]) == 32768
    # t rounded to 1/512 of a bit (0.14 %), then the Q15 value rounded; beyond 2**-15, 0
    assert np.all(np.abs(got - want) <= want * 0.0014 + 1.0)


def test_exp_edge_shifts():
    d = np.array([0, 1, 255])
    assert loss.exp_q15(d, 1 << 30, 0).tolist() == [32768, 0, 0]      # a step of > 2**22 nats
    assert loss.exp_q15(d, 1 << 30, 63).tolist() == [32768] * 3        # t rounds to 0


def test_loss_and_gradient_match_pytorch():
    rng = np.random.default_rng(0)
    scale, k = 0.01, 1  # gaps up to 5.1 nats: below the Q15 floor of exp (10.4 nats)
    codes = rng.integers(-128, 128, (16, 10))
    labels = rng.integers(0, 10, 16)
    m_e, sh_e = loss.log2e_multiplier(scale)
    n = loss.exp_shift(sh_e, k)
    z = torch.tensor(codes * scale * 2.0 ** k, requires_grad=True)
    ref = F.cross_entropy(z, torch.tensor(labels), reduction="sum")
    ref.backward()
    assert abs(loss.loss_float(loss.loss_q16(codes, labels, m_e, n)) - float(ref) / 16) < 0.01
    g, e = loss.loss_grad(codes, labels, m_e, n)
    assert np.abs(g).max() > 63                             # the exponent uses the int8 range
    assert np.abs(g * 2.0 ** -e - z.grad.numpy()).max() <= 2.0 ** -e  # within one int8 step
