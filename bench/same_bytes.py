"""Same bytes? The reproducibility cells compiled by two checkouts, cell by cell: the sha256
of each ``.poet`` and a digest of its report's figures (timings aside), before and after.

    PYTHONPATH=. .venv/bin/python bench/same_bytes.py --before HEAD~1            # this tree against its parent
    PYTHONPATH=. .venv/bin/python bench/same_bytes.py --before HEAD~1 --quick    # the faster cells only
    PYTHONPATH=. .venv/bin/python bench/same_bytes.py --before main --after pipeline -o bench/results/same_bytes

A refactor that changes no byte of any cell has changed no behaviour the cells see
(docs/optimizer.md, "Work, not the clock": the same input, flags and version give the
same bytes on any load). ``--before``/``--after`` name a git revision (exported with
``git archive`` to ``--work``; its rows are cached there, by commit, since they cannot
change: by the digest of what a compile reads, :data:`INPUTS`) or ``.``, this working
tree as it is (never cached). Both run with this
interpreter and ``PYTHONPATH`` set to the checkout, each cell in a fresh child process.

Cells (``--cells`` selects by name; ``--quick`` takes those marked quick):

- ``demo``: the README demo, ``models/kws_dscnn.onnx --device m4 --ram 256k`` (quick);
- ``poet_linear_m4``: POET's linear example, ``--ram 3388 --deadline 1.5x`` (quick);
- ``r18_m4_50``, ``r18_a72_30``: ResNet-18-CIFAR (op level) m4 50 % 1.5x, a72 30 % 1.5x;
- ``vgg16_a72_50``: VGG16-CIFAR a72 50 % 2.0x (the full model's cell of docs/optimizer.md, "Ablation");
- ``mobilenetv2_a72_50``: MobileNetV2 a72 50 % (the deep cover's cell);
- ``dag100_80``, ``dag250_90``: Moccasin's layered DAGs (tests/support/layered.py),
  ``--mode remat`` at 80 % and 90 %;
- ``belady_dag100_70``: ``--strategy belady`` on the 100-node DAG at 70 % (quick);
- ``gpt2_a72_70``: GPT-2 a72 70 %, infeasible (the proof, no file);
- ``random``: 48 small random problems (tests/support/graphs.random_problem: every mode,
  tight and loose budgets, deadlines, DMA with both program families, static power) solved
  in one process at ``--effort quick`` by ``run_strategy("optimal", ...)``: the paths the
  zoo cells do not take (proofs, timeouts, fallbacks, the union of families); one digest of
  every program and report (quick).

On a loaded machine a cell can reach the default 600 s wall cap (``stopped_by`` ``time``,
the one case in which two runs may differ): ``--wall-cap S`` runs every cell at the default
effort under ``--time-limit S`` instead (the reports then say so, on both sides alike).

The report digest is the sha256 of the report JSON (``--json``) less its measured keys
(``solve/result.py``: ``MEASURED_KEYS``, the wall times) and the output path
(``schedule_file``); ``--show-diff`` prints the keys that differ; ``--ignore KEY,...`` leaves
keys out of both sides' digests (a commit that removes a report key on purpose). Writes
``OUT.jsonl`` and ``OUT.md`` with ``-o``; exits 1 when any cell differs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.rows import write_rows  # noqa: E402
from tests.support.layered import layered_dag  # noqa: E402

CELLS: dict[str, list[str]] = {
    "demo": ["models/kws_dscnn.onnx", "--device", "m4", "--ram", "256k"],
    "poet_linear_m4": ["tests/regressions/poet_linear_m4.json", "--ram", "3388", "--deadline", "1.5x"],
    "belady_dag100_70": ["{dag100}", "--mode", "remat", "--ram", "70%", "--strategy", "belady"],
    "dag100_80": ["{dag100}", "--mode", "remat", "--ram", "80%"],
    "r18_m4_50": ["resnet18_cifar", "--device", "m4", "--ram", "50%", "--deadline", "1.5x"],
    "r18_a72_30": ["resnet18_cifar", "--device", "a72", "--ram", "30%", "--deadline", "1.5x"],
    "vgg16_a72_50": ["vgg16_cifar", "--device", "a72", "--ram", "50%", "--deadline", "2.0x"],
    "mobilenetv2_a72_50": ["mobilenetv2", "--device", "a72", "--ram", "50%"],
    "dag250_90": ["{dag250}", "--mode", "remat", "--ram", "90%"],
    "gpt2_a72_70": ["gpt2", "--device", "a72", "--ram", "70%"],
    "random": [],
}
QUICK = ("demo", "poet_linear_m4", "belady_dag100_70", "random")

# The random problems: (seed, nodes, mode, deadline probability, DMA, static power, budget fraction).
RANDOM_SPECS = [
    (seed, n, mode, dl, dma, sw, frac)
    for seed, (n, mode, dl, dma, sw, frac) in enumerate([
        (6, "poet", 0.0, False, 0.0, None), (6, "remat", 0.5, False, 0.0, None), (6, "paging", 0.5, False, 0.0, None),
        (6, "none", 0.0, False, 0.0, 1.0), (8, "poet", 1.0, True, 0.1, None), (8, "poet", 1.0, True, 0.0, 0.3),
        (9, "poet", 0.0, False, 0.0, 0.2), (9, "remat", 0.0, False, 0.0, 0.0), (9, "paging", 0.0, False, 0.0, 0.4),
        (10, "poet", 1.0, True, 0.1, 0.5), (12, "poet", 0.3, False, 0.1, None), (12, "remat", 1.0, False, 0.0, 0.1),
        (14, "poet", 1.0, True, 0.0, 0.2), (16, "poet", 0.0, False, 0.0, 0.05), (20, "poet", 0.0, False, 0.0, 0.2),
        (20, "remat", 0.0, False, 0.0, 0.0), (20, "poet", 0.5, True, 0.1, 0.3), (24, "paging", 0.3, False, 0.0, 0.5),
        (30, "poet", 0.0, False, 0.0, 0.1), (30, "poet", 1.0, True, 0.0, 0.4), (30, "remat", 0.0, False, 0.1, 0.2),
        (36, "poet", 0.0, False, 0.0, 1.0), (45, "poet", 0.5, False, 0.0, 0.15), (45, "remat", 0.0, True, 0.1, 0.25),
    ] * 2)
]

# Runs in the checkout under test (PYTHONPATH): only APIs every commit of the refactor keeps.
# argv[1]: the problems, each a RANDOM_SPECS entry and its gap limit; argv[2], if given: --threads.
_RANDOM_CHILD = r"""
import hashlib, json, sys
from poet_compiler.solve.options import SolveOptions
from poet_compiler.solve.result import MEASURED_KEYS
from poet_compiler.solve.strategies import run_strategy
from tests.support.graphs import random_problem

def digest(x):
    return hashlib.sha256(json.dumps(x, sort_keys=True, default=str).encode()).hexdigest()

threads = {} if len(sys.argv) < 4 else {"threads": int(sys.argv[3])}
out = []
for seed, n, mode, dl, dma, sw, frac, gap in json.loads(sys.argv[1]):
    p = random_problem(seed, n, mode, deadline_prob=dl, dma=dma, static_w=sw, budget_fraction=frac)
    res = run_strategy("optimal", p, SolveOptions(effort="quick", time_limit_s=float(sys.argv[2]), gap_limit=gap,
                                                  **threads))
    rep = {key: v for key, v in res.report().items() if key not in MEASURED_KEYS}
    prog = None if res.program is None else [res.program.arena_bytes, [str(i) for i in res.program.instructions]]
    out.append({"report": rep, "program": prog})
print(json.dumps({"sha256": digest([o["program"] for o in out]), "report": digest([o["report"] for o in out]),
                  "reports": [o["report"] for o in out], "programs": [digest(o["program"])[:12] for o in out]}))
"""


def random_problems(indices: list[int] | None = None) -> list[list]:
    """The random problems (those at ``indices`` of :data:`RANDOM_SPECS`, else all), each
    with its gap limit: the second half of the specs at 1 % (the stops within the gap)."""
    half = len(RANDOM_SPECS) // 2
    chosen = range(len(RANDOM_SPECS)) if indices is None else indices
    return [[*RANDOM_SPECS[k], 0.01 if k >= half else None] for k in chosen]


def _measured_keys() -> frozenset[str]:
    from poet_compiler.solve.result import MEASURED_KEYS

    return MEASURED_KEYS


def figures(report: dict) -> dict:
    """The report less its wall times."""
    measured = _measured_keys() | {"schedule_file"}   # the output path: a temporary directory
    return {k: v for k, v in report.items() if k not in measured}


def digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


# What a compile reads: a revision's rows are cached under the digest of these trees, so
# that commits which change only benches or docs share them.
INPUTS = ("poet_compiler", "models", "profiles", "tests/support", "tests/regressions")


def checkout(rev: str, work: Path) -> tuple[Path, str | None]:
    """The directory of revision ``rev`` (exported once) and the digest of its :data:`INPUTS`
    (the cache key), or this tree for ``.`` (never cached)."""
    if rev == ".":
        return ROOT, None
    sha = _git("rev-parse", f"{rev}^{{commit}}")
    root = work / sha[:12]
    if not (root / "poet_compiler").is_dir():
        root.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", sha], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    key = digest([_git("rev-parse", f"{sha}:{path}") for path in INPUTS])
    return root, key


def run_cell(cell: str, root: Path, dags: dict[str, Path], wall_cap: float | None = None, *,
             threads: int | None = None, problems: list[int] | None = None) -> dict:
    """One cell compiled by the checkout at ``root`` in a fresh process; ``wall_cap``: its
    --time-limit, the effort given as the default's (module docstring); ``threads``: its
    ``--threads``, else the default; ``problems``: of the random cell, by index."""
    env = dict(os.environ, PYTHONPATH=str(root))
    started = time.perf_counter()
    more = [] if threads is None else [str(threads)]
    if cell == "random":
        proc = subprocess.run([sys.executable, "-c", _RANDOM_CHILD, json.dumps(random_problems(problems)),
                               str(wall_cap or 600.0), *more], cwd=root, env=env, capture_output=True, text=True,
                              check=False)
        try:
            got = json.loads(proc.stdout)
        except json.JSONDecodeError:
            return {"error": proc.stderr.strip().splitlines()[-3:], "wall_s": round(time.perf_counter() - started)}
        return {"sha256": got["sha256"], "report": got["report"],
                "figures": {"reports": got["reports"], "programs": got.get("programs")},
                "wall_s": round(time.perf_counter() - started, 1)}
    args = list(CELLS[cell]) + (["--effort", "default", "--time-limit", f"{wall_cap:g}"] if wall_cap else [])
    args += ["--threads", *more] if more else []
    for key, path in dags.items():
        args = [a.replace("{" + key + "}", str(path)) for a in args]
    with tempfile.TemporaryDirectory(prefix="poetc-same-") as tmp:
        out = Path(tmp) / "out.poet"
        proc = subprocess.run([sys.executable, "-m", "poet_compiler.cli", "compile", *args, "-o", str(out),
                               "--json", "-q"], cwd=root, env=env, capture_output=True, text=True, check=False)
        wall = round(time.perf_counter() - started, 1)
        try:
            report = json.loads(proc.stdout)
        except json.JSONDecodeError:
            return {"error": proc.stderr.strip().splitlines()[-3:], "wall_s": wall}
        sha = hashlib.sha256(out.read_bytes()).hexdigest() if out.exists() else None
    fig = figures(report)
    return {"sha256": sha, "report": digest(fig), "figures": fig, "wall_s": wall, "status": report.get("status"),
            "stopped_by": report.get("stopped_by"), "energy_j": report.get("energy_j")}


def cached_cell(cell: str, root: Path, sha: str | None, dags: dict[str, Path], work: Path,
                wall_cap: float | None = None) -> dict:
    """:func:`run_cell`, from the cache when a revision with the same inputs (``sha``) ran it
    (with the same ``wall_cap``)."""
    path = work / "rows" / f"{sha}_{cell}{f'_cap{wall_cap:g}' if wall_cap else ''}.json" if sha else None
    if path is not None and path.exists():
        return {**json.loads(path.read_text()), "cached": True}
    row = run_cell(cell, root, dags, wall_cap)
    if path is not None and "error" not in row:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(row))
    return row


def _without(row: dict, ignored: set[str]) -> dict:
    """``row`` with its report digest taken without the ``ignored`` keys."""
    fig = row.get("figures")
    if fig is None:
        return row
    if "reports" in fig:   # the random cell: one digest of every report
        reports = [{k: v for k, v in r.items() if k not in ignored} for r in fig["reports"]]
        return {**row, "report": digest(reports), "figures": {**fig, "reports": reports}}
    kept = {k: v for k, v in fig.items() if k not in ignored}
    return {**row, "report": digest(kept), "figures": kept}


def _diff(a: object, b: object, where: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str) for d in _diff(a.get(k), b.get(k), f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _diff(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {json.dumps(a, default=str)[:200]} -> {json.dumps(b, default=str)[:200]}"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="HEAD~1", help="a git revision, or . for this working tree")
    ap.add_argument("--after", default=".", help="a git revision, or . for this working tree (the default)")
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--quick", action="store_true", help="the quick cells only: " + ", ".join(QUICK))
    ap.add_argument("--jobs", type=int, default=1, help="cells run at once (the bytes do not depend on the load)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "poetc-same-bytes",
                    help="where revisions are exported and their rows cached")
    ap.add_argument("--wall-cap", type=float, default=None,
                    help="seconds: every cell runs with --time-limit S and --effort default (the default effort, "
                         "under a cap a loaded machine does not reach: the default 600 s cap can stop a cell there, "
                         "stopped_by=time, whose bytes may then differ); rows cached apart")
    ap.add_argument("--show-diff", action="store_true", help="print the report keys that differ")
    ap.add_argument("--ignore", default="", help="report keys left out of the digests (KEY,KEY: a commit that "
                    "drops or adds a report key on purpose)")
    ap.add_argument("-o", "--out", type=Path)
    args = ap.parse_args()
    cells = list(QUICK) if args.quick else args.cells.split(",")
    unknown = [c for c in cells if c not in CELLS]
    if unknown:
        raise SystemExit(f"unknown cell(s) {', '.join(unknown)}; known: {', '.join(CELLS)}")
    args.work.mkdir(parents=True, exist_ok=True)
    sides = [checkout(args.before, args.work), checkout(args.after, args.work)]
    dags = {}
    for n in (100, 250):
        dags[f"dag{n}"] = args.work / f"layered_{n}.json"
        dags[f"dag{n}"].write_text(json.dumps(layered_dag(n)))
    jobs = [(cell, side) for cell in cells for side in (0, 1)]
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        done = list(pool.map(lambda job: cached_cell(job[0], sides[job[1]][0], sides[job[1]][1], dags, args.work,
                                                     args.wall_cap),
                             jobs))
    ignored = {k for k in args.ignore.split(",") if k}
    if ignored:
        done = [_without(row, ignored) for row in done]
    rows, same_all = [], True
    for k, cell in enumerate(cells):
        before, after = done[2 * k], done[2 * k + 1]
        same = "error" not in before and "error" not in after and \
            (before["sha256"], before["report"]) == (after["sha256"], after["report"])
        same_all &= same
        row = {"cell": cell, "sha256_before": before.get("sha256"), "sha256_after": after.get("sha256"),
               "report_before": before.get("report"), "report_after": after.get("report"), "same": same,
               "status": after.get("status"), "stopped_by": after.get("stopped_by"), "energy_j": after.get("energy_j"),
               "wall_s_before": before.get("wall_s"), "wall_s_after": after.get("wall_s"),
               "error": before.get("error") or after.get("error")}
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if v is not None}), flush=True)
        if not same and args.show_diff and "figures" in before and "figures" in after:
            for line in _diff(before["figures"], after["figures"])[:40]:
                print("   ", line)
    names = [args.before if args.before != "." else "the working tree",
             args.after if args.after != "." else "the working tree"]
    if args.out:
        write_rows(args.out, rows, [
            f"# Same bytes: {names[0]} against {names[1]} (bench/same_bytes.py)", "",
            "sha256 of the `.poet` (the `random` cell: of its 48 programs), and of the report less its "
            "measured keys (first 12 hex digits each).", ""], [
            ("cell", lambda r: r["cell"]),
            ("sha256 before", lambda r: (r["sha256_before"] or "no file")[:12]),
            ("sha256 after", lambda r: (r["sha256_after"] or "no file")[:12]),
            ("report before", lambda r: (r["report_before"] or "-")[:12]),
            ("report after", lambda r: (r["report_after"] or "-")[:12]),
            ("same", lambda r: "yes" if r["same"] else "**no**"),
            ("status", lambda r: r.get("status") or "-"), ("stopped_by", lambda r: r.get("stopped_by") or "-")])
    print("same bytes in every cell" if same_all else "DIFFERENT: see the rows above", flush=True)
    return 0 if same_all else 1


if __name__ == "__main__":
    raise SystemExit(main())
