"""Workspace bytes of the int8 C kernels (docs/int8.md, "Kernel interface"): the scratch a
kernel needs in its caller's workspace, as a function of the layer's shape, so that a
schedule can count it. The kernels' own ``poet_s8_*_ws`` functions give the same bytes
(tests/runtime/test_kernels_s8.py checks every shape it runs).

Every part is rounded up to 8 bytes. With K = c_in/groups * kh * kw, K4 = K rounded up to
4, C2 = c_out/groups rounded up to 2 (the channels of one group, in pairs):

- forward, packed (regular, pointwise, grouped, linear): 24 c_out (each channel's prepared
  requantization) + 2 C2 K4 (the group's weights as int16 pairs) + 4 K4 (a column pair)
  + 64 C2 (the accumulators of a block of 16 columns) + 4 C2 (the channels' biases);
  unless the layer is 1x1 at stride 1 without padding, also 4 K4 (the taps' offsets) and
  2 (c_in/groups) band_h band_w (two output rows' input, widened: band_h = stride_h + kh,
  or kh for one output row; band_w = (w_out - 1) stride_w + kw + 1);
- depthwise (groups == c_in == c_out): 24 c_out + 4 kh (max(kh, kw) + 1) (the weight words)
  + 2 rows stride (one channel's padded plane) + 4 n_l round2(n_t) (its sums), the plane
  oriented along its longer output axis t (t: rows when h_out > w_out), rows =
  (n_l - 1) s_l + k_l, stride = round2(round2(n_t) s_t + k_t + 1);
- input gradient: 0 at stride > 1; the forward's figures (without the 24 c_out) for the
  transposed correlation (in and out channels and planes swapped, stride 1, padding
  kh - 1 - pad_top, kw - 1 - pad_left); depthwise likewise;
- weight gradient: 128 C2 (the gradient rows of a chunk of up to 64 positions) + 8 C2
  (a lone channel or tap's sums) + the input rows: 256 for a pointwise or linear layer,
  else the phase planes 2 ((c_in/groups) kw stride_h phase_rows cols + 8), cols =
  min(w_out, 64), rows = max(1, min(h_out, 64 / cols)), phase_rows = rows - 1 +
  ceil(kh / stride_h); depthwise: its plane + 2 n_l stride (the gradient's plane) +
  4 kh kw;
- softmax cross-entropy: 4 batch classes; every other kernel: 0.
"""

from __future__ import annotations

from dataclasses import dataclass

RQ_BYTES = 24      # sizeof(s8_rq)
BLOCK = 16         # columns per block of the packed forward
ROW = 64           # positions per chunk of the weight gradient


def part(n: int) -> int:
    return (n + 7) & ~7


def _r2(n: int) -> int:
    return (n + 1) & ~1


def _r4(n: int) -> int:
    return (n + 3) & ~3


@dataclass(frozen=True)
class Shape:
    """poet_s8_conv_shape."""

    n: int
    c_in: int
    h_in: int
    w_in: int
    c_out: int
    h_out: int
    w_out: int
    kh: int
    kw: int
    stride_h: int
    stride_w: int
    pad_top: int
    pad_left: int
    groups: int

    @property
    def depthwise(self) -> bool:
        return self.groups > 1 and self.groups == self.c_in == self.c_out


def _corr(s: Shape) -> int:
    """The packed correlation of s (in -> out)."""
    cin_g, c2 = s.c_in // s.groups, _r2(s.c_out // s.groups)
    k = cin_g * s.kh * s.kw
    k4 = _r4(k)
    direct = (s.kh, s.kw, s.stride_h, s.stride_w, s.pad_top, s.pad_left) == (1, 1, 1, 1, 0, 0) and \
        (s.h_out, s.w_out) == (s.h_in, s.w_in)
    total = part(2 * c2 * k4) + part(4 * k4) + part(4 * c2 * BLOCK) + part(4 * c2)
    if not direct:
        band_h = (s.stride_h if s.h_out > 1 else 0) + s.kh
        band_w = (s.w_out - 1) * s.stride_w + s.kw + 1
        total += part(4 * k4) + part(2 * cin_g * band_h * band_w)
    return total


@dataclass(frozen=True)
class _Plane:
    n_l: int
    n_t: int
    rows: int
    stride: int


def _orient(h_out: int, w_out: int, kh: int, kw: int, sh: int, sw: int) -> _Plane:
    if h_out > w_out:
        n_l, n_t, k_l, k_t, s_l, s_t = w_out, h_out, kw, kh, sw, sh
    else:
        n_l, n_t, k_l, k_t, s_l, s_t = h_out, w_out, kh, kw, sh, sw
    return _Plane(n_l, n_t, (n_l - 1) * s_l + k_l, _r2(_r2(n_t) * s_t + k_t + 1))


def _dw(p: _Plane, kh: int, kw: int) -> int:
    return part(4 * kh * (max(kh, kw) + 1)) + part(2 * p.rows * p.stride) + part(4 * p.n_l * _r2(p.n_t))


def conv_fwd(s: Shape) -> int:
    if s.depthwise:
        return part(RQ_BYTES * s.c_out) + _dw(_orient(s.h_out, s.w_out, s.kh, s.kw, s.stride_h, s.stride_w), s.kh,
                                              s.kw)
    return part(RQ_BYTES * s.c_out) + _corr(s)


def conv_bwd_input(s: Shape) -> int:
    if (s.stride_h, s.stride_w) != (1, 1):
        return 0
    if s.depthwise:
        return _dw(_orient(s.h_in, s.w_in, s.kh, s.kw, 1, 1), s.kh, s.kw)
    return _corr(Shape(s.n, s.c_out, s.h_out, s.w_out, s.c_in, s.h_in, s.w_in, s.kh, s.kw, 1, 1,
                       s.kh - 1 - s.pad_top, s.kw - 1 - s.pad_left, s.groups))


def conv_bwd_weight(s: Shape) -> int:
    if s.depthwise:
        p = _orient(s.h_out, s.w_out, s.kh, s.kw, s.stride_h, s.stride_w)
        return part(2 * p.rows * p.stride) + part(2 * p.n_l * p.stride) + part(4 * s.kh * s.kw)
    cin_g, c2 = s.c_in // s.groups, _r2(s.c_out // s.groups)
    linear = s.h_out * s.w_out == 1 and (s.kh, s.kw, s.h_in, s.w_in) == (1, 1, 1, 1)
    pointwise = (s.kh, s.kw, s.stride_h, s.stride_w, s.pad_top, s.pad_left) == (1, 1, 1, 1, 0, 0) and \
        (s.h_out, s.w_out) == (s.h_in, s.w_in)
    cols = min(s.w_out, ROW)
    rows = max(1, min(s.h_out, ROW // cols))
    phase_rows = rows - 1 + -(-s.kh // s.stride_h)
    b = part(4 * ROW) if linear or pointwise else part(2 * (cin_g * s.kw * s.stride_h * phase_rows * cols + 8))
    return part(2 * ROW * c2) + b + part(8 * c2)


def softmax_ce(batch: int, classes: int) -> int:
    return 4 * batch * classes
