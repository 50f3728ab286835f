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

The fit (``--write-profile profiles/m4.json``): per op class, instructions of a node =
overhead + FLOPs / throughput (FLOPs per instruction), fitted over the class's nodes in
log space (every node's relative error counts alike) with the class total matched
exactly and the overhead at most ``OVERHEAD_MAX`` instructions (a kernel call's set-up:
without the bound, the convolutions' intercept absorbs the gap between depthwise and
pointwise throughput); the memory roof (bytes of traffic per instruction) and the
per-node overhead of data movement come from a straight-line fit over the data-class
nodes (select copies). The figures go into the profile as FLOP/s and seconds at its
clock (one instruction per cycle: the count QEMU makes, a lower bound on a board's
cycles), energies as POET's active power (``ACTIVE_W``) over that time, each with its
source; the report then predicts with the profile just written.
"""

from __future__ import annotations

import argparse
import datetime
import json
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
from poet_compiler.codegen.emit_c import emit_c  # noqa: E402
from poet_compiler.codegen.emit_c import run as runner  # noqa: E402
from poet_compiler.devices.cost_model import costs_for, traffic_bytes  # noqa: E402
from poet_compiler.devices.profile import load_profile, profile_from_dict  # noqa: E402
from poet_compiler.devices.profile import write_profile as write_profile_file  # noqa: E402


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


OVERHEAD_MAX = 5000.0   # instructions: the most a node's fixed cost may explain (see the module docstring)
ACTIVE_W = 3.328e-3 * 3.3   # POET's chipsets.py M4F: 3.328 mA at 3.3 V while computing (profiles/m4_poet.json)


def measure(model: str, work: Path, profile: str = "m4") -> list[dict]:
    """Per node: op, class, FLOPs, bytes, predicted cycles (``profile``), measured instructions."""
    comp = pc.compile(model, "m4", "100%", strategy="checkpoint_all")
    path, _ = comp.save(work / "sched.poet")
    emitted = emit_c(model, path, work / "emit")
    step = runner.run_qemu(emitted.out_dir, work / "sd")
    graph = comp.graph
    per_tick = runner.instructions_per_tick()
    rows = []
    for node in graph.nodes:
        assert step.node_runs[node.id] == 1, "checkpoint-all computes every node once"
        rows.append({"model": graph.name, "id": node.id, "op": node.op.replace("aten.", ""), "class": node.op_class,
                     "kind": node.kind, "flops": node.flops, "bytes": traffic_bytes(graph, node), "_graph": graph,
                     "instructions": step.node_ticks[node.id] * per_tick})
    predict(rows, profile)
    return rows


def predict(rows: list[dict], profile: str) -> None:
    """Set every row's ``pred_cycles``: the profile's compute_s of its node x its clock."""
    prof = load_profile(profile)
    assert prof.clock_hz is not None
    tables = {}
    for r in rows:
        g = r["_graph"]
        if id(g) not in tables:
            tables[id(g)] = costs_for(g, prof)
        r["pred_cycles"] = tables[id(g)].compute_s[r["id"]] * prof.clock_hz


def fit(rows: list[dict]) -> dict:
    """Per class (overhead, FLOPs per instruction), and the memory roof, from the rows."""
    arr = {k: np.array([r[k] for r in rows], dtype=float) for k in ("instructions", "flops", "bytes")}
    cls = np.array([r["class"] for r in rows])
    out: dict = {"classes": {}}
    data = cls == "data"
    design = np.vstack([np.ones(int(data.sum())), arr["bytes"][data]]).T
    (o_data, per_byte), *_ = np.linalg.lstsq(design, arr["instructions"][data], rcond=None)
    out["bytes_per_instruction"] = 1.0 / per_byte
    out["data_overhead"] = max(float(o_data), 0.0)
    for c in sorted(set(cls) - {"data"}):
        m = cls == c
        inst, flops, byts = arr["instructions"][m], arr["flops"][m], arr["bytes"][m]
        best = None
        for o in np.linspace(0.0, min(0.5 * inst.min(), OVERHEAD_MAX), 501):
            f = flops.sum() / (inst.sum() - o * m.sum())
            pred = o + np.maximum(flops / f, byts / out["bytes_per_instruction"])
            err = float(np.sum(np.log(inst / pred) ** 2))
            if best is None or err < best[0]:
                best = (err, o, f)
        assert best is not None
        out["classes"][c] = {"overhead": best[1], "flops_per_instruction": best[2], "nodes": int(m.sum()),
                             "ops": sorted({r["op"] for r, k in zip(rows, m) if k})}
    return out


def write_profile(path: Path, fitted: dict, rows: list[dict], argv: list[str]) -> None:
    """The fitted figures into the profile at ``path``, each with its source."""
    doc = json.loads(path.read_text())
    clock = doc["clock_hz"]
    when = datetime.date.today().isoformat()
    models = sorted({r["model"] for r in rows})
    how = (f"`python bench/device_icount.py {' '.join(argv)}` ({when}): QEMU 7.2 -M mps2-an386 -icount shift=6 "
           "instruction counts of the runtime/c/kernels firmware (arm-none-eabi-gcc 12.2 -O2 -mcpu=cortex-m4 "
           f"-mfpu=fpv4-sp-d16 -mfloat-abi=hard) over checkpoint-all steps of {', '.join(models)} "
           f"({len(rows)} nodes), one instruction per cycle at clock_hz (a lower bound on a board's cycles)")
    src = doc["sources"]
    for key in [k for k in src if k.startswith("compute") or k.startswith("memory") or k == "op_overhead_s"]:
        del src[key]
    src["compute"] = {"kind": "measurement", "ref": how + f"; per class: instructions = overhead + FLOPs / throughput, "
                      f"fitted in log space with the class total matched and the overhead at most {OVERHEAD_MAX:,.0f} "
                      f"instructions; energy_j_per_flop = POET's active power 3.328 mA x 3.3 V / throughput"}
    for c, f in fitted["classes"].items():
        node_rows = [r for r in rows if r["class"] == c]
        per_model = []
        for m in models:
            sub = [r for r in node_rows if r["model"] == m]
            if sub:
                meas = sum(r["instructions"] for r in sub)
                pred = sum(f["overhead"] + r["flops"] / f["flops_per_instruction"] for r in sub)
                per_model.append(f"{m} {meas / pred:.2f}")
        doc["compute"][c] = {"throughput_flops": round(f["flops_per_instruction"] * clock, 1),
                             "energy_j_per_flop": float(f"{ACTIVE_W / (f['flops_per_instruction'] * clock):.6g}"),
                             "op_overhead_s": float(f"{f['overhead'] / clock:.6g}")}
        src[f"compute.{c}"] = {"kind": "measurement", "ref": (
            f"{f['nodes']} nodes ({', '.join(f['ops'])}): {1 / f['flops_per_instruction']:.2f} instructions per FLOP + "
            f"{f['overhead']:,.0f} per node; measured / predicted {', '.join(per_model)}; see compute")}
    other = doc["compute"]["elementwise"]
    doc["compute"]["other"] = dict(other)
    src["compute.other"] = {"kind": "estimate", "ref": "no node of this class in the measured steps: the "
                                                       "elementwise figures"}
    doc["compute"]["data"] = {"throughput_flops": other["throughput_flops"],
                              "energy_j_per_flop": other["energy_j_per_flop"],
                              "op_overhead_s": float(f"{fitted['data_overhead'] / clock:.6g}")}
    src["compute.data"] = {"kind": "measurement", "ref": (
        f"{sum(r['class'] == 'data' for r in rows)} nodes (select copies, ones_like): {fitted['data_overhead']:,.0f} "
        "instructions per node (the straight-line fit of memory.bandwidth_bps); they have next to no FLOPs: the "
        "elementwise throughput")}
    bw = fitted["bytes_per_instruction"] * clock
    doc["memory"] = {"bandwidth_bps": round(bw, 1), "energy_j_per_byte": float(f"{ACTIVE_W / bw:.6g}")}
    src["memory"] = {"kind": "measurement", "ref": (
        f"the data-class nodes' instructions against their bytes of traffic (straight line): "
        f"{fitted['bytes_per_instruction']:.1f} bytes per instruction (poet_copy_words: LDM/STM of 4 words); "
        f"energy = active power / bandwidth; see compute")}
    doc["op_overhead_s"] = float(f"{fitted['data_overhead'] / clock:.6g}")
    src["op_overhead_s"] = {"kind": "measurement", "ref": "the data class's fixed instructions per node (select "
                                                          "copies: the call and loop set-up); see compute.data"}
    write_profile_file(profile_from_dict(doc, str(path)), path)


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
    out += ["", "Per class and model (share: of the model's measured step):", "",
            "| class | model | nodes | share | measured instructions | predicted cycles | ratio |",
            "|---|---|---|---|---|---|---|"]
    for cls in sorted({r["class"] for r in rows}):
        for model in sorted({r["model"] for r in rows}):
            sub = [r for r in rows if r["class"] == cls and r["model"] == model]
            if not sub:
                continue
            total = sum(r["instructions"] for r in rows if r["model"] == model)
            m = sum(r["instructions"] for r in sub)
            p = sum(r["pred_cycles"] for r in sub)
            out.append(f"| {cls} | {model} | {len(sub)} | {m / total * 100:.2f} % | {m:,.0f} | {p:,.0f} "
                       f"| {m / p:.2f} |")
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
    ap.add_argument("--profile", default="m4", help="the profile whose predictions are compared (default m4)")
    ap.add_argument("--write-profile", type=Path, default=None, metavar="PROFILE.json",
                    help="fit the per-class figures to the measurement, write them into this profile, "
                         "and compare against it")
    args = ap.parse_args(argv)
    if args.quick:
        args.models = ["cifar_cnn_tiny"]
    if not runner.tools_for_m4():
        print("error: needs arm-none-eabi-gcc and qemu-system-arm", file=sys.stderr)
        return 2
    rows: list[dict] = []
    for model in args.models:
        with tempfile.TemporaryDirectory(prefix="icount-") as tmp:
            rows += measure(model, Path(tmp), args.profile)
    if args.write_profile:
        write_profile(args.write_profile, fit(rows), rows, argv)
        predict(rows, str(args.write_profile))
    text = report(rows, argv)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
