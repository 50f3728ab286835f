"""Measured per-node cost on the emulated Cortex-M4 against the m4 profile's prediction.

    .venv/bin/python bench/device_icount.py [MODEL ...] [-o bench/results/device_icount.md]
    .venv/bin/python bench/device_icount.py --quick      # cifar_cnn_tiny alone

For each model (default: models/kws_dscnn.onnx, cifar_cnn_tiny) a checkpoint-all
schedule (every node computed exactly once, no paging) is emitted with ``poetc emit-c``,
built for the M4 and run under ``qemu-system-arm -M mps2-an386 -icount shift=6``. The
firmware reads CMSDK timer 0 around every node's kernel call; with -icount the count is
exact and deterministic (instructions = ticks * 0.625; checked by
runtime/c/device/calibrate.c), and includes the call and the timer reads (~20
instructions per node).

Prediction: the m4 profile's ``compute_s`` of the node (poet_compiler/devices/
cost_model.py: op overhead + max(FLOPs / throughput, bytes / bandwidth)) times the
profile's 64 MHz clock, i.e. predicted cycles. The Cortex-M4 retires most integer and
single-precision FPU instructions in one cycle (loads 2, VDIV/VSQRT 14, taken branches
2-4), so instructions are a lower bound on cycles and their ratio to predicted cycles
is the figure compared. Output: a per-node table, a per-op summary, Spearman's rank
correlation between measured instructions and predicted cycles, and the ops that
disagree by more than 2x.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import poet_compiler as pc  # noqa: E402
from poet_compiler.api import load_costs  # noqa: E402
from poet_compiler.codegen.emit_c import emit_c  # noqa: E402
from poet_compiler.codegen.emit_c import run as runner  # noqa: E402
from poet_compiler.devices.profile import load_profile  # noqa: E402


def ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties sharing their average rank."""
    order = np.argsort(x, kind="mergesort")
    r = np.empty(len(x), dtype=float)
    r[order] = np.arange(1, len(x) + 1)
    for v in np.unique(x):
        idx = np.flatnonzero(x == v)
        if len(idx) > 1:
            r[idx] = r[idx].mean()
    return r


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = ranks(np.asarray(a, float)), ranks(np.asarray(b, float))
    return float(np.corrcoef(ra, rb)[0, 1])


def measure(model: str, work: Path) -> list[dict]:
    """Per node: op, class, FLOPs, predicted cycles, measured instructions."""
    comp = pc.compile(model, "m4", "100%", strategy="checkpoint_all")
    path, _ = comp.save(work / "sched.poet")
    emitted = emit_c(model, path, work / "emit")
    step = runner.run_qemu(emitted.out_dir, work / "sd")
    graph = comp.graph
    costs = load_costs(graph, "m4")
    clock = load_profile("m4").clock_hz
    per_tick = runner.instructions_per_tick()
    rows = []
    for node in graph.nodes:
        assert step.node_runs[node.id] == 1, "checkpoint-all computes every node once"
        rows.append({"model": graph.name, "id": node.id, "op": node.op.replace("aten.", ""), "class": node.op_class,
                     "kind": node.kind, "flops": node.flops, "bytes": node.bytes_accessed,
                     "pred_cycles": costs.compute_s[node.id] * clock,
                     "instructions": step.node_ticks[node.id] * per_tick})
    return rows


def report(rows: list[dict], argv: list[str]) -> str:
    meas = np.array([r["instructions"] for r in rows])
    pred = np.array([r["pred_cycles"] for r in rows])
    out = [f"Command: `.venv/bin/python bench/device_icount.py {' '.join(argv)}`".rstrip(),
           f"Machine: {platform.machine()} {platform.system()}, {_qemu_version()}, "
           f"{_gcc_version()}, -O2 -mcpu=cortex-m4 -mfloat-abi=hard -mfpu=fpv4-sp-d16",
           "", f"Nodes: {len(rows)}; Spearman rank correlation (measured instructions vs predicted cycles): "
           f"**{spearman(meas, pred):.3f}**; totals: {meas.sum():,.0f} instructions measured vs "
           f"{pred.sum():,.0f} cycles predicted (ratio {meas.sum() / pred.sum():.2f}).", ""]
    for model in sorted({r["model"] for r in rows}):
        sub = [r for r in rows if r["model"] == model]
        m = np.array([r["instructions"] for r in sub])
        p = np.array([r["pred_cycles"] for r in sub])
        out.append(f"- {model}: {len(sub)} nodes, Spearman {spearman(m, p):.3f}, "
                   f"{m.sum():,.0f} instructions vs {p.sum():,.0f} predicted cycles ({m.sum() / p.sum():.2f})")
    out += ["", "Per op (sums over the nodes of that op; ratio = measured instructions / predicted cycles):", "",
            "| op | class | nodes | FLOPs | predicted cycles | measured instructions | ratio | instr/FLOP |",
            "|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["op"], r["class"])].append(r)
    for (op, cls), g in sorted(groups.items(), key=lambda kv: -sum(r["instructions"] for r in kv[1])):
        f = sum(r["flops"] for r in g)
        p = sum(r["pred_cycles"] for r in g)
        m = sum(r["instructions"] for r in g)
        ipf = f"{m / f:.1f}" if f else "-"
        out.append(f"| {op} | {cls} | {len(g)} | {f:,} | {p:,.0f} | {m:,.0f} | {m / p:.2f} | {ipf} |")
    off = [r for r in rows if not 0.5 <= r["instructions"] / r["pred_cycles"] <= 2.0]
    out += ["", f"Nodes off by more than 2x: {len(off)} of {len(rows)}; by op: "
            + ", ".join(f"{op} {n}" for op, n in sorted(_count(off).items(), key=lambda kv: -kv[1])), "",
            "Per node:", "", "| model | node | op | class | FLOPs | predicted cycles | measured instructions | ratio |",
            "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['model']} | {r['id']} | {r['op']} | {r['class']} | {r['flops']:,} | "
                   f"{r['pred_cycles']:,.0f} | {r['instructions']:,.0f} | {r['instructions'] / r['pred_cycles']:.2f} |")
    return "\n".join(out) + "\n"


def _count(rows: list[dict]) -> dict[str, int]:
    c: dict[str, int] = defaultdict(int)
    for r in rows:
        c[r["op"]] += 1
    return c


def _qemu_version() -> str:
    return subprocess.run(["qemu-system-arm", "--version"], capture_output=True, text=True).stdout.splitlines()[0]


def _gcc_version() -> str:
    return subprocess.run(["arm-none-eabi-gcc", "--version"], capture_output=True, text=True).stdout.splitlines()[0]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=["models/kws_dscnn.onnx", "cifar_cnn_tiny"])
    ap.add_argument("-o", "--out", type=Path, default=None, help="also write the report here")
    ap.add_argument("--quick", action="store_true", help="the smallest model alone (cifar_cnn_tiny)")
    args = ap.parse_args(argv)
    if args.quick:
        args.models = ["cifar_cnn_tiny"]
    if not runner.tools_for_m4():
        print("error: needs arm-none-eabi-gcc and qemu-system-arm", file=sys.stderr)
        return 2
    rows: list[dict] = []
    for model in args.models:
        with tempfile.TemporaryDirectory(prefix="icount-") as tmp:
            rows += measure(model, Path(tmp))
    text = report(rows, argv)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
