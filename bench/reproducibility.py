"""Same input, same flags, same bytes? `poetc compile` run again and again on four cells,
idle and under load, with the sha256 of every .poet it writes.

    PYTHONPATH=. .venv/bin/python bench/reproducibility.py -o bench/results/reproducibility
    PYTHONPATH=. .venv/bin/python bench/reproducibility.py --quick      # the README demo, --effort quick, once each way

Cells (default flags: the default --effort and --threads 2):

- ``demo``: the README demo, ``models/kws_dscnn.onnx --device m4 --ram 256k``;
- ``r18_m4_50``: ``resnet18_cifar --device m4 --ram 50% --deadline 1.5x`` (op level);
- ``gpt2_a72_70``: ``gpt2 --device a72 --ram 70%``;
- ``dag250_90``: a random layered DAG of 250 nodes (tests/support/layered.py, Moccasin's
  generator), ``--mode remat --ram 90%``.

Each cell runs ``--idle`` times as it is, ``--loaded`` times beside two CPU-bound
processes (``python3 -c 'while True: pass'``) and once under ``taskset -c 0`` (one core),
each a fresh ``poetc compile --json`` process. A row per run: the sha256 of the .poet,
``stopped_by``, status, energy, bound, gap, effort used, the command's wall seconds and
its CPU seconds (user + system, children included) and peak RSS (the largest of the
process and its children so far, ``resource.getrusage``: a bound, not the run's own). Writes ``OUT.jsonl``
and ``OUT.md`` (a table, and per cell whether every hash is the same).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.load import busy_loops
from bench.rows import gap_text, write_rows
from tests.support.layered import layered_dag

ROOT = Path(__file__).resolve().parent.parent
CELLS = {
    "demo": ["models/kws_dscnn.onnx", "--device", "m4", "--ram", "256k"],
    "r18_m4_50": ["resnet18_cifar", "--device", "m4", "--ram", "50%", "--deadline", "1.5x"],
    "gpt2_a72_70": ["gpt2", "--device", "a72", "--ram", "70%"],
    "dag250_90": ["{dag250}", "--mode", "remat", "--ram", "90%"],
}


def _run(args: list[str], out: Path, *, prefix: list[str]) -> dict:
    """One ``poetc compile`` in a child process: its report's figures, wall and peak RSS."""
    cmd = [*prefix, sys.executable, "-m", "poet_compiler.cli", "compile", *args, "-o", str(out), "--json", "-q"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak = after.ru_maxrss
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    try:
        rep = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"error": proc.stderr.strip().splitlines()[-1:] or ["no output"], "wall_s": round(wall, 1)}
    sha = hashlib.sha256(out.read_bytes()).hexdigest() if out.exists() else None
    return {"sha256": sha, "stopped_by": rep.get("stopped_by"), "status": rep.get("status"),
            "energy_j": rep.get("energy_j"), "lower_bound_j": rep.get("lower_bound_j"), "gap": rep.get("gap"),
            "effort": rep.get("effort"), "effort_used": rep.get("effort_used"), "wall_s": round(wall, 1),
            "cpu_s": round(cpu, 1), "peak_rss_mb": round(peak / 1024)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", type=Path, default=Path("bench/results/reproducibility"))
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--quick", action="store_true",
                    help="the README demo at --effort quick, once idle, once loaded, once on one core")
    ap.add_argument("--idle", type=int, default=3)
    ap.add_argument("--loaded", type=int, default=2)
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more poetc flags (e.g. --effort quick)")
    args = ap.parse_args()
    cells = ["demo"] if args.quick else args.cells.split(",")
    if args.quick:
        args.idle, args.loaded, args.extra = 1, 1, args.extra or ["--effort", "quick"]
    tmp = Path(tempfile.mkdtemp(prefix="poetc-repro-"))
    (tmp / "dag250.json").write_text(json.dumps(layered_dag(250)))
    rows = []
    taskset = shutil.which("taskset")
    for cell in cells:
        cell_args = [a.replace("{dag250}", str(tmp / "dag250.json")) for a in CELLS[cell]] + list(args.extra)
        runs = [("idle", 0, [])] * args.idle + [("loaded", 2, [])] * args.loaded
        if taskset:
            runs.append(("taskset -c 0", 0, [taskset, "-c", "0"]))
        for i, (load, busy_n, prefix) in enumerate(runs):
            with busy_loops(busy_n):
                row = _run(cell_args, tmp / f"{cell}_{i}.poet", prefix=prefix)
            row = {"cell": cell, "run": i, "load": load, **row}
            print(json.dumps(row), flush=True)
            rows.append(row)
    notes = []
    for cell in cells:
        mine = [r for r in rows if r["cell"] == cell]
        shas = {r.get("sha256") for r in mine}
        by = sorted({str(r.get("stopped_by")) for r in mine})
        same = "the same bytes in every run" if len(shas) == 1 else f"{len(shas)} different files"
        notes.append(f"- {cell}: {len(mine)} runs, {same}; stopped_by {', '.join(by)}")
    write_rows(args.out, rows, [
        f"# Reproducibility (bench/reproducibility.py{' --quick' if args.quick else ''})", "",
        f"Machine: {os.cpu_count()} cores, shared with other jobs (timings are noisy). "
        f"Flags: defaults{(' + ' + ' '.join(args.extra)) if args.extra else ''}.", ""], [
        ("cell", lambda r: r["cell"]), ("run", lambda r: r["run"]), ("load", lambda r: r["load"]),
        ("sha256 (12)", lambda r: (r.get("sha256") or "-")[:12]), ("stopped_by", lambda r: r.get("stopped_by")),
        ("status", lambda r: r.get("status")), ("energy (J)", lambda r: r.get("energy_j")), ("gap", gap_text),
        ("effort used", lambda r: r.get("effort_used")), ("wall (s)", lambda r: r.get("wall_s")),
        ("CPU (s)", lambda r: r.get("cpu_s")), ("peak RSS (MB)", lambda r: r.get("peak_rss_mb"))], notes)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
