"""The int8 C kernels on emulated boards against the host reference, bit for bit: the
Cortex-M4 build (qemu-system-arm -M mps2-an386) runs the DSP path (SMLAD, SXTAB16, the
LDM tile), the Cortex-M3 build (-M mps2-an385: no FPU, no DSP extension, soft-float ABI)
the portable C path; both must give the reference's bytes. One firmware run per board
over cases of every kernel family, including the layers of kws_dscnn and digits_cnn at
their real shapes. Skipped without arm-none-eabi-gcc and qemu-system-arm."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from poet_compiler.quant import ckernels as ck
from poet_compiler.quant import kernel_cases as kc
from tests.runtime.test_kernels_s8 import MODEL_SPECS, check

pytestmark = pytest.mark.skipif(not ck.tools_for("m4"), reason="needs arm-none-eabi-gcc and qemu-system-arm")


def cases() -> list[kc.Expect]:
    rng = np.random.default_rng(11)
    specs = MODEL_SPECS + kc.random_conv_specs(24, seed=12)
    out = [kc.conv_fwd(rng, s) for s in specs]
    out += [kc.conv_bwd_input(rng, s) for s in specs]
    out += [kc.conv_bwd_weight(rng, s) for s in specs]
    for s in kc.random_pool_specs(8, seed=13) + [kc.PoolSpec(16, 8, 8, 8, (2, 2), (2, 2))]:
        out += kc.maxpool(rng, s) + kc.avgpool(rng, s)
    out += [kc.add(rng, 77), kc.grad_sum(rng, 90), kc.softmax_ce(rng, 16, 10), kc.softmax_ce(rng, 3, 12)]
    out += kc.activations(rng, 33)
    layers = [(5, 9), (16, 72), (3, 1)] + list(zip(rng.integers(1, 20, 6), rng.integers(1, 80, 6)))
    out += [e for co, per in layers for e in kc.updates(rng, int(co), int(per))]
    return out + kc.exponent_cases(rng, 6)


@pytest.mark.parametrize("cpu", ["m4", "m3"])
def test_kernels_on_the_emulated_board(cpu: str, tmp_path: Path) -> None:
    expects = cases()
    elf = ck.build_firmware(tmp_path, cpu)
    run = ck.run_firmware(elf, cpu, [e.case for e in expects], tmp_path / "work", timeout=300)
    check(run.results, expects)
    assert all(r.ticks > 0 for r in run.results)
