"""Execution model v1 (POET's stages) against v2 (the Programs a device runs), side by side.

For each small zoo model, device and RAM budget (a fraction of the checkpoint-all peak)
it compiles with this tree and with a checkout of the previous main (``--baseline``, a
git worktree of the commit before v2), each in its own process, in one run. Reported per
cell: status, simulated energy, gap, solve time; and per model and device the minimum RAM
(``ram_requirement``) under each model: how much lower a budget now works.

    .venv/bin/python bench/semantics_bench.py --baseline /tmp/v1 -o bench/results/semantics_bench.md

The baseline checkout is made with ``git worktree add /tmp/v1 a1dec0c``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

MODELS = ("kws_dscnn", "cifar_cnn_tiny", "gpt2_tiny", "bert_tiny")
DEVICES = ("m4", "a72")
FRACTIONS = (30, 50, 70)

_DRIVER = r'''
import json, resource, sys, time
import poet_compiler
from poet_compiler.solve.feasibility import ram_requirement
model, device, limit = sys.argv[1], sys.argv[2], float(sys.argv[3])
for frac in sys.argv[4].split(","):
    t0 = time.perf_counter()
    c = poet_compiler.compile(model, device=device, ram=frac + "%", time_limit_s=limit)
    r = c.result
    print(json.dumps({"kind": "cell", "model": model, "device": device, "ram": frac, "status": r.status,
                      "energy_j": r.energy_j, "gap": r.gap, "budget": c.problem.ram_budget_bytes,
                      "peak": r.peak_ram_bytes, "recomputes": getattr(r, "n_recompute", None),
                      "wall_s": round(time.perf_counter() - t0, 2)}), flush=True)
import dataclasses
for mode in ("poet", "paging"):
    req = ram_requirement(dataclasses.replace(c.problem, mode=mode), time_limit_s=limit)
    print(json.dumps({"kind": "minram", "model": model, "device": device, "mode": mode, "lower": req.lower,
                      "upper": req.upper,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      # v2 runs CP-SAT in a forked child: its peak is the children's.
                      "child_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}), flush=True)
'''


def run(tree: Path, model: str, device: str, limit: float) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    fracs = ",".join(str(f) for f in FRACTIONS)
    out = subprocess.run([sys.executable, "-c", _DRIVER, model, device, str(limit), fracs], cwd=tree, env=env,
                         capture_output=True, text=True, check=False)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0:
        rows.append({"kind": "error", "model": model, "device": device, "error": out.stderr.strip()[-300:]})
    return rows


def fmt(x: object, spec: str = ".4g") -> str:
    return "—" if x is None else format(x, spec) if isinstance(x, float) else str(x)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, required=True, help="checkout of the previous main (v1)")
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("-o", "--out", type=Path)
    args = ap.parse_args()
    here = Path(__file__).resolve().parent.parent
    cells, minram = [], []
    started = time.time()
    for model in MODELS:
        for device in DEVICES:
            for name, tree in (("v1", args.baseline), ("v2", here)):
                for row in run(tree, model, device, args.time_limit):
                    row["version"] = name
                    (cells if row["kind"] == "cell" else minram).append(row)
                    print(row, flush=True)
    lines = [f"# Execution model v1 vs v2 ({time.strftime('%Y-%m-%d')}, {platform.node()}, "
             f"{os.cpu_count()} cores, --time-limit {args.time_limit:g}, total {time.time() - started:.0f} s)", "",
             "| model | device | RAM | v1 status | v1 energy J | v1 gap | v2 status | v2 energy J | v2 gap | v2/v1 |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    key = {(r["model"], r["device"], r["ram"], r["version"]): r for r in cells}
    for model in MODELS:
        for device in DEVICES:
            for frac in FRACTIONS:
                a, b = key.get((model, device, str(frac), "v1")), key.get((model, device, str(frac), "v2"))
                if a is None or b is None:
                    continue
                ratio = (b["energy_j"] / a["energy_j"]) if a["energy_j"] and b["energy_j"] else None
                lines.append(f"| {model} | {device} | {frac}% | {a['status']} | {fmt(a['energy_j'])} | "
                             f"{fmt(a['gap'], '.2%')} | {b['status']} | {fmt(b['energy_j'])} | {fmt(b['gap'], '.2%')} | "
                             f"{fmt(ratio, '.4f')} |")
    lines += ["", "Minimum RAM (activation bytes; `lo..hi` where the minimum was not proven within the limit):", "",
              "| model | device | mode | v1 min RAM B | v2 min RAM B | v2/v1 | peak RSS MB v1 / v2 (process / largest child) |",
              "|---|---|---|---|---|---|---|"]
    mk = {(r["model"], r["device"], r["mode"], r["version"]): r for r in minram if r["kind"] == "minram"}
    for model, device, mode in itertools.product(MODELS, DEVICES, ("poet", "paging")):
            a, b = mk.get((model, device, mode, "v1")), mk.get((model, device, mode, "v2"))
            if a is None or b is None:
                continue
            exact = lambda r: fmt(r["upper"], ".0f") if r["upper"] == r["lower"] else f"{r['lower']:.0f}..{fmt(r['upper'], '.0f')}"  # noqa: E731
            ratio = b["lower"] / a["lower"] if a["lower"] else None
            lines.append(f"| {model} | {device} | {mode} | {exact(a)} | {exact(b)} | {fmt(ratio, '.4f')} | "
                         f"{a['peak_rss_mb']:.0f}/{a.get('child_rss_mb', 0):.0f} / "
                         f"{b['peak_rss_mb']:.0f}/{b.get('child_rss_mb', 0):.0f} |")
    errors = [r for r in minram if r["kind"] == "error"]
    lines += [f"- error: {r['version']} {r['model']} {r['device']}: {r['error']}" for r in errors]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
