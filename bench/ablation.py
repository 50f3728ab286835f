"""What each stage of `strategy="optimal"` contributes: the same compile with one stage
switched off, at the same effort (the results do not depend on the machine's load; only
the wall seconds do).

    PYTHONPATH=. .venv/bin/python bench/ablation.py -o bench/results/ablation
    PYTHONPATH=. .venv/bin/python bench/ablation.py --cells demo,poet_linear_m4 --variants all,no_presence

Variants (each a Tuning or the Steps of the pipeline, solve/tuning.py and
solve/pipeline/context.py, that the ``optimal`` strategy is run with, in a fresh process):

- ``all``: the pipeline as it is;
- ``no_presence``: no presence stage (``presence_max_pairs=0``: every model is too large);
- ``no_deep_cover``: no deep cover (``deep_cover=False``);
- ``no_widening``: the guided stage searches the first sub-problem only (``widen=False``);
- ``no_full_model``: the full model finds nothing (its rounds' solver returns a timeout);
- ``no_arena_retries``: no re-solve below an arena that did not fit (``max_arena_retries=0``);
- ``NAME=VALUE``: the Tuning field NAME set to VALUE (e.g. ``presence_share=0.4``; the
  heuristics and the infeasibility analysis keep the default tuning).

Cells: those of bench/optimizer_grid.py, or bench/time_limit_bench.py's names (grid cells
``op_MODEL_DEVICE_RAM_DEADLINE``, ``dagN_P``, ``gpt2_a72_70``, ...), run at the default
effort. A row per (cell, variant): status, energy, bound, gap, stopped_by, effort used and
per stage, wall seconds. Writes OUT.jsonl, OUT.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from optimizer_grid import CELLS  # noqa: E402

from bench.rows import figure, gap_text, write_rows  # noqa: E402

VARIANTS = ("all", "no_presence", "no_deep_cover", "no_widening", "no_full_model", "no_arena_retries")


def _switch_off(variant: str) -> None:
    """Run the ``optimal`` strategy of this process with ``variant``'s Tuning and Steps."""
    import dataclasses

    import poet_compiler.solve.strategies as strategies
    from poet_compiler.solve import milp
    from poet_compiler.solve.pipeline.steps import STEPS
    from poet_compiler.solve.tuning import TUNING
    from poet_compiler.solvers import BackendResult

    tuning, steps = TUNING, STEPS
    if variant == "no_presence":
        tuning = dataclasses.replace(TUNING, presence_max_pairs=0)
    elif variant == "no_deep_cover":
        tuning = dataclasses.replace(TUNING, deep_cover=False)
    elif variant == "no_widening":
        tuning = dataclasses.replace(TUNING, widen=False)
    elif variant == "no_full_model":
        steps = dataclasses.replace(STEPS, solve_full=lambda model, solver, opts: BackendResult(
            "timeout", None, None, None, 0.0, "cpsat", "switched off"))
    elif variant == "no_arena_retries":
        tuning = dataclasses.replace(TUNING, max_arena_retries=0)
    elif "=" in variant:
        name, value = variant.split("=", 1)
        tuning = dataclasses.replace(TUNING, **{name: type(getattr(TUNING, name))(value)})
    elif variant != "all":
        raise SystemExit(f"unknown variant {variant}")
    # The strategy registry's entry for "optimal" (strategies._optimal), with this tuning.
    strategies._optimal = lambda problem, opts: milp.solve_milp(problem, opts, tuning=tuning, steps=steps)


def _one(cell_args: list[str], variant: str) -> None:
    """In this (fresh) process: switch ``variant``'s stage off, compile, print the row."""
    import poet_compiler.cli  # noqa: F401  (every module of the pipeline loaded before a constant is set)

    _switch_off(variant)
    from poet_compiler.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "s.poet"
        main(["compile", *cell_args, "-o", str(out), "--quiet"])
        rep = json.loads(out.with_suffix(".json").read_text()) if out.with_suffix(".json").exists() else {}
    keys = ("status", "energy_j", "lower_bound_j", "gap", "stopped_by", "effort_used", "stage_effort")
    print("ROW " + json.dumps({k: rep.get(k) for k in keys}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", type=Path, default=Path("bench/results/ablation"))
    ap.add_argument("--cells", default="demo,poet_linear_m4,r18_m4_50_1.5x,dag250_90")
    ap.add_argument("--variants", default="all")
    ap.add_argument("--one", nargs=2, metavar=("VARIANT", "ARGS_JSON"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        _one(json.loads(args.one[1]), args.one[0])
        return
    from time_limit_bench import cell_args

    from tests.support.layered import layered_dag

    tmp = Path(tempfile.mkdtemp(prefix="poetc-ablation-"))
    for n in (100, 250, 500, 1000):
        (tmp / f"dag{n}.json").write_text(json.dumps(layered_dag(n)))
    variants = VARIANTS if args.variants == "all" else tuple(args.variants.split(","))
    rows = []
    for cell in args.cells.split(","):
        args_of = CELLS[cell] if cell in CELLS else cell_args(cell)[0]
        for n in (100, 250, 500, 1000):
            args_of = [a.replace(f"{{dag{n}}}", str(tmp / f"dag{n}.json")) for a in args_of]
        for variant in variants:
            started = time.perf_counter()
            proc = subprocess.run([sys.executable, __file__, "--one", variant, json.dumps(args_of)],
                                  capture_output=True, text=True, check=False, env=os.environ)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("ROW ")), None)
            row = {"cell": cell, "variant": variant, "wall_s": round(time.perf_counter() - started, 1),
                   **(json.loads(line[4:]) if line else {"error": proc.stderr.strip()[-300:]})}
            print(json.dumps(row), flush=True)
            rows.append(row)
    write_rows(args.out, rows, ["# Ablation (bench/ablation.py), default effort", ""], [
        ("cell", lambda r: r["cell"]), ("variant", lambda r: r["variant"]),
        ("status", lambda r: r.get("status", "error")), ("energy (J)", lambda r: figure(r.get("energy_j"))),
        ("bound (J)", lambda r: figure(r.get("lower_bound_j"))), ("gap", gap_text),
        ("stopped_by", lambda r: r.get("stopped_by")), ("effort used", lambda r: r.get("effort_used")),
        ("wall (s)", lambda r: r["wall_s"])])


if __name__ == "__main__":
    main()
