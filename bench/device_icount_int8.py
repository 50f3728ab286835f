"""Instructions per multiply-accumulate of the int8 convolution kernels on the emulated
Cortex-M4, float32 beside, at the real shapes of kws_dscnn and digits_cnn.

    .venv/bin/python bench/device_icount_int8.py [-o bench/results/device_icount_int8.md]

Every convolution and linear node of models/kws_dscnn.onnx (DS-CNN, batch 4 as the file
has it) and digits_cnn (models/digits.py, batch 16) runs once per kernel in one firmware
(runtime/c/device/s8_cases.c built with arm-none-eabi-gcc -O2 -mcpu=cortex-m4
-mfloat-abi=hard -mfpu=fpv4-sp-d16) under ``qemu-system-arm -M mps2-an386 -icount
shift=6``: the CMSDK timer read around each call counts its instructions exactly (0.625
per tick; ~30 of them are the call and the reads). Operands are those of a calibrated
layer (kernel_cases' ``typical``: biases below 2^14, right shifts of 5-12 bits, ReLU
outputs at zero point -128), not the tests' edges (an accumulator of 2^30 or more takes
the requantization's slower exact path). The int8 forward (poet_s8_conv_fwd),
input gradient and weight + bias gradient are checked bit for bit against the host
reference in the same run; the float32 kernels (runtime/c/kernels/conv.c) run the same
shapes (a linear layer as a 1x1 convolution). The first layer of each model has no input
gradient in training, so none is measured. The same cases on the Cortex-M3 build
(mps2-an385, the portable C path) are the last column.

Targets (docs/int8.md, "Speed"): forward <= 0.6 and backward (input + weight gradient)
<= 0.8 instructions per multiply-accumulate, totals over these nodes.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from poet_compiler.quant import ckernels as ck  # noqa: E402
from poet_compiler.quant import kernel_cases as kc  # noqa: E402

TARGET_FWD, TARGET_BWD = 0.6, 0.8


@dataclass(frozen=True)
class Node:
    model: str
    name: str
    kind: str            # regular | depthwise | pointwise | linear
    spec: kc.ConvSpec
    first: bool = False  # reads the model's input: no input gradient


def nodes() -> list[Node]:
    kws = [Node("kws_dscnn", "features.0", "regular", kc.ConvSpec(4, 1, 49, 10, 24, (10, 4), (2, 2), (5, 1, 5, 1),
                                                                   act="relu"), True)]
    for i in range(4):
        kws.append(Node("kws_dscnn", f"features.{3 + 6 * i}", "depthwise",
                        kc.ConvSpec(4, 24, 25, 5, 24, (3, 3), (1, 1), (1, 1, 1, 1), 24, act="relu")))
        kws.append(Node("kws_dscnn", f"features.{6 + 6 * i}", "pointwise", kc.ConvSpec(4, 24, 25, 5, 24, act="relu")))
    kws.append(Node("kws_dscnn", "fc", "linear", kc.linear_spec(4, 24, 12)))
    digits = [Node("digits_cnn", "features.0", "regular", kc.ConvSpec(16, 1, 8, 8, 8, (3, 3), (1, 1), (1, 1, 1, 1),
                                                                      act="relu"), True),
              Node("digits_cnn", "features.2", "regular", kc.ConvSpec(16, 8, 8, 8, 8, (3, 3), (1, 1), (1, 1, 1, 1),
                                                                      act="relu")),
              Node("digits_cnn", "features.5", "regular", kc.ConvSpec(16, 8, 4, 4, 16, (3, 3), (1, 1), (1, 1, 1, 1),
                                                                      act="relu")),
              Node("digits_cnn", "classifier", "linear", kc.linear_spec(16, 64, 10))]
    return kws + digits


def float_case(kernel: ck.Kernel, spec: kc.ConvSpec, rng: np.random.Generator) -> ck.Case:
    ho, wo = spec.out_hw()
    shape = [spec.n, spec.c_in, spec.h, spec.w, spec.c_out, ho, wo, *spec.kernel, *spec.stride, spec.padding[0],
             spec.padding[1], 1, 1, spec.groups]
    x = rng.standard_normal((spec.n, spec.c_in, spec.h, spec.w)).astype(np.float32)
    w = rng.standard_normal((spec.c_out, spec.c_in // spec.groups, *spec.kernel)).astype(np.float32)
    dy = rng.standard_normal((spec.n, spec.c_out, ho, wo)).astype(np.float32)
    if kernel == ck.Kernel.F32_CONV_FWD:
        bufs = [ck.inp(x), ck.inp(w), ck.inp(np.zeros(spec.c_out, np.float32)), ck.out(dy.shape, np.float32)]
    elif kernel == ck.Kernel.F32_CONV_BWD_INPUT:
        bufs = [ck.inp(dy), ck.inp(w), ck.out(x.shape, np.float32)]
    else:
        bufs = [ck.inp(dy), ck.inp(x), ck.out(w.shape, np.float32)]
    return ck.Case(kernel, shape, bufs, f"{kernel.name} {spec}")


@dataclass
class Row:
    node: Node
    macs: int
    instr: dict[str, float]   # fwd, bwd_input, bwd_weight, f32_* (M4), m3_* (portable on the M3)


STACK: dict[str, int] = {}    # the firmware's stack high-water mark per board (the runner included)


def measure(work: Path) -> list[Row]:
    rng = np.random.default_rng(0)
    expects: list[kc.Expect] = []
    keys: list[tuple[int, str]] = []
    floats: list[ck.Case] = []
    fkeys: list[tuple[int, str]] = []
    for i, node in enumerate(nodes()):
        expects.append(kc.conv_fwd(rng, node.spec, typical=True))
        keys.append((i, "fwd"))
        if not node.first:
            expects.append(kc.conv_bwd_input(rng, node.spec, typical=True))
            keys.append((i, "bwd_input"))
        expects.append(kc.conv_bwd_weight(rng, node.spec, whole=True))
        keys.append((i, "bwd_weight"))
        kinds = [ck.Kernel.F32_CONV_FWD] + ([] if node.first else [ck.Kernel.F32_CONV_BWD_INPUT])
        for k in kinds + [ck.Kernel.F32_CONV_BWD_WEIGHT]:
            floats.append(float_case(k, node.spec, rng))
            fkeys.append((i, "f32_" + k.name.removeprefix("F32_CONV_").lower()))
    from tests.runtime.test_kernels_s8 import check

    rows = [Row(n, n.spec.macs(), {}) for n in nodes()]
    m4 = ck.run_firmware(ck.build_firmware(work, "m4", float_convs=True), "m4",
                         [e.case for e in expects] + floats, work / "m4")
    check(m4.results[:len(expects)], expects)
    STACK["m4"] = int(m4.line.split("stack=")[1].split()[0])
    for (i, what), r in zip(keys + fkeys, m4.results):
        rows[i].instr[what] = r.instructions()
    m3 = ck.run_firmware(ck.build_firmware(work, "m3"), "m3", [e.case for e in expects], work / "m3")
    check(m3.results, expects)
    STACK["m3"] = int(m3.line.split("stack=")[1].split()[0])
    for (i, what), r in zip(keys, m3.results):
        rows[i].instr["m3_" + what] = r.instructions()
    return rows


def _bwd(r: Row, prefix: str = "") -> float:
    return r.instr.get(prefix + "bwd_input", 0.0) + r.instr[prefix + "bwd_weight"]


def _bwd_macs(r: Row) -> int:
    return r.macs * (1 if r.node.first else 2)


def _ratios(rows: list[Row]) -> tuple[float, float, float, float, float, float]:
    macs, bmacs = sum(r.macs for r in rows), sum(_bwd_macs(r) for r in rows)
    return (sum(r.instr["fwd"] for r in rows) / macs, sum(_bwd(r) for r in rows) / bmacs,
            sum(r.instr["f32_fwd"] for r in rows) / macs, sum(_bwd(r, "f32_") for r in rows) / bmacs,
            sum(r.instr["m3_fwd"] for r in rows) / macs, sum(_bwd(r, "m3_") for r in rows) / bmacs)


def report(rows: list[Row], argv: list[str]) -> str:
    gcc = subprocess.run(["arm-none-eabi-gcc", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    qemu = subprocess.run(["qemu-system-arm", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    out = [f"Command: `.venv/bin/python bench/device_icount_int8.py {' '.join(argv)}`".rstrip(),
           f"Machine: {platform.machine()} {platform.system()}, {qemu}, {gcc}, -O2; int8 results bit-identical to "
           "the host reference (checked in the run)", "",
           "Instructions per multiply-accumulate (fwd: forward; bwd: input + weight gradient, over their MACs):", "",
           "| class | nodes | fwd MACs | int8 fwd | int8 bwd | float32 fwd | float32 bwd | M3 portable fwd | M3 bwd |",
           "|---|---|---|---|---|---|---|---|---|"]
    for kind in ("regular", "depthwise", "pointwise", "linear"):
        sub = [r for r in rows if r.node.kind == kind]
        f = _ratios(sub)
        out.append(f"| {kind} | {len(sub)} | {sum(r.macs for r in sub):,} | {f[0]:.2f} | {f[1]:.2f} | {f[2]:.2f} | "
                   f"{f[3]:.2f} | {f[4]:.2f} | {f[5]:.2f} |")
    for label, sub in (("all conv (no linear)", [r for r in rows if r.node.kind != "linear"]), ("all", rows)):
        f = _ratios(sub)
        out.append(f"| **{label}** | {len(sub)} | {sum(r.macs for r in sub):,} | **{f[0]:.2f}** | **{f[1]:.2f}** | "
                   f"{f[2]:.2f} | {f[3]:.2f} | {f[4]:.2f} | {f[5]:.2f} |")
    f = _ratios(rows)
    out += ["", f"Targets: forward <= {TARGET_FWD} ({'met' if f[0] <= TARGET_FWD else 'not met'}), backward <= "
            f"{TARGET_BWD} ({'met' if f[1] <= TARGET_BWD else 'not met'}).",
            f"Stack high-water of the case firmware (runner + kernels): M4 {STACK.get('m4', 0):,} B, "
            f"M3 {STACK.get('m3', 0):,} B.", "", "Per node (instructions):", "",
            "| model | node | class | MACs | int8 fwd | int8 bwd input | int8 bwd weight | float32 fwd | "
            "float32 bwd input | float32 bwd weight |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        i = r.instr
        out.append(f"| {r.node.model} | {r.node.name} | {r.node.kind} | {r.macs:,} | {i['fwd']:,.0f} | "
                   f"{i.get('bwd_input', 0):,.0f} | {i['bwd_weight']:,.0f} | {i['f32_fwd']:,.0f} | "
                   f"{i.get('f32_bwd_input', 0):,.0f} | {i['f32_bwd_weight']:,.0f} |")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--out", type=Path, default=None, help="also write the report here")
    args = ap.parse_args(argv)
    if not ck.tools_for("m4"):
        print("error: needs arm-none-eabi-gcc and qemu-system-arm", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="icount-s8-") as tmp:
        rows = measure(Path(tmp))
    text = report(rows, argv)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
