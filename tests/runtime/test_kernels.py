"""Each reference kernel (runtime/c/kernels) against PyTorch autograd on random shapes.

The forward output must match PyTorch's op, the backward kernels the gradients that
``torch.autograd.grad`` computes through the same op. Tolerances are float32 sums of a
few hundred terms in a different order: relative 1e-5 of the largest magnitude.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.runtime.kernel_lib import build, fptr, i32

c_float = ctypes.c_float


class ConvShape(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int32) for n in ("n", "c_in", "h_in", "w_in", "c_out", "h_out", "w_out", "kh", "kw",
                                               "stride_h", "stride_w", "pad_h", "pad_w", "dil_h", "dil_w", "groups")]


class BnShape(ctypes.Structure):
    _fields_ = [("n", ctypes.c_int32), ("c", ctypes.c_int32), ("hw", ctypes.c_int32), ("eps", c_float),
                ("momentum", c_float)]


class PoolShape(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int32) for n in ("n", "c", "h_in", "w_in", "h_out", "w_out", "kh", "kw", "stride_h",
                                               "stride_w", "pad_h", "pad_w", "dil_h", "dil_w")]


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    return build(tmp_path_factory.mktemp("kernels"))


def out(shape: tuple[int, ...], dtype: type = np.float32) -> np.ndarray:
    # NaN-filled: a kernel that leaves an element unwritten fails the comparison.
    return np.full(shape, np.nan, dtype=np.float32) if dtype is np.float32 else np.full(shape, -7, dtype=dtype)


def close(got: np.ndarray, want: torch.Tensor, rel: float = 1e-5) -> None:
    w = want.detach().numpy()
    assert got.shape == w.shape
    scale = max(float(np.abs(w).max()), 1e-30)
    err = float(np.abs(got - w).max()) / scale
    assert err <= rel, f"max rel diff {err:.3g} > {rel}"


def rand(*shape: int, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float32)


CONV_CASES = [  # n, c_in, h, w, c_out, k, stride, pad, dil, groups, bias
    (2, 3, 9, 7, 4, (3, 3), (1, 1), (1, 1), (1, 1), 1, True),       # ordinary
    (3, 1, 13, 6, 5, (10, 4), (2, 2), (5, 1), (1, 1), 1, False),    # the KWS stem
    (2, 6, 7, 5, 6, (3, 3), (1, 1), (1, 1), (1, 1), 6, False),      # depthwise
    (2, 5, 4, 6, 7, (1, 1), (1, 1), (0, 0), (1, 1), 1, True),       # pointwise
    (1, 4, 8, 8, 6, (3, 2), (2, 1), (0, 1), (2, 1), 2, True),       # grouped, dilated, uneven
    (2, 24, 25, 5, 24, (3, 3), (1, 1), (1, 1), (1, 1), 24, True),   # kws depthwise: down the columns
    (2, 8, 6, 16, 8, (3, 3), (1, 1), (1, 1), (1, 1), 8, False),     # depthwise along rows
    (2, 7, 25, 5, 9, (1, 1), (1, 1), (0, 0), (1, 1), 1, True),      # kws pointwise, channel tails
    (2, 1, 49, 10, 8, (10, 4), (2, 2), (5, 1), (1, 1), 1, True),    # kws stem: columns of 4 outputs
    (2, 3, 12, 13, 8, (3, 3), (1, 1), (1, 1), (1, 1), 1, True),     # cifar stem: 3 input channels
    (1, 9, 5, 6, 10, (3, 3), (1, 1), (2, 0), (1, 1), 1, False),     # padding wider than the taps
]


def _random_conv_cases(count: int, seed: int) -> list[tuple]:
    """Shapes that reach every tile of conv.c: channel tails, strides 1-3, dilation,
    groups, depthwise 3x3 with every padding, planes narrower than a tile."""
    import random

    rng = random.Random(seed)
    cases = []
    while len(cases) < count:
        dw = rng.random() < 0.3
        groups = rng.randint(1, 5) if dw else rng.choice([1, 1, 2, 3])
        cin_g, cout_g = (1, rng.choice([1, 1, 2])) if dw else (rng.randint(1, 9), rng.randint(1, 10))
        kh, kw = (3, 3) if rng.random() < 0.4 else (rng.randint(1, 5), rng.randint(1, 5))
        st = (rng.choice([1, 1, 2, 3]), rng.choice([1, 1, 2, 3]))
        dil = (rng.choice([1, 1, 2]), rng.choice([1, 1, 2]))
        pad = (rng.randint(0, kh), rng.randint(0, kw))
        n, h, w = rng.randint(1, 3), rng.randint(1, 12), rng.randint(1, 12)
        if (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) < 0 or (w + 2 * pad[1] - dil[1] * (kw - 1) - 1) < 0:
            continue
        cases.append((n, cin_g * groups, h, w, cout_g * groups, (kh, kw), st, pad, dil, groups, rng.random() < 0.5))
    return cases


CONV_CASES += _random_conv_cases(40, seed=53)


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d(lib: ctypes.CDLL, case: tuple) -> None:
    n, cin, h, w, cout, k, st, pad, dil, groups, has_bias = case
    gen = torch.Generator().manual_seed(hash(case) % 2**31)
    x = rand(n, cin, h, w, gen=gen).requires_grad_()
    wt = rand(cout, cin // groups, *k, gen=gen).requires_grad_()
    b = rand(cout, gen=gen).requires_grad_() if has_bias else None
    y = F.conv2d(x, wt, b, st, pad, dil, groups)
    dy = rand(*y.shape, gen=gen)
    grads = torch.autograd.grad(y, [x, wt] + ([b] if has_bias else []), dy)
    s = ConvShape(n, cin, h, w, cout, y.shape[2], y.shape[3], *k, *st, *pad, *dil, groups)
    xa, wa, dya = x.detach().numpy().copy(), wt.detach().numpy().copy(), dy.numpy().copy()
    ba = b.detach().numpy().copy() if has_bias else None
    ya = out(tuple(y.shape))
    lib.poet_conv2d_fwd(ctypes.byref(s), fptr(xa), fptr(wa), fptr(ba) if has_bias else None, fptr(ya))
    close(ya, y)
    dx, dw = out(xa.shape), out(wa.shape)
    lib.poet_conv2d_bwd_input(ctypes.byref(s), fptr(dya), fptr(wa), fptr(dx))
    lib.poet_conv2d_bwd_weight(ctypes.byref(s), fptr(dya), fptr(xa), fptr(dw))
    close(dx, grads[0])
    close(dw, grads[1])
    if has_bias:
        db = out((cout,))
        lib.poet_conv2d_bwd_bias(ctypes.byref(s), fptr(dya), fptr(db))
        close(db, grads[2])


@pytest.mark.parametrize("shape,affine,running", [((4, 6, 5, 3), True, True), ((6, 3, 1, 2), True, False),
                                                   ((3, 5, 7, 2), False, True)])
def test_batchnorm_training(lib: ctypes.CDLL, shape: tuple, affine: bool, running: bool) -> None:
    gen = torch.Generator().manual_seed(sum(shape))
    x = (rand(*shape, gen=gen) * 3 + 1).requires_grad_()
    c = shape[1]
    g = (rand(c, gen=gen) + 1).requires_grad_() if affine else None
    b = rand(c, gen=gen).requires_grad_() if affine else None
    rm, rv = rand(c, gen=gen), rand(c, gen=gen).abs() + 0.5
    rm_t, rv_t = rm.clone(), rv.clone()
    y = F.batch_norm(x, rm_t if running else None, rv_t if running else None, g, b, True, 0.1, 1e-5)
    dy = rand(*shape, gen=gen)
    grads = torch.autograd.grad(y, [x] + ([g, b] if affine else []), dy)
    s = BnShape(shape[0], c, shape[2] * shape[3], 1e-5, 0.1)
    xa, dya = x.detach().numpy().copy(), dy.numpy().copy()
    ga = g.detach().numpy().copy() if affine else None
    ba = b.detach().numpy().copy() if affine else None
    rma, rva = rm.numpy().copy(), rv.numpy().copy()
    ya, mean, invstd, nm, nv = out(shape), out((c,)), out((c,)), out((c,)), out((c,))
    lib.poet_batchnorm_fwd_train(ctypes.byref(s), fptr(xa), fptr(ga) if affine else None, fptr(ba) if affine else None,
                                 fptr(ya), fptr(mean), fptr(invstd), fptr(rma) if running else None,
                                 fptr(rva) if running else None, fptr(nm), fptr(nv))
    close(ya, y)
    xd = x.detach()
    close(mean, xd.mean((0, 2, 3)))
    close(invstd, 1 / torch.sqrt(xd.var((0, 2, 3), unbiased=False) + 1e-5))
    if running:
        close(nm, rm_t)
        close(nv, rv_t)
    else:
        assert np.isnan(nm).all(), "no running stats: new_mean must stay untouched"
    dx, dg, db = out(shape), out((c,)), out((c,))
    lib.poet_batchnorm_bwd(ctypes.byref(s), fptr(dya), fptr(xa), fptr(ga) if affine else None, fptr(mean),
                           fptr(invstd), fptr(dx), fptr(dg), fptr(db))
    close(dx, grads[0], rel=2e-5)
    if affine:
        close(dg, grads[1])
        close(db, grads[2])


def test_relu_relu6(lib: ctypes.CDLL) -> None:
    gen = torch.Generator().manual_seed(3)
    x = (rand(3, 4, 5, gen=gen) * 5).requires_grad_()
    x.data[0, 0, :3] = torch.tensor([0.0, 6.0, -0.0])  # the boundaries
    dy = rand(3, 4, 5, gen=gen)
    xa, dya, n = x.detach().numpy().copy(), dy.numpy().copy(), x.numel()
    for fn, fwd, bwd, args in ((F.relu, "poet_relu_fwd", None, ()), (F.relu6, "poet_hardtanh_fwd", "poet_hardtanh_bwd",
                                                                     (c_float(0.0), c_float(6.0)))):
        y = fn(x)
        (gx,) = torch.autograd.grad(y, [x], dy)
        ya, dx = out(xa.shape), out(xa.shape)
        if args:
            getattr(lib, fwd)(n, fptr(xa), *args, fptr(ya))
            getattr(lib, bwd)(n, fptr(dya), fptr(xa), *args, fptr(dx))
        else:
            getattr(lib, fwd)(n, fptr(xa), fptr(ya))
            # aten.threshold_backward reads the ReLU's output (what autograd saves)
            lib.poet_threshold_bwd(n, fptr(dya), fptr(ya), c_float(0.0), fptr(dx))
        close(ya, y)
        close(dx, gx)


@pytest.mark.parametrize("kind,shape,k,st,pad", [("max", (2, 3, 8, 8), (2, 2), (2, 2), (0, 0)),
                                                 ("max", (1, 2, 7, 5), (3, 2), (2, 1), (1, 1)),
                                                 ("avg", (2, 3, 6, 6), (2, 2), (2, 2), (0, 0)),
                                                 ("avg", (1, 2, 7, 5), (3, 3), (2, 2), (1, 1))])
def test_pooling(lib: ctypes.CDLL, kind: str, shape: tuple, k: tuple, st: tuple, pad: tuple) -> None:
    gen = torch.Generator().manual_seed(shape[2] * 7 + k[0])
    x = rand(*shape, gen=gen).requires_grad_()
    if kind == "max":
        y, idx = F.max_pool2d(x, k, st, pad, return_indices=True)
    else:
        y = F.avg_pool2d(x, k, st, pad)
    dy = rand(*y.shape, gen=gen)
    (gx,) = torch.autograd.grad(y, [x], dy)
    s = PoolShape(shape[0], shape[1], shape[2], shape[3], y.shape[2], y.shape[3], *k, *st, *pad, 1, 1)
    xa, dya, ya, dx = x.detach().numpy().copy(), dy.numpy().copy(), out(tuple(y.shape)), out(shape)
    if kind == "max":
        ia = out(tuple(y.shape), np.int32)
        lib.poet_maxpool2d_fwd(ctypes.byref(s), fptr(xa), fptr(ya), fptr(ia))
        assert (ia == idx.numpy()).all()
        lib.poet_maxpool2d_bwd(ctypes.byref(s), fptr(dya), fptr(ia), fptr(dx))
    else:
        lib.poet_avgpool2d_fwd(ctypes.byref(s), fptr(xa), fptr(ya))
        lib.poet_avgpool2d_bwd(ctypes.byref(s), fptr(dya), fptr(dx))
    close(ya, y)
    close(dx, gx)


def _strides(t: torch.Tensor) -> ctypes.Array:
    return i32(list(t.stride()))


def _base(t: torch.Tensor) -> tuple[np.ndarray, ctypes.c_void_p]:
    """The storage of a (possibly strided) view as an array, and the view's first element."""
    storage = t.detach().untyped_storage()
    flat = torch.empty(0, dtype=t.dtype).set_(storage).numpy().copy()
    return flat, ctypes.c_void_p(flat.ctypes.data + t.storage_offset() * t.element_size())


@pytest.mark.parametrize("op,code", [("add", 2), ("sub", 3), ("mul", 4), ("div", 5)])
def test_ewise_broadcast_views(lib: ctypes.CDLL, op: str, code: int) -> None:
    gen = torch.Generator().manual_seed(code)
    a = rand(3, 4, 5, gen=gen).transpose(0, 2).requires_grad_()                 # strided view (5, 4, 3)
    b = (rand(5, 1, 3, gen=gen) + 3).expand(5, 4, 3).requires_grad_()          # stride-0 broadcast
    alpha = 0.5 if op in ("add", "sub") else 1.0
    y = {"add": lambda: torch.add(a, b, alpha=alpha), "sub": lambda: torch.sub(a, b, alpha=alpha),
         "mul": lambda: a * b, "div": lambda: a / b}[op]()
    (ab, ap), (bb, bp) = _base(a), _base(b)
    ya = out(tuple(y.shape))
    lib.poet_ewise(code, 3, i32(list(y.shape)), fptr(ya), ap, _strides(a), bp, _strides(b), c_float(alpha))
    close(ya, y, rel=1e-6)


@pytest.mark.parametrize("op,code,scalar", [("add", 6, 2.5), ("mul", 7, -1.5), ("div", 8, 125.0),
                                            ("copy", 0, 0.0), ("fill", 1, 1.0)])
def test_ewise_scalar(lib: ctypes.CDLL, op: str, code: int, scalar: float) -> None:
    gen = torch.Generator().manual_seed(code)
    a = rand(2, 3, 4, 5, gen=gen)[:, :, 1:, ::2]  # a non-contiguous slice
    want = {"add": a + scalar, "mul": a * scalar, "div": a / scalar, "copy": a.clone(),
            "fill": torch.ones_like(a)}[op]
    ab, ap = _base(a)
    ya = out(tuple(a.shape))
    lib.poet_ewise(code, 4, i32(list(a.shape)), fptr(ya), ap, _strides(a), None, None, c_float(scalar))
    close(ya, want, rel=0)


@pytest.mark.parametrize("shape,dims,mean", [((4, 6, 5, 3), (2, 3), True), ((7, 12), (0,), False),
                                             ((3, 4, 5), (0, 2), False)])
def test_reduce(lib: ctypes.CDLL, shape: tuple, dims: tuple, mean: bool) -> None:
    gen = torch.Generator().manual_seed(len(shape))
    x = rand(*shape, gen=gen).requires_grad_()
    y = x.mean(dims, keepdim=True) if mean else x.sum(dims, keepdim=True)
    count = float(np.prod([shape[d] for d in dims]))
    ya = out(tuple(y.shape))
    mask = sum(1 << d for d in dims)
    xa = x.detach().numpy().copy()
    lib.poet_reduce_sum(len(shape), i32(list(shape)), fptr(xa), _strides(x), ctypes.c_uint32(mask),
                        c_float(count if mean else 1.0), fptr(ya))
    close(ya, y)
    # The backward of a mean/sum is a broadcast (expand, stride 0) and a division: poet_ewise.
    dy = rand(*y.shape, gen=gen)
    (gx,) = torch.autograd.grad(y, [x], dy)
    dya = dy.numpy().copy()
    dx = out(shape)
    lib.poet_ewise(8 if mean else 0, len(shape), i32(list(shape)), fptr(dx), fptr(dya),
                   _strides(dy.expand(*shape)), None, None, c_float(count))
    close(dx, gx, rel=1e-6)


@pytest.mark.parametrize("m,k,n", [(4, 24, 12), (3, 7, 5), (1, 1, 9)])
def test_linear(lib: ctypes.CDLL, m: int, k: int, n: int) -> None:
    """F.linear forward (addmm with a transposed weight view and a broadcast bias) and its
    backward: input grad (mm), weight grad (mm with a transposed view), bias grad (sum)."""
    gen = torch.Generator().manual_seed(m * 100 + k)
    x = rand(m, k, gen=gen).requires_grad_()
    w = rand(n, k, gen=gen).requires_grad_()
    b = rand(n, gen=gen).requires_grad_()
    y = F.linear(x, w, b)
    dy = rand(m, n, gen=gen)
    gx, gw, gb = torch.autograd.grad(y, [x, w, b], dy)
    xa, wa, ba, dya = (t.detach().numpy().copy() for t in (x, w, b, dy))
    ya = out((m, n))
    # y = b + x @ w^T: w^T is w read with strides (1, k)
    lib.poet_matmul(m, k, n, fptr(xa), k, 1, fptr(wa), 1, k, fptr(ba), 0, 1, c_float(1), c_float(1), fptr(ya))
    close(ya, y)
    dx, dw, db = out((m, k)), out((n, k)), out((n,))
    lib.poet_matmul(m, n, k, fptr(dya), n, 1, fptr(wa), k, 1, None, 0, 0, c_float(0), c_float(1), fptr(dx))
    lib.poet_matmul(n, m, k, fptr(dya), 1, n, fptr(xa), k, 1, None, 0, 0, c_float(0), c_float(1), fptr(dw))
    lib.poet_reduce_sum(2, i32([m, n]), fptr(dya), i32([n, 1]), ctypes.c_uint32(1), c_float(1), fptr(db))
    close(dx, gx)
    close(dw, gw)
    close(db, gb)


@pytest.mark.parametrize("rows,cols", [(4, 12), (3, 10), (1, 2)])
def test_softmax_cross_entropy(lib: ctypes.CDLL, rows: int, cols: int) -> None:
    gen = torch.Generator().manual_seed(rows * cols)
    x = (rand(rows, cols, gen=gen) * 4).requires_grad_()
    target = torch.randint(0, cols, (rows,), generator=gen)
    xa, tg = x.detach().numpy().copy(), target.numpy().astype(np.int32)
    # softmax alone
    y = F.softmax(x, 1)
    dy = rand(rows, cols, gen=gen)
    (gs,) = torch.autograd.grad(y, [x], dy)
    ya, dx = out((rows, cols)), out((rows, cols))
    lib.poet_softmax_fwd(rows, cols, fptr(xa), fptr(ya))
    lib.poet_softmax_bwd(rows, cols, fptr(dy.numpy().copy()), fptr(ya), fptr(dx))
    close(ya, y)
    close(dx, gs)
    # cross-entropy = log_softmax + nll (mean), as the traced graphs run it
    for reduction, code in (("mean", 1), ("sum", 2), ("none", 0)):
        logp = F.log_softmax(x, 1)
        loss = F.nll_loss(logp, target, reduction=reduction)
        gl = torch.ones_like(loss) if reduction != "none" else rand(rows, gen=gen)
        (gx,) = torch.autograd.grad(loss, [x], gl)
        la, lossa, tw = out((rows, cols)), out(tuple(loss.shape) or (1,)), out((1,))
        lib.poet_log_softmax_fwd(rows, cols, fptr(xa), fptr(la))
        close(la, logp)
        lib.poet_nll_loss_fwd(rows, cols, fptr(la), fptr(tg), -100, code, fptr(lossa), fptr(tw))
        close(lossa.reshape(loss.shape), loss)
        assert tw[0] == rows
        gla = gl.detach().numpy().astype(np.float32).reshape(-1).copy()
        dlogp, dxa = out((rows, cols)), out((rows, cols))
        lib.poet_nll_loss_bwd(rows, cols, fptr(gla), fptr(tg), -100, code, fptr(tw), fptr(dlogp))
        lib.poet_log_softmax_bwd(rows, cols, fptr(dlogp), fptr(la), fptr(dxa))
        close(dxa, gx)
