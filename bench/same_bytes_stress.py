"""Same bytes under load, run after run: cells of ``bench/same_bytes.py`` compiled again and
again, two at a time beside two busy loops, and how many different programs came out.

    PYTHONPATH=. .venv/bin/python bench/same_bytes_stress.py -o bench/results/same_bytes_stress
    PYTHONPATH=. .venv/bin/python bench/same_bytes_stress.py --rev main --cells random --runs 36
    PYTHONPATH=. .venv/bin/python bench/same_bytes_stress.py --cells random --problems 36 --runs 300

A tie between equally good programs broken by thread timing shows only now and then:
random problem 36 gave another program in about 1 run in 36 of two children at once
beside two ``python3 -c 'while True: pass'`` (BENCHMARKS.md, "Reproducibility"). A defect
that shows in 1 run in K shows within N runs with probability 1 - (1 - 1/K)^N: for K = 36,
N = 100 gives 94 %, N = 165 gives 99 %.

Cells (``--cells``): ``random`` (the 48 random problems in one process, ``--problems``
selects some by index), ``demo`` (the README demo) and ``r18_m4_50`` (ResNet-18-CIFAR m4
50 % 1.5x), each at ``--threads`` 1 and at the default (``--threads-list``). ``--rev``: a
git revision, exported as ``bench/same_bytes.py`` does, or ``.`` (this tree; do not edit
it while the runs go on). A row per (cell, threads): runs, distinct digests (the ``.poet``
sha256; the random cell's: of its programs) with their counts, the random problems whose
program differed, the ``stopped_by`` seen (``time``: the wall cap decided, the one case in
which runs may differ) and the detection probability for K = 36. Writes ``OUT.jsonl`` and
``OUT.md``; exits 1 when a cell gave two digests without the wall cap deciding.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.load import busy_loops  # noqa: E402
from bench.rows import write_rows  # noqa: E402
from bench.same_bytes import checkout, run_cell  # noqa: E402

CELLS = ("random", "demo", "r18_m4_50")
# The rate the detection probability is given for: random problem 36's.
ONE_IN = 36


def detection(runs: int, one_in: int = ONE_IN) -> float:
    """The probability that a defect showing in 1 run in ``one_in`` shows within ``runs``."""
    return 1.0 - (1.0 - 1.0 / one_in) ** runs


def digest_of(row: dict) -> str:
    """A run's digest: the ``.poet`` sha256 (random: of its programs), or its error."""
    if "error" in row:
        return "error: " + " ".join(row["error"])[-120:]
    return (row.get("sha256") or "no file")[:12]


def stress(cell: str, threads: int | None, runs: int, root: Path, problems: list[int] | None) -> dict:
    """``runs`` compiles of ``cell``, two at a time (the caller keeps the busy loops)."""
    rows: list[dict] = []
    with ThreadPoolExecutor(max_workers=2) as pool:
        for _ in range((runs + 1) // 2):
            rows += pool.map(lambda _: run_cell(cell, root, {}, threads=threads, problems=problems), range(2))
    rows = rows[:runs]
    digests = Counter(digest_of(r) for r in rows)
    stopped = sorted({str(r.get("stopped_by")) for r in rows if cell != "random"})
    programs = [r["figures"]["programs"] for r in rows if cell == "random" and "figures" in r]
    indices = problems if problems is not None else list(range(len(programs[0]) if programs else 0))
    moved = [indices[k] for k in range(len(indices)) if len({p[k] for p in programs}) > 1]
    return {"cell": cell, "threads": threads or "default", "runs": len(rows), "distinct": len(digests),
            "digests": dict(digests.most_common()), "problems_moved": moved, "stopped_by": stopped,
            "wall_s": [min(r.get("wall_s") or 0 for r in rows), max(r.get("wall_s") or 0 for r in rows)],
            "detection": round(detection(len(rows)), 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", default=".", help="a git revision, or . for this working tree")
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--runs", type=int, default=100, help="runs per cell and thread count")
    ap.add_argument("--threads-list", default="1,default", help="the --threads to run each cell at")
    ap.add_argument("--problems", default="", help="the random cell's problems, by index (default: all 48)")
    ap.add_argument("--busy", type=int, default=2, help="busy loops beside the runs")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "poetc-same-bytes")
    ap.add_argument("-o", "--out", type=Path)
    args = ap.parse_args()
    cells = args.cells.split(",")
    unknown = [c for c in cells if c not in CELLS]
    if unknown:
        raise SystemExit(f"unknown cell(s) {', '.join(unknown)}; known: {', '.join(CELLS)}")
    threads = [None if t == "default" else int(t) for t in args.threads_list.split(",")]
    problems = [int(k) for k in args.problems.split(",")] if args.problems else None
    args.work.mkdir(parents=True, exist_ok=True)
    root, _ = checkout(args.rev, args.work)
    rows = []
    with busy_loops(args.busy):
        for cell in cells:
            for t in threads:
                row = stress(cell, t, args.runs, root, problems if cell == "random" else None)
                print(json.dumps(row), flush=True)
                rows.append(row)
    bad = [r for r in rows if r["distinct"] > 1 and "time" not in r["stopped_by"]]
    if args.out:
        where = args.rev if args.rev != "." else "the working tree"
        picked = f", problems {args.problems}" if problems is not None else ""
        write_rows(args.out, rows, [
            f"# Same bytes under load: {where} (bench/same_bytes_stress.py{picked})", "",
            f"Two runs at a time beside {args.busy} busy loops; detection: the probability that a defect "
            f"showing in 1 run in {ONE_IN} shows within the runs.", ""], [
            ("cell", lambda r: r["cell"]), ("threads", lambda r: r["threads"]), ("runs", lambda r: r["runs"]),
            ("distinct", lambda r: r["distinct"]),
            ("digests (12): runs", lambda r: ", ".join(f"{d}: {n}" for d, n in r["digests"].items())),
            ("problems moved", lambda r: ", ".join(map(str, r["problems_moved"])) or "-"),
            ("stopped_by", lambda r: ", ".join(r["stopped_by"]) or "-"),
            ("wall s", lambda r: f"{r['wall_s'][0]:g}-{r['wall_s'][1]:g}"),
            ("detection", lambda r: f"{100 * r['detection']:.0f} %")])
    print("the same bytes in every cell" if not bad else "DIFFERENT: see the rows above", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
