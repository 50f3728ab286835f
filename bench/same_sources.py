"""Same generated sources? ``poetc emit-c`` by two checkouts on the same schedules: the
sha256 of every file each writes, side by side.

    PYTHONPATH=. .venv/bin/python bench/same_sources.py --before HEAD~1              # against the parent
    PYTHONPATH=. .venv/bin/python bench/same_sources.py --before main -o bench/results/same_sources

A refactor of code emission changes no byte of what it emits. The schedules are compiled
once, by the ``--before`` checkout, and both checkouts emit C from the same ``.poet``
files, so a difference is emission's alone:

- ``demo``: the README demo's schedule (``make demo``: kws_dscnn, m4, 256 KiB), one step;
- ``paging``: as ``make device-demo``'s (kws_dscnn, m4, 211 KiB, deadline 2x: pages and
  recomputes), one step;
- ``train``: as ``make device-train``'s (digits_cnn, m4, 128 KiB, deadline 1.04x, SGD with
  momentum in the schedule), a ``--train-loop`` firmware.

(The last two at the effort of their ``--time-limit 30``, under a 300 s wall cap.)

``--before``/``--after`` are git revisions (exported with ``git archive``, as
``bench/same_bytes.py`` does) or ``.``, this working tree. Exits 1 when a file differs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.rows import write_rows  # noqa: E402
from bench.same_bytes import checkout  # noqa: E402

# The effort of --time-limit 30, under a wall cap a loaded machine does not reach first (the
# schedule is compiled once: emission is what is compared).
LIMIT = ["--effort", "9", "--time-limit", "300"]
# name: (model, compile flags, emit-c flags)
CELLS: dict[str, tuple[str, list[str], list[str]]] = {
    "demo": ("models/kws_dscnn.onnx", ["--device", "m4", "--ram", "256k"], []),
    "paging": ("models/kws_dscnn.onnx", ["--device", "m4", "--ram", "211k", "--deadline", "2x",
                                         *LIMIT], []),
    "train": ("digits_cnn", ["--device", "m4", "--ram", "128k", "--deadline", "1.04x", "--optimizer",
                             "sgd:lr=0.02,momentum=0.9", *LIMIT],
              ["--optimizer", "sgd:lr=0.02,momentum=0.9", "--train-loop", "--epochs", "5", "--log-every", "10"]),
}


def _poetc(root: Path, *args: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(root))
    proc = subprocess.run([sys.executable, "-m", "poet_compiler.cli", *args], cwd=root, env=env,
                          capture_output=True, text=True, check=False)
    if proc.returncode:
        raise SystemExit(f"poetc {' '.join(args)} failed in {root}:\n{proc.stderr[-2000:]}")


def emitted(root: Path, model: str, schedule: Path, flags: list[str], out: Path) -> dict[str, str]:
    """sha256 of every file ``emit-c`` by the checkout at ``root`` writes, by relative path."""
    _poetc(root, "emit-c", model, "--schedule", str(schedule), "-o", str(out), *flags)
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file()}


def revision_parser(description: str) -> argparse.ArgumentParser:
    """The options of a before/after comparison: ``--before``, ``--after``, ``--work``, ``-o``."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--before", default="HEAD~1", help="a git revision, or . for this working tree")
    ap.add_argument("--after", default=".", help="a git revision, or . for this working tree (the default)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "poetc-same-bytes",
                    help="where revisions are exported")
    ap.add_argument("-o", "--out", type=Path)
    return ap


def checkouts(args: argparse.Namespace) -> tuple[Path, Path]:
    """The directories of ``args.before`` and ``args.after`` (exported once)."""
    args.work.mkdir(parents=True, exist_ok=True)
    return checkout(args.before, args.work)[0], checkout(args.after, args.work)[0]


def main() -> int:
    ap = revision_parser(__doc__.splitlines()[0])
    ap.add_argument("--cells", default=",".join(CELLS))
    args = ap.parse_args()
    before, after = checkouts(args)
    rows, same_all = [], True
    with tempfile.TemporaryDirectory(prefix="poetc-sources-") as tmp:
        for cell in args.cells.split(","):
            model, compile_flags, emit_flags = CELLS[cell]
            schedule = Path(tmp) / f"{cell}.poet"
            model_arg = str(before / model) if model.endswith(".onnx") else model
            _poetc(before, "compile", model_arg, *compile_flags, "-o", str(schedule), "-q")
            a = emitted(before, model_arg, schedule, emit_flags, Path(tmp) / f"{cell}_before")
            b = emitted(after, model_arg, schedule, emit_flags, Path(tmp) / f"{cell}_after")
            for name in sorted(set(a) | set(b)):
                same = a.get(name) == b.get(name)
                same_all &= same
                rows.append({"cell": cell, "file": name, "before": a.get(name), "after": b.get(name), "same": same})
            differ = [r["file"] for r in rows if r["cell"] == cell and not r["same"]]
            print(json.dumps({"cell": cell, "files": len(a), "differ": differ}), flush=True)
    if args.out:
        names = [r if r != "." else "the working tree" for r in (args.before, args.after)]
        write_rows(args.out, rows, [
            f"# Same generated sources: {names[0]} against {names[1]} (bench/same_sources.py)", "",
            "sha256 of every file `poetc emit-c` writes, both checkouts on the same `.poet` "
            "(compiled by the first; first 12 hex digits).", ""], [
            ("cell", lambda r: r["cell"]), ("file", lambda r: r["file"]),
            ("before", lambda r: (r["before"] or "none")[:12]), ("after", lambda r: (r["after"] or "none")[:12]),
            ("same", lambda r: "yes" if r["same"] else "**no**")])
    print("the same sources in every cell" if same_all else "DIFFERENT: see the rows above", flush=True)
    return 0 if same_all else 1


if __name__ == "__main__":
    raise SystemExit(main())
