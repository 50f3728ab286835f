"""The optimizer's size at one or more commits: lines of ``poet_compiler/solve`` (and of
``poet_compiler/solvers``, the back-ends that were ``solve/backends``) and its numeric
constants (module-level, and the fields of ``solve/tuning.py``'s ``Tuning``), each with its kind.

    python bench/solve_size.py cf6fe30 HEAD        # before and after, side by side
    python bench/solve_size.py HEAD --list         # every constant, its file and kind

Kinds (by name; a name not listed is ``tuning``, so a new constant counts as one until it
is shown to be something else):

- ``tuning``: trades the schedule's quality against work (a share, a depth, a threshold);
- ``precision``: tolerances and the integer scaling of costs (they decide no search);
- ``cap``: the memory, process and wall caps, and dtr's bound on a thrashing eviction run
  (it fails past k·n computes), which decide nothing unless a cap is hit;
- ``fitted``: coefficients of the full model's memory forecast (measurements themselves);
- ``interface``: a user-facing default (effort presets, the default gap, the memory limit);
- ``fact``: a property of a tool (Gurobi's size-limited license).
"""

from __future__ import annotations

import argparse
import ast
import subprocess

ROOT = "poet_compiler/solve"
# The solver back-ends, which left solve/ for a layer of their own (counted with it).
SOLVERS = "poet_compiler/solvers"
KINDS = {
    "precision": {"_TIME_BITS", "_ENERGY_BITS", "_BIG", "_Q", "_SCALE", "_DEADLINE_TOL", "_SLACK_TOL",
                  "_HINT_TIME_TOL", "OPTIMALITY_TOL", "BOUND_NOISE"},
    "cap": {"EVERY_S", "MARGIN", "CHILD_GRACE_S", "DEFAULT_MEMORY_LIMIT", "MAX_COMPUTES_PER_NODE", "WALL_MARGIN"},
    "fitted": {"FORECAST_BASE_BYTES", "FORECAST_BYTES_PER_PAIR", "BASE_RSS_BYTES"},
    "interface": {"EFFORT_PRESETS", "EFFORT_PER_LIMIT_S", "DEFAULT_GAP_LIMIT", "DEFAULT_TIME_LIMIT_S",
                  "WELL_INSIDE_SHARE"},
    "fact": {"SIZE_LIMIT"},
}


def kind_of(name: str) -> str:
    """The kind of constant ``name`` (a Tuning field by its upper-case name)."""
    name = name.removeprefix("Tuning.").upper() if name.startswith("Tuning.") else name
    return next((kind for kind, names in KINDS.items() if name in names), "tuning")


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def numeric_constants(source: str) -> list[tuple[str, str]]:
    """``(name, value)`` of the module-level UPPER_CASE assignments whose value holds a
    number (registries of names and tuples of strings are not constants of this kind), and
    of the numeric fields of a class ``Tuning`` (solve/tuning.py), named ``Tuning.field``."""
    found = []
    tree = ast.parse(source)
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Tuning"):
        for node in cls.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and \
                    isinstance(node.value, ast.Constant) and isinstance(node.value.value, (int, float)) and \
                    not isinstance(node.value.value, bool):
                found.append((f"Tuning.{node.target.id}", ast.unparse(node.value)))
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names, value = [t.id for t in node.targets if isinstance(t, ast.Name)], node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            names, value = [node.target.id], node.value
        else:
            continue
        numbers = [n for n in ast.walk(value) if isinstance(n, ast.Constant)
                   and isinstance(n.value, (int, float)) and not isinstance(n.value, bool)]
        found += [(name, ast.unparse(value)) for name in names if name.isupper() and numbers]
    return found


def measure(rev: str) -> tuple[int, list[tuple[str, str, str, str]]]:
    """Lines of ``solve/`` at ``rev``, and its constants as (file, name, value, kind)."""
    lines, constants = 0, []
    paths = _git("ls-tree", "-r", "--name-only", rev, ROOT, SOLVERS).split()
    for path in sorted(p for p in paths if p.endswith(".py")):
        source = _git("show", f"{rev}:{path}")
        lines += source.count("\n")
        short = path.removeprefix("poet_compiler/")
        constants += [(short, name, value, kind_of(name)) for name, value in numeric_constants(source)]
    return lines, constants


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("revs", nargs="+", help="commits to measure (e.g. cf6fe30 HEAD)")
    ap.add_argument("--list", action="store_true", help="list every constant of the last commit")
    args = ap.parse_args()
    kinds = ["tuning", *KINDS]
    print("| commit | lines | numeric constants | " + " | ".join(kinds) + " |")
    print("|---|---|---|" + "---|" * len(kinds))
    for rev in args.revs:
        lines, constants = measure(rev)
        counts = [sum(1 for c in constants if c[3] == k) for k in kinds]
        print(f"| {rev} | {lines:,} | {len(constants)} | " + " | ".join(map(str, counts)) + " |")
    if args.list:
        for path, name, value, kind in sorted(constants, key=lambda c: (kinds.index(c[3]), c[0], c[1])):
            print(f"{kind:9}  {path:32}  {name:26}  {value}")


if __name__ == "__main__":
    main()
