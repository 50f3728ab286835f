"""The int8 C kernels (runtime/c/kernels/int8, portable C path, host shared library)
against the host reference (poet_compiler/quant) bit for bit, on random shapes and
operands (poet_compiler/quant/kernel_cases.py): every tile and tail of the packed
convolution, depthwise, strided and linear layers, pooling, the add, the loss, the update
and the exponent rules. Every case also checks that the kernel stayed inside the
workspace its ``_ws`` function declares and wrote every output element."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from poet_compiler.quant import ckernels as ck
from poet_compiler.quant import kernel_cases as kc
from poet_compiler.quant import workspace

# The layers of kws_dscnn (models/kws_dscnn.onnx, batch 4) and digits_cnn (batch 16).
MODEL_SPECS = [
    kc.ConvSpec(4, 1, 49, 10, 24, (10, 4), (2, 2), (5, 1, 5, 1), act="relu"),
    kc.ConvSpec(4, 24, 25, 5, 24, (3, 3), (1, 1), (1, 1, 1, 1), 24, act="relu"),
    kc.ConvSpec(4, 24, 25, 5, 24, act="relu"),
    kc.linear_spec(4, 24, 12),
    kc.ConvSpec(16, 1, 8, 8, 8, (3, 3), (1, 1), (1, 1, 1, 1), act="relu"),
    kc.ConvSpec(16, 8, 8, 8, 8, (3, 3), (1, 1), (1, 1, 1, 1), act="relu"),
    kc.ConvSpec(16, 8, 4, 4, 16, (3, 3), (1, 1), (1, 1, 1, 1), act="relu"),
    kc.linear_spec(16, 64, 10),
]
CONV_SPECS = MODEL_SPECS + kc.random_conv_specs(50, seed=68)


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> ck.HostKernels:
    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.skip("no C compiler")
    return ck.HostKernels(tmp_path_factory.mktemp("s8"))


def check(results: list[ck.Result], expects: list[kc.Expect]) -> None:
    assert len(results) == len(expects)
    for r, e in zip(results, expects):
        label = e.case.label
        assert r.status == ck.Status.OK, f"{label}: {r.status.name}"
        if e.ret is not None:
            assert r.ret == e.ret, f"{label}: returned {r.ret}, the reference {e.ret}"
        assert len(r.outs) == len(e.outs)
        for i, (got, want) in enumerate(zip(r.outs, e.outs)):
            want = np.asarray(want).reshape(got.shape).astype(got.dtype)
            bad = np.flatnonzero(got != want)
            assert bad.size == 0, (f"{label}: output {i}, {bad.size} of {got.size} differ, first at {bad[0]}: "
                                   f"{got.flat[bad[0]]} != {want.flat[bad[0]]}")


def run(host: ck.HostKernels, expects: list[kc.Expect]) -> list[ck.Result]:
    results = host.run([e.case for e in expects])
    check(results, expects)
    return results


@pytest.mark.parametrize("build,bytes_of,seed", [(kc.conv_fwd, workspace.conv_fwd, 1),
                                                  (kc.conv_bwd_input, workspace.conv_bwd_input, 2),
                                                  (kc.conv_bwd_weight, workspace.conv_bwd_weight, 3)],
                         ids=["forward", "input_gradient", "weight_gradient"])
def test_conv(host: ck.HostKernels, build, bytes_of, seed: int) -> None:
    rng = np.random.default_rng(seed)
    specs = [s for s in CONV_SPECS for _ in range(2)]
    results = run(host, [build(rng, s) for s in specs])
    for r, spec in zip(results, specs):  # the kernel's _ws: docs/int8.md's bytes (workspace.py)
        assert r.ws_bytes == bytes_of(workspace.Shape(*spec.params())), spec


def test_pooling(host: ck.HostKernels) -> None:
    rng = np.random.default_rng(4)
    specs = kc.random_pool_specs(30, seed=5) + [kc.PoolSpec(16, 8, 8, 8, (2, 2), (2, 2)),
                                                 kc.PoolSpec(4, 24, 25, 5, (25, 5), (1, 1))]
    run(host, [e for s in specs for e in kc.maxpool(rng, s) + kc.avgpool(rng, s)])


def test_elementwise_and_loss(host: ck.HostKernels) -> None:
    rng = np.random.default_rng(6)
    cases = [kc.add(rng, int(n)) for n in rng.integers(1, 300, size=20)]
    cases += [e for n in (1, 7, 64, 255) for e in kc.activations(rng, n)]
    cases += [kc.grad_sum(rng, int(n)) for n in rng.integers(1, 200, size=20)]
    loss_cases = [kc.softmax_ce(rng, int(b), int(c)) for b, c in zip(rng.integers(1, 20, 20), rng.integers(2, 40, 20))]
    results = run(host, cases + loss_cases)
    for r, e in zip(results[len(cases):], loss_cases):
        assert r.ws_bytes == workspace.softmax_ce(*e.case.params[:2])


def test_update_and_exponents(host: ck.HostKernels) -> None:
    rng = np.random.default_rng(7)
    cases = [e for co, per in zip(rng.integers(1, 20, 30), rng.integers(1, 80, 30)) for e in kc.updates(rng, co, per)]
    run(host, cases + kc.exponent_cases(rng, 40))


def test_unwritten_outputs_show(host: ck.HostKernels) -> None:
    """Outputs start as 0xA5 bytes, so an element a kernel leaves unwritten differs from
    the reference (here: a clamp of 0 elements into a 4-byte buffer)."""
    res = host.run([ck.Case(ck.Kernel.CLAMP, [0, -128, 127], [ck.inp(np.zeros(4, np.int8)), ck.out((4,), np.int8)])])
    assert res[0].status == ck.Status.OK and (res[0].outs[0] == np.int8(-91)).all()


@pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None, reason="needs arm-none-eabi-gcc")
def test_no_floating_point_in_the_kernels(tmp_path: Path) -> None:
    """Built for a Cortex-M3 without FPU, the kernels call no soft-float helper; built for
    the Cortex-M4F, they contain no VFP instruction."""
    for cpu in ("m3", "m4"):
        for src in ck.sources():
            obj = tmp_path / f"{cpu}_{src.stem}.o"
            subprocess.run(["arm-none-eabi-gcc", *ck.WARNINGS, "-O2", *ck.CPU_FLAGS[cpu], f"-I{ck.KERNELS}", "-c",
                            str(src), "-o", str(obj)], check=True, capture_output=True, text=True)
            if cpu == "m3":
                undefined = subprocess.run(["arm-none-eabi-nm", "-u", str(obj)], check=True, capture_output=True,
                                           text=True).stdout
                floats = [s for s in undefined.split() if s.startswith(("__aeabi_f", "__aeabi_d", "__aeabi_i2f",
                                                                         "__aeabi_ui2f", "__aeabi_l2f"))]
                assert not floats, (src.name, floats)
            else:
                text = subprocess.run(["arm-none-eabi-objdump", "-d", str(obj)], check=True, capture_output=True,
                                      text=True).stdout
                vfp = [ln for ln in text.splitlines() if "\tv" in ln]
                assert not vfp, (src.name, vfp[:3])
