"""Old against new, side by side in one run: `poetc compile` of a checkout given by
``--old-root`` (e.g. a worktree of the previous release, run with this interpreter) and of
this one, cell by cell, alternating, with their default flags.

    git worktree add /tmp/poetc-old <commit>
    PYTHONPATH=. .venv/bin/python bench/optimizer_grid.py --old-root /tmp/poetc-old -o bench/results/optimizer_old_new

Cells (``--cells``): the README demo, ResNet-18-CIFAR m4 50 % 1.5x and a72 30 % 1.0x,
VGG16-CIFAR m4 30 % 1.5x (op level), GPT-2 a72 70 %, a 250-node layered DAG at 90 %
(remat), POET's linear example (27 nodes, 3388 B, 1.5x). ``--old-flags`` / ``--new-flags``
add flags to one side (the old default was ``--time-limit 60``; the new default is
``--effort default`` under a 600 s wall cap). A row per run: status, energy, bound, gap,
stopped_by and effort (new), the command's wall and CPU seconds, peak RSS. Writes
``OUT.jsonl`` and ``OUT.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.rows import figure, gap_text, write_rows
from tests.support.layered import layered_dag

ROOT = Path(__file__).resolve().parent.parent
CELLS = {
    "demo": ["models/kws_dscnn.onnx", "--device", "m4", "--ram", "256k"],
    "r18_m4_50_1.5x": ["resnet18_cifar", "--device", "m4", "--ram", "50%", "--deadline", "1.5x"],
    "r18_a72_30_1.0x": ["resnet18_cifar", "--device", "a72", "--ram", "30%", "--deadline", "1.0x"],
    "vgg16_m4_30_1.5x": ["vgg16_cifar", "--device", "m4", "--ram", "30%", "--deadline", "1.5x"],
    "gpt2_a72_70": ["gpt2", "--device", "a72", "--ram", "70%"],
    "dag250_90": ["{dag250}", "--mode", "remat", "--ram", "90%"],
    "poet_linear_m4": ["tests/regressions/poet_linear_m4.json", "--ram", "3388", "--deadline", "1.5x"],
}


def run(root: Path, args: list[str], out: Path) -> dict:
    """One ``poetc compile --json`` of the checkout at ``root`` in a child process."""
    # The checkout's own folder is the working directory: ``python -m`` puts it first on
    # sys.path (before PYTHONPATH), and the cells' relative paths are read from there.
    env = {**os.environ, "PYTHONPATH": str(root)}
    cmd = [sys.executable, "-m", "poet_compiler.cli", "compile", *args, "-o", str(out), "--json", "-q"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        rep = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1], "wall_s": round(wall, 1)}
    return {"status": rep.get("status"), "energy_j": rep.get("energy_j"), "lower_bound_j": rep.get("lower_bound_j"),
            "gap": rep.get("gap"), "stopped_by": rep.get("stopped_by"), "effort_used": rep.get("effort_used"),
            "wall_s": round(wall, 1),
            "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1),
            "peak_rss_mb": round(after.ru_maxrss / 1024), "message": rep.get("message")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old-root", type=Path, required=True)
    ap.add_argument("-o", "--out", type=Path, default=Path("bench/results/optimizer_old_new"))
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--old-flags", default="--time-limit 60")
    ap.add_argument("--new-flags", default="")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="poetc-grid-"))
    (tmp / "dag250.json").write_text(json.dumps(layered_dag(250)))
    rows = []
    for cell in args.cells.split(","):
        cell_args = [a.replace("{dag250}", str(tmp / "dag250.json")) for a in CELLS[cell]]
        for side, root, flags in (("old", args.old_root, args.old_flags), ("new", ROOT, args.new_flags)):
            row = {"cell": cell, "side": side, **run(root, cell_args + flags.split(), tmp / f"{cell}_{side}.poet")}
            print(json.dumps(row), flush=True)
            rows.append(row)
    write_rows(args.out, rows, [
        "# Optimizer grid, old against new (bench/optimizer_grid.py)", "",
        f"Machine: {os.cpu_count()} cores, shared with other jobs (wall times are noisy; CPU seconds "
        f"less so). Old: `{args.old_flags}`; new: `{args.new_flags or 'defaults'}`.", ""], [
        ("cell", lambda r: r["cell"]), ("side", lambda r: r["side"]),
        ("status", lambda r: r.get("status", r.get("error"))), ("energy (J)", lambda r: figure(r.get("energy_j"))),
        ("bound (J)", lambda r: figure(r.get("lower_bound_j"))), ("gap", gap_text),
        ("stopped_by", lambda r: r.get("stopped_by") or "-"), ("effort used", lambda r: r.get("effort_used") or "-"),
        ("wall (s)", lambda r: r.get("wall_s")), ("CPU (s)", lambda r: r.get("cpu_s", "-")),
        ("peak RSS (MB)", lambda r: r.get("peak_rss_mb", "-"))])


if __name__ == "__main__":
    main()
