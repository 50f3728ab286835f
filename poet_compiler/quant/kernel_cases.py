"""Cases for the int8 C kernels with the host reference's results (docs/int8.md).

Each builder draws operands for one kernel call, encodes the call
(:class:`~poet_compiler.quant.ckernels.Case`) and computes what the reference
(:mod:`poet_compiler.quant.conv`, ``pool``, ``elementwise``, ``loss``, ``update``,
``exponents``) gives for the same integers: the expected output buffers and return
value. The C kernels must match bit for bit (tests/runtime/test_kernels_s8.py, and on the
emulated Cortex-M4 and M3, test_kernels_s8_qemu.py). Operands span what the spec allows,
including its edges: multipliers of exactly 2**30, left shifts that wrap, accumulators
that wrap, right shifts past 31, update shifts past 62.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from poet_compiler.quant import ckernels as ck
from poet_compiler.quant import conv, elementwise, exponents, loss, pool, step, update
from poet_compiler.quant.exponents import Seen
from poet_compiler.quant.fixedpoint import INT32_MAX, INT32_MIN, as_i64, nbits
from poet_compiler.quant.qmodel import Add, AvgPool, Conv, MaxPool

Rng = np.random.Generator


@dataclass
class Expect:
    case: ck.Case
    outs: list[np.ndarray]
    ret: int | None = None


@dataclass(frozen=True)
class ConvSpec:
    n: int
    c_in: int
    h: int
    w: int
    c_out: int
    kernel: tuple[int, int] = (1, 1)
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)   # top, left, bottom, right
    groups: int = 1
    linear: bool = False
    act: str = "none"

    def out_hw(self) -> tuple[int, int]:
        return (conv.output_size(self.h, self.kernel[0], self.stride[0], self.padding[0], self.padding[2]),
                conv.output_size(self.w, self.kernel[1], self.stride[1], self.padding[1], self.padding[3]))

    def params(self) -> list[int]:
        ho, wo = self.out_hw()
        return [self.n, self.c_in, self.h, self.w, self.c_out, ho, wo, *self.kernel, *self.stride,
                self.padding[0], self.padding[1], self.groups]

    def in_shape(self) -> tuple[int, ...]:
        return (self.n, self.c_in) if self.linear else (self.n, self.c_in, self.h, self.w)

    def out_shape(self) -> tuple[int, ...]:
        return (self.n, self.c_out) if self.linear else (self.n, self.c_out, *self.out_hw())

    def macs(self) -> int:
        ho, wo = self.out_hw()
        return self.n * self.c_out * ho * wo * (self.c_in // self.groups) * self.kernel[0] * self.kernel[1]


def linear_spec(n: int, k: int, classes: int, act: str = "none") -> ConvSpec:
    return ConvSpec(n, k, 1, 1, classes, linear=True, act=act)


def _int8(rng: Rng, shape: tuple[int, ...], lo: int = -128, hi: int = 127) -> np.ndarray:
    return rng.integers(lo, hi + 1, size=shape).astype(np.int8)


def _multipliers(rng: Rng, count: int) -> np.ndarray:
    m = rng.integers(1 << 30, 1 << 31, size=count)
    m[rng.random(count) < 0.15] = 1 << 30      # an exact power of two: the fast requantization's edge
    return m.astype(np.int64)


def _shifts(rng: Rng, count: int) -> np.ndarray:
    """Mostly the right shifts of real layers; some 0, -1, left shifts and shifts past 31."""
    s = rng.integers(-14, -1, size=count)
    pick = rng.random(count)
    s = np.where(pick < 0.08, rng.integers(0, 7, size=count), s)
    s = np.where((pick >= 0.08) & (pick < 0.14), -1, s)
    s = np.where((pick >= 0.14) & (pick < 0.18), rng.integers(-40, -25, size=count), s)
    return s.astype(np.int64)


def _act_limits(rng: Rng, act: str, z_y: int) -> tuple[int, int]:
    if act == "none":
        return -128, 127
    if act == "relu":
        return z_y, 127
    return z_y, int(rng.integers(z_y, 128))


def conv_node(rng: Rng, spec: ConvSpec, typical: bool = False) -> tuple[Conv, int]:
    """A layer of random integers for ``spec``, and its output zero point. ``typical``:
    what a calibrated layer holds (biases below 2^14, right shifts of 5-12 bits, a ReLU
    output's zero point -128) instead of the spec's edges (bench/device_icount_int8.py)."""
    cin_g = spec.c_in // spec.groups
    w = _int8(rng, (spec.c_out, cin_g, *spec.kernel), -127, 127)
    big = not typical and rng.random() < 0.2   # biases near the int32 limits: the accumulator wraps
    span = 1 << 14 if typical else 1 << 18
    bias = rng.integers(-(1 << 31) if big else -span, (1 << 31) - 1 if big else span, size=spec.c_out)
    z_y = -128 if typical and spec.act != "none" else int(rng.integers(-128, 128))
    lo, hi = _act_limits(rng, spec.act, z_y)
    shifts = rng.integers(-12, -4, size=spec.c_out) if typical else _shifts(rng, spec.c_out)
    node = Conv("c", "x", "y", w, bias.astype(np.int32), np.ones(spec.c_out), spec.stride, spec.padding, spec.groups,
                spec.linear, spec.act, lo, hi, _multipliers(rng, spec.c_out).astype(np.int32),
                shifts.astype(np.int32), rng.integers(1, 257, size=spec.c_out).astype(np.int16),
                int(_multipliers(rng, 1)[0]), int(rng.integers(-20, -5)))
    node.weight_exponent = np.zeros(spec.c_out, np.int32) if typical else \
        rng.integers(-2, 3, size=spec.c_out).astype(np.int32)
    return node, z_y


def _vrange(rng: Rng) -> np.ndarray:
    if rng.random() < 0.5:
        return np.array([INT32_MAX, INT32_MIN], np.int32)
    a, b = sorted(rng.integers(-300, 300, size=2))
    return np.array([a, b], np.int32)


def conv_fwd(rng: Rng, spec: ConvSpec, typical: bool = False) -> Expect:
    node, z_y = conv_node(rng, spec, typical)
    x = _int8(rng, spec.in_shape())
    z_x = -128 if typical else int(rng.integers(-128, 128))
    offset = 0 if typical else int(rng.integers(-3, 4))
    no_bias = not typical and rng.random() < 0.15
    if no_bias:
        node.bias = np.zeros(spec.c_out, np.int32)
    y, v = conv.forward(node, x, z_x, z_y, offset)
    vr = _vrange(rng)
    want_vr = np.array([min(int(vr[0]), int(v.min())), max(int(vr[1]), int(v.max()))], np.int32)
    shift = (as_i64(node.out_shift) + node.weight_exponent + offset).astype(np.int32)
    case = ck.Case(ck.Kernel.CONV_FWD, [*spec.params(), z_x, z_y, node.act_min, node.act_max],
                   [ck.inp(x), ck.inp(node.weight), ck.null() if no_bias else ck.inp(node.bias),
                    ck.inp(node.out_multiplier.astype(np.int32)), ck.inp(shift), ck.out(y.shape, np.int8),
                    ck.inout(vr)], f"conv_fwd {spec}")
    return Expect(case, [y, want_vr])


def _grad(rng: Rng, shape: tuple[int, ...]) -> np.ndarray:
    """A masked gradient: int8 in [-127, 127], some zeros."""
    g = _int8(rng, shape, -127, 127)
    g[rng.random(shape) < 0.3] = 0
    return g


def conv_bwd_input(rng: Rng, spec: ConvSpec, typical: bool = False) -> Expect:
    node, _ = conv_node(rng, spec, typical)
    g = _grad(rng, spec.out_shape())
    e_y = int(rng.integers(0, 12))
    n_target = int(rng.integers(36, 48)) if typical else \
        int(rng.choice([rng.integers(32, 55), rng.integers(1, 32), rng.integers(55, 70)], p=[0.7, 0.2, 0.1]))
    top = int(node.weight_exponent.max())
    e_x = 31 - node.grad_shift - top + e_y - n_target
    g_x, amax = conv.input_grad(node, g, spec.in_shape()[1:], e_y, e_x)
    start = np.array([int(rng.integers(0, 50))], np.uint32)
    rescale = conv.grad_rescale(node).astype(np.int16)
    case = ck.Case(ck.Kernel.CONV_BWD_INPUT, [*spec.params(), node.grad_multiplier, n_target],
                   [ck.inp(g), ck.inp(node.weight), ck.inp(rescale), ck.out(g_x.shape, np.int8), ck.inout(start)],
                   f"conv_bwd_input {spec}")
    return Expect(case, [g_x, np.array([max(int(start[0]), amax)], np.uint32)])


def conv_bwd_weight(rng: Rng, spec: ConvSpec, whole: bool = False) -> Expect:
    node, _ = conv_node(rng, spec, whole)
    g = _grad(rng, spec.out_shape())
    x = _int8(rng, spec.in_shape())
    z_x = int(rng.integers(-128, 128))
    gw, gb = conv.weight_grad(node, g, x, z_x)
    c0, c1 = (0, spec.c_out) if whole or rng.random() < 0.6 else sorted(rng.choice(spec.c_out + 1, 2, replace=False))
    with_bias = rng.random() < 0.8
    per = gw[0].size
    case = ck.Case(ck.Kernel.CONV_BWD_WEIGHT, [*spec.params(), z_x, int(c0), int(c1)],
                   [ck.inp(g), ck.inp(x), ck.out((int(c1 - c0) * per,), np.int32),
                    ck.out((int(c1 - c0),), np.int32) if with_bias else ck.null()], f"conv_bwd_weight {spec}")
    outs = [gw[c0:c1].reshape(-1)] + ([gb[c0:c1]] if with_bias else [])
    return Expect(case, outs)


def random_conv_specs(count: int, seed: int) -> list[ConvSpec]:
    """Shapes that reach every path: channel and column tails (odd counts), groups,
    depthwise, pointwise, linear, strides 1-3, padding up to the kernel and beyond it,
    planes narrower than a tile, and every fused activation."""
    rng = np.random.default_rng(seed)
    specs: list[ConvSpec] = []
    while len(specs) < count:
        kind = rng.choice(["regular", "depthwise", "pointwise", "linear", "grouped"], p=[0.35, 0.25, 0.15, 0.1, 0.15])
        act = str(rng.choice(["none", "relu", "relu6"]))
        n = int(rng.integers(1, 4))
        if kind == "linear":
            specs.append(linear_spec(n, int(rng.integers(1, 40)), int(rng.integers(1, 13)), act))
            continue
        groups = int(rng.integers(2, 6)) if kind in ("depthwise", "grouped") else 1
        cin_g, cout_g = (1, 1) if kind == "depthwise" else (int(rng.integers(1, 10)), int(rng.integers(1, 10)))
        k = (1, 1) if kind == "pointwise" else ((3, 3) if rng.random() < 0.5 else tuple(rng.integers(1, 6, size=2)))
        st = (1, 1) if kind == "pointwise" or rng.random() < 0.6 else tuple(rng.integers(1, 4, size=2))
        pad = (0, 0, 0, 0) if kind == "pointwise" else tuple(int(rng.integers(0, kk + 1)) for kk in (*k, *k))
        h, w = int(rng.integers(1, 11)), int(rng.integers(1, 11))
        spec = ConvSpec(n, cin_g * groups, h, w, cout_g * groups, (int(k[0]), int(k[1])), (int(st[0]), int(st[1])),
                        (pad[0], pad[1], pad[2], pad[3]), groups, act=act)
        if min(spec.out_hw()) >= 1:
            specs.append(spec)
    return specs


# ---- pooling ----------------------------------------------------------------------------

@dataclass(frozen=True)
class PoolSpec:
    n: int
    c: int
    h: int
    w: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)

    def out_hw(self) -> tuple[int, int]:
        return (conv.output_size(self.h, self.kernel[0], self.stride[0], self.padding[0], self.padding[2]),
                conv.output_size(self.w, self.kernel[1], self.stride[1], self.padding[1], self.padding[3]))

    def params(self) -> list[int]:
        return [self.n, self.c, self.h, self.w, *self.out_hw(), *self.kernel, *self.stride, self.padding[0],
                self.padding[1]]


def random_pool_specs(count: int, seed: int) -> list[PoolSpec]:
    rng = np.random.default_rng(seed)
    specs: list[PoolSpec] = []
    while len(specs) < count:
        k = (int(rng.integers(1, 5)), int(rng.integers(1, 5)))
        st = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        pad = (int(rng.integers(0, k[0] // 2 + 1)), int(rng.integers(0, k[1] // 2 + 1)))
        spec = PoolSpec(int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(1, 10)),
                        int(rng.integers(1, 10)), k, st, (pad[0], pad[1], pad[0], pad[1]))
        if min(spec.out_hw()) >= 1:
            specs.append(spec)
    return specs


def maxpool(rng: Rng, spec: PoolSpec) -> list[Expect]:
    node = MaxPool("p", "x", "y", spec.kernel, spec.stride, spec.padding)
    x = _int8(rng, (spec.n, spec.c, spec.h, spec.w), -20, 20)   # ties: the first maximum must win
    y = pool.maxpool_forward(node, x)
    g_y = _int8(rng, y.shape)
    g_x = pool.maxpool_backward(node, g_y, x)
    return [Expect(ck.Case(ck.Kernel.MAXPOOL_FWD, spec.params(), [ck.inp(x), ck.out(y.shape, np.int8)],
                           f"maxpool_fwd {spec}"), [y]),
            Expect(ck.Case(ck.Kernel.MAXPOOL_BWD, spec.params(), [ck.inp(g_y), ck.inp(x), ck.out(x.shape, np.int8)],
                           f"maxpool_bwd {spec}"), [g_x])]


def avgpool(rng: Rng, spec: PoolSpec) -> list[Expect]:
    m, s = int(_multipliers(rng, 1)[0]), int(rng.integers(-3, 3))
    node = AvgPool("p", "x", "y", spec.kernel, spec.stride, spec.padding, m, s)
    x = _int8(rng, (spec.n, spec.c, spec.h, spec.w))
    z_x, z_y, offset = int(rng.integers(-128, 128)), int(rng.integers(-128, 128)), int(rng.integers(-2, 3))
    y, v = pool.avgpool_forward(node, x, z_x, z_y, offset)
    vr = _vrange(rng)
    want_vr = np.array([min(int(vr[0]), int(v.min())), max(int(vr[1]), int(v.max()))], np.int32)
    g_y = _int8(rng, y.shape)
    g_x = pool.avgpool_backward(node, g_y, x.shape)
    k = pool.avgpool_grad_shift(node, x.shape)
    return [Expect(ck.Case(ck.Kernel.AVGPOOL_FWD, [*spec.params(), z_x, z_y, m, s + offset],
                           [ck.inp(x), ck.out(y.shape, np.int8), ck.inout(vr)], f"avgpool_fwd {spec}"), [y, want_vr]),
            Expect(ck.Case(ck.Kernel.AVGPOOL_BWD, spec.params(), [ck.inp(g_y), ck.out(x.shape, np.int8)],
                           f"avgpool_bwd {spec}"), [g_x], k)]


# ---- element-wise, loss -----------------------------------------------------------------

def add(rng: Rng, count: int) -> Expect:
    act = str(rng.choice(["none", "relu", "relu6"]))
    zs = [int(v) for v in rng.integers(-128, 128, size=3)]
    z = (zs[0], zs[1], zs[2])
    lo, hi = _act_limits(rng, act, z[2])
    ms, ss = _multipliers(rng, 3), rng.integers(-3, 1, size=3)
    ss[2] = int(rng.integers(-22, -16))
    node = Add("a", ("a", "b"), "y", (int(ms[0]), int(ms[1])), (int(ss[0]), int(ss[1])), int(ms[2]), int(ss[2]),
               act, lo, hi)
    kk = [int(v) for v in rng.integers(-2, 3, size=3)]
    ks = (kk[0], kk[1], kk[2])
    a, b = _int8(rng, (count,)), _int8(rng, (count,))
    y, v = elementwise.add_forward(node, a, b, z, ks)
    top = max(ks[0], ks[1])
    vr = _vrange(rng)
    want_vr = np.array([min(int(vr[0]), int(v.min())), max(int(vr[1]), int(v.max()))], np.int32)
    params = [count, *z, lo, hi, int(ms[0]), int(ss[0]) + ks[0] - top, int(ms[1]), int(ss[1]) + ks[1] - top,
              int(ms[2]), int(ss[2]) + top - ks[2]]
    return Expect(ck.Case(ck.Kernel.ADD_FWD, params, [ck.inp(a), ck.inp(b), ck.out((count,), np.int8), ck.inout(vr)],
                          "add_fwd"), [y, want_vr])


def activations(rng: Rng, count: int) -> list[Expect]:
    out: list[Expect] = []
    for kind, act in enumerate(("none", "relu", "relu6")):
        z = int(rng.integers(-128, 128))
        lo, hi = _act_limits(rng, act, z)
        y, g_y = _int8(rng, (count,)), _int8(rng, (count,))
        want = np.where(conv.activation_mask(act, lo, hi, y), g_y, 0).astype(np.int8)
        out.append(Expect(ck.Case(ck.Kernel.ACT_BWD, [count, kind, lo, hi],
                                  [ck.inp(g_y), ck.inp(y), ck.out((count,), np.int8)], f"act_bwd {act}"), [want]))
        x = _int8(rng, (count,))
        out.append(Expect(ck.Case(ck.Kernel.CLAMP, [count, lo, hi], [ck.inp(x), ck.out((count,), np.int8)],
                                  f"clamp {act}"), [np.clip(x, lo, hi).astype(np.int8)]))
    return out


def grad_sum(rng: Rng, count: int) -> Expect:
    g1, g2 = _int8(rng, (count,)), _int8(rng, (count,))
    e1, e2 = int(rng.integers(-5, 20)), int(rng.integers(-5, 20))
    if rng.random() < 0.3:
        e2 = e1
    g, e = elementwise.grad_sum([(g1, e1), (g2, e2)])
    return Expect(ck.Case(ck.Kernel.GRAD_SUM, [count, e1, e2], [ck.inp(g1), ck.inp(g2), ck.out((count,), np.int8)],
                          "grad_sum"), [g], e)


def softmax_ce(rng: Rng, batch: int, classes: int) -> Expect:
    m_e, sh_e = loss.log2e_multiplier(float(rng.uniform(0.02, 0.6)))
    n_e = loss.exp_shift(sh_e, int(rng.integers(-4, 5)))
    if rng.random() < 0.15:
        n_e = int(rng.choice([0, -3, 63, 70]))   # the exponential's edges: every d > 0 gives 0, or t = 0
    z = _int8(rng, (batch, classes))
    if rng.random() < 0.3:
        z[:, :] = z[:, :1]  # ties: every probability equal
    labels = rng.integers(0, classes, size=batch).astype(np.int32)
    want = loss.loss_q16(z, labels, m_e, n_e)
    g, e = loss.loss_grad(z, labels, m_e, n_e)
    case = ck.Case(ck.Kernel.SOFTMAX_CE, [batch, classes, m_e, n_e],
                   [ck.inp(z), ck.inp(labels), ck.out(g.shape, np.int8), ck.out((1,), np.int32)],
                   f"softmax_ce {batch}x{classes}")
    return Expect(case, [g, np.array([e], np.int32)], want)


# ---- the update and the exponents ---------------------------------------------------------

@dataclass
class _Layer:
    node: Conv
    rule: update.UpdateRule
    k_x: int
    e_y: int
    mu: int
    gw: np.ndarray = field(default_factory=lambda: np.zeros(0))
    gb: np.ndarray = field(default_factory=lambda: np.zeros(0))


def _layer(rng: Rng, co: int, per: int) -> _Layer:
    node, _ = conv_node(rng, ConvSpec(1, per, 1, 1, co))
    node.weight = _int8(rng, node.weight.shape, -127, 127)
    small = rng.random(co) < 0.3
    node.weight[small] = (node.weight[small] // 8).astype(np.int8)   # channels below 32: the shrink rule
    node.weight_residual = _int8(rng, node.weight.shape)
    node.bias = rng.integers(-(1 << 20), 1 << 20, size=co).astype(np.int32)
    node.weight_momentum = rng.integers(-20000, 20000, size=node.weight.shape).astype(np.int16)
    node.bias_momentum = rng.integers(-(1 << 24), 1 << 24, size=co).astype(np.int32)
    scale = rng.uniform(0.002, 0.05, size=co)
    rule = update.update_rule(scale, float(rng.uniform(0.01, 0.1)), float(rng.uniform(0.005, 0.2)), 16)
    mu = int(rng.choice([0, 29491, 16384]))
    layer = _Layer(node, rule, int(rng.integers(-3, 4)), int(rng.integers(-4, 12)), mu)
    layer.gw = rng.integers(-(1 << 22), 1 << 22, size=node.weight.shape).astype(np.int64)
    layer.gw[rng.random(node.weight.shape) < 0.05] = int(rng.integers(-(1 << 31), 1 << 31))
    layer.gb = rng.integers(-(1 << 16), 1 << 16, size=co).astype(np.int64)
    if mu:
        _bias_ties(rng, layer)
    return layer


def _bias_ties(rng: Rng, layer: _Layer) -> None:
    """Some channels get Gb = 0 and a bias momentum that decays to 128 mod 256: a step of
    exactly half a bias LSB, where round half up and half down differ."""
    tie = np.flatnonzero(rng.random(layer.gb.size) < 0.3)
    for c in tie:
        start = int(rng.integers(-(1 << 24), 1 << 24))
        candidates = np.arange(start, start + 1024, dtype=np.int64)
        decayed = update.momentum(candidates, np.zeros_like(candidates), layer.mu, INT32_MAX)
        layer.node.bias_momentum[c] = candidates[np.flatnonzero(decayed % 256 == 128)[0]]
        layer.gb[c] = 0


def updates(rng: Rng, co: int, per: int) -> list[Expect]:
    """The bias then the weight update of one layer, by the reference's own
    :func:`~poet_compiler.quant.step.update_conv` (the device's rule: residual weights,
    nearest biases); the C kernels run on a random channel range, the others keep their
    values."""
    lay = _layer(rng, co, per)
    node, rule = lay.node, lay.rule
    c0, c1 = (0, co) if rng.random() < 0.5 else sorted(int(v) for v in rng.choice(co + 1, 2, replace=False))
    sel = (np.arange(co) >= c0) & (np.arange(co) < c1)
    pick = sel.reshape((-1,) + (1,) * (node.weight.ndim - 1))
    old = {"w": node.weight.copy(), "r": node.weight_residual.copy(), "b": node.bias.copy(),
           "wm": node.weight_momentum.copy(), "bm": node.bias_momentum.copy(), "kw": node.weight_exponent.copy()}
    bias_only = replace(node, train_weight=False)
    step.update_conv(bias_only, rule, (lay.gw, lay.gb), (lay.k_x, lay.e_y, lay.mu), step.StepResult(0))
    bias_after = np.where(sel, bias_only.bias, old["b"]).astype(np.int32)
    bmom_after = np.where(sel, bias_only.bias_momentum, old["bm"]).astype(np.int32)
    bias_case = ck.Case(ck.Kernel.UPDATE_BIAS, [c0, c1, lay.k_x, lay.e_y, lay.mu],
                        [ck.inp(rule.bias_multiplier.astype(np.int32)), ck.inp(rule.bias_shift.astype(np.int32)),
                         ck.inp(old["kw"]), ck.inp(lay.gb[c0:c1].astype(np.int32)), ck.inout(old["b"]),
                         ck.inout(old["bm"]) if lay.mu else ck.null()], "update_bias")
    step.update_conv(node, rule, (lay.gw, lay.gb), (lay.k_x, lay.e_y, lay.mu), step.StepResult(0))
    per_c = int(np.prod(node.weight.shape[1:]))
    weight_case = ck.Case(ck.Kernel.UPDATE_WEIGHT, [c0, c1, per_c, lay.k_x, lay.e_y, lay.mu],
                          [ck.inp(rule.weight_multiplier.astype(np.int32)), ck.inp(rule.weight_shift.astype(np.int32)),
                           ck.inp(lay.gw[c0:c1].reshape(-1).astype(np.int32)), ck.inout(old["w"]),
                           ck.inout(old["r"]), ck.inout(old["wm"]), ck.inout(old["kw"]), ck.inout(bias_after),
                           ck.inout(bmom_after)], "update_weight")
    want: list[np.ndarray] = [
        np.where(pick, node.weight, old["w"]).astype(np.int8),
        np.where(pick, node.weight_residual, old["r"]).astype(np.int8),
        np.where(pick, node.weight_momentum, old["wm"]).astype(np.int16),
        np.where(sel, node.weight_exponent, old["kw"]).astype(np.int32),
        np.where(sel, node.bias, bias_after).astype(np.int32),
        np.where(sel, node.bias_momentum, bmom_after).astype(np.int32)]
    changed = int(np.count_nonzero((node.weight != old["w"])[c0:c1]))
    return [Expect(bias_case, [bias_after] + ([bmom_after] if lay.mu else [])), Expect(weight_case, want, changed)]


def exponent_cases(rng: Rng, count: int) -> list[Expect]:
    out: list[Expect] = []
    for _ in range(count):
        z, k, clamped = int(rng.integers(-128, 128)), int(rng.integers(-5, 6)), int(rng.integers(0, 2))
        vmin, vmax = sorted(int(v) for v in rng.integers(-400, 400, size=2))
        want = exponents.next_exponent(k, Seen(vmin, vmax), z, bool(clamped))
        out.append(Expect(ck.Case(ck.Kernel.NEXT_ACT_EXP, [k, vmin, vmax, z, clamped], [], "next_act"), [], want))
        amax, e = int(rng.integers(0, 1 << int(rng.integers(0, 32)))), int(rng.integers(-10, 20))
        want_e = e + 7 - int(nbits(amax)) if amax else e
        out.append(Expect(ck.Case(ck.Kernel.NEXT_GRAD_EXP, [e, amax], [], "next_grad"), [], want_e))
        bias, d = rng.integers(-(1 << 31) + 1, 1 << 31, size=5).astype(np.int32), int(rng.integers(-6, 7))
        bias[0] = 0
        out.append(Expect(ck.Case(ck.Kernel.RESCALE_BIAS, [5, d], [ck.inout(bias)], "rescale_bias"),
                          [exponents.rescale_bias(bias, d)]))
        v = max(1, int(rng.integers(1, 1 << 32, dtype=np.int64)) >> int(rng.integers(0, 32)))
        out.append(Expect(ck.Case(ck.Kernel.LOG2Q, [v], [], "log2q"), [], loss.log2_q16(v)))
    return out
