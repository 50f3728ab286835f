"""How fast does the presence bound close, and what would close it faster? Variants of
the presence model on one cell.

The presence model (poet_compiler/solve/presence.py) is solved by unsatisfiable cores on
one worker. This bench builds it for a cell of bench/gap_reference.py (its pickled
problem under ``ref/``, written by ``gap_reference.py prepare``), applies a variant,
solves it within ``--effort`` deterministic seconds and prints one JSON line: the bound,
the status (optimal: the variant's optimum is proven), the deterministic seconds, the
bound's trail (wall seconds scaled to deterministic ones at the run's average rate) and
the solution replayed (``overshoot``: instructions over the budget at a node's first
compute and inside a stage).

    PYTHONPATH=. .venv/bin/python bench/presence_variants.py kws_m4_256k_poet base in_stage --effort 60
    PYTHONPATH=. .venv/bin/python bench/presence_variants.py kws_m4_256k_poet windows:55,62,68 --effort 60

Variants (measured here, not wired into the pipeline), several joined by ``+``:

- ``base``: the model as the pipeline builds it;
- ``in_stage``: plus a row per recompute option (k, r): the tensors held through stage
  r, k's inputs, output and workspace within the budget (:func:`add_in_stage_rows`);
- ``stage_peak``: the same rows aggregated per stage (:func:`add_stage_peak_rows`);
- ``ub_fix``: every restore dearer alone than the cell's best schedule fixed off
  (:func:`fix_above_incumbent`);
- ``portfolio``: CP-SAT's interleaved portfolio instead of the core search;
- ``windows:C1,C2,...``: the objective split by stage windows (:func:`windows`).

The stage rows of the fast model added by rounds: bench/presence_rowgen.py. Figures:
BENCHMARKS.md, "Where the m4 gap is".
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from poet_compiler.solve import presence  # noqa: E402
from poet_compiler.solve.problem import Problem  # noqa: E402
from poet_compiler.solvers.native import NativeLimits, _solve_here  # noqa: E402


def add_in_stage_rows(problem: Problem, md: Any) -> int:
    """RAM while a recompute of stage r runs: every tensor present at points r - 1 and r
    and not restored in stage r was in RAM through the stage (a tensor freed in between
    must be restored to be present at r), so with k's inputs, output and workspace it
    fits the budget. Valid for every Program; returns the rows added."""
    g = problem.graph
    size = [node.output_bytes for node in g.nodes]
    budget = problem.activation_budget
    m = md.m
    rows = 0
    for (k, r), x in sorted(md.wr.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        inputs = sorted(set(g.nodes[k].inputs))
        need = size[k] + g.nodes[k].workspace_bytes + sum(size[j] for j in inputs)
        terms, const = [], 0
        for j in range(r):
            if j == k or j in inputs:
                continue
            h = _held_through(md, j, r)
            if isinstance(h, int):
                const += size[j] * h
            else:
                terms.append((h, size[j]))
        if const + need > budget and not terms:
            m.add(x == 0)
        elif const + need + sum(s for _, s in terms) > budget:
            m.add(sum(s * h for h, s in terms) + need * x <= budget - const)
        else:
            continue
        rows += 1
    return rows


def add_stage_peak_rows(problem: Problem, md: Any) -> int:
    """The in-stage rows of :func:`add_in_stage_rows` aggregated per stage: one row
    ``held(r) + z_r <= budget`` with ``z_r >= (m_k + w_k + inputs_k) wr[k, r] - inputs_k
    held`` per recompute option (an input held through the stage is counted once). The
    same bound, sparser rows. Returns the stage rows added."""
    g = problem.graph
    size = [node.output_bytes for node in g.nodes]
    budget = problem.activation_budget
    m = md.m
    by_stage: dict[int, list[int]] = {}
    for (k, r) in md.wr:
        by_stage.setdefault(r, []).append(k)
    rows = 0
    for r, ks in sorted(by_stage.items()):
        held = {j: _held_through(md, j, r) for j in range(r)}
        const = sum(size[j] for j, h in held.items() if isinstance(h, int) and h)
        free = [(h, size[j]) for j, h in held.items() if not isinstance(h, int)]
        peak = max(size[k] + g.nodes[k].workspace_bytes + sum(size[j] for j in set(g.nodes[k].inputs)) for k in ks)
        if const + sum(s for _, s in free) + peak <= budget:
            continue
        z = m.new_int_var(0, peak, f"z[{r}]")
        for k in ks:
            inputs = sorted(set(g.nodes[k].inputs))
            need = size[k] + g.nodes[k].workspace_bytes + sum(size[j] for j in inputs)
            fixed_in = sum(size[j] for j in inputs if isinstance(held[j], int) and held[j])
            var_in = [(held[j], size[j]) for j in inputs if not isinstance(held[j], int)]
            m.add(z >= (need - fixed_in) * md.wr[(k, r)] - sum(s * h for h, s in var_in))
        m.add(sum(s * h for h, s in free) + z <= budget - const)
        rows += 1
    return rows


def _held_through(md: Any, j: int, r: int) -> Any:
    """1, 0 or a literal >= "j present at points r - 1 and r and not restored in stage r"
    (memoized on ``md``)."""
    cache = md.__dict__.setdefault("held_cache", {})
    if (j, r) in cache:
        return cache[(j, r)]
    before, now = md.p.get((j, r - 1), 0), md.p.get((j, r), 0)
    restores = [x for x in (md.wr.get((j, r)), md.wp.get((j, r))) if x is not None]
    if (isinstance(before, int) and not before) or (isinstance(now, int) and not now):
        h: Any = 0
    elif isinstance(before, int) and isinstance(now, int) and not restores:
        h = 1
    else:
        h = md.m.new_bool_var(f"h[{j},{r}]")
        lits = [x for x in (before, now) if not isinstance(x, int)]
        md.m.add(h >= sum(lits) + (2 - len(lits)) - 1 - sum(restores))
    cache[(j, r)] = h
    return h


def fix_above_incumbent(problem: Problem, md: Any, upper_j: float) -> int:
    """Every restore literal whose cost alone takes the compute-once energy above
    ``upper_j`` (a schedule's energy) fixed at 0: no schedule cheaper than that one takes
    it, so the model still bounds the optimum (the bound is min(optimum, upper_j) or
    more). With a page-in, the page-out it implies is counted. Returns the literals fixed."""
    room = (upper_j - problem.costs.compute_only_j) * md.e_scale
    cost = {id(x): k for x, k in md.cost}
    fixed = 0
    for (k, _), x in list(md.wr.items()) + list(md.wp.items()):
        c = cost[id(x)] + (cost[id(md.out[k])] if md.wp.get((k, _)) is x else 0)
        if c > room:
            md.m.add(x == 0)
            fixed += 1
    return fixed


#: Rows a variant adds to the model (None: the model as built).
VARIANTS: dict[str, Callable[[Problem, Any], int] | None] = {
    "base": None, "in_stage": add_in_stage_rows, "stage_peak": add_stage_peak_rows}


def run(problem: Problem, variant: str, effort: float, wall_s: float, upper_j: float | None = None) -> dict[str, Any]:
    """Build the presence model with ``variant`` (parts joined by +), solve it by cores
    (``portfolio``: CP-SAT's interleaved portfolio instead), replay its solution."""
    t0 = time.perf_counter()
    md = presence._build(problem)
    parts = variant.split("+")
    rows = 0
    for part in parts:
        if part == "ub_fix":
            if upper_j is None:
                raise SystemExit("ub_fix needs the cell's best schedule (bench/gap_reference.py prepare)")
            rows += fix_above_incumbent(problem, md, upper_j)
        elif part != "portfolio" and (add_rows := VARIANTS[part]) is not None:
            rows += add_rows(problem, md)
    build_s = time.perf_counter() - t0
    base = problem.costs.compute_only_j
    trail: list[tuple[float, float]] = []
    t1 = time.perf_counter()

    def joules(units: float) -> float:
        return base + math.floor(units + 1e-6) / md.e_scale

    def on_bound(b: float) -> None:
        trail.append((round(time.perf_counter() - t1, 2), joules(b)))

    limits = NativeLimits(time_limit_s=wall_s, deterministic_s=effort, core="portfolio" not in parts,
                          interleave="portfolio" in parts)
    res = _solve_here(md.m, limits, on_bound=on_bound)
    overshoot = replay(problem, md, res) if res.has_solution else None
    wall = time.perf_counter() - t1
    det = res.deterministic_s or 0.0
    rate = det / wall if wall > 0 else 0.0
    return {"variant": variant, "rows": rows, "status": res.status, "build_s": round(build_s, 1),
            "bound_j": None if res.bound is None else joules(res.bound), "deterministic_s": round(det, 2),
            "wall_s": round(wall, 1),
            "overshoot": overshoot, "trail": [(round(w * rate, 2), b) for w, b in trail]}


def replay(problem: Problem, md: Any, res: Any) -> dict[str, Any]:
    """The solution realized (presence._realize) and replayed: its energy, peak, and the
    instructions over the budget, split into those at a node's first compute (a point the
    model has a row for) and the others (inside a stage)."""
    from poet_compiler.schedule.linearize import linearize
    from poet_compiler.schedule.program import Op
    from poet_compiler.schedule.simulate import simulate

    schedule = presence._realize(problem, md, res)
    if schedule is None:
        return {"realized": False}
    program = linearize(problem.graph, schedule, mode=problem.mode, dma=not problem.synchronous)
    sim = simulate(problem.graph, problem.costs, program)
    budget = problem.activation_budget
    seen: set[int] = set()
    at_points = inside = 0
    for ins, live in zip(program.instructions, sim.timeline, strict=True):
        first = ins.op == Op.COMPUTE and ins.node not in seen
        if ins.op == Op.COMPUTE:
            seen.add(ins.node)
        if live > budget:
            if first:
                at_points += 1
            else:
                inside += 1
    return {"realized": True, "energy_j": sim.energy_j, "peak": sim.peak_bytes, "budget": budget,
            "over_at_points": at_points, "over_inside": inside}


def windows(problem: Problem, effort: float, wall_s: float, cuts: list[int]) -> dict[str, Any]:
    """The presence model's objective split by stage windows ``[1, c1), [c1, c2), ...``:
    each window's least cost of its own restores (a page-out charged in the window of its
    tensor's first page-in option), every constraint kept. Each window optimum is at most
    what the optimum spends there, so their sum is a bound; each search has only its
    window's literals to prove."""
    md = presence._build(problem)
    edges = [1, *cuts, problem.n]
    stage_of: dict[int, int] = {}
    for (_, r), x in list(md.wr.items()) + list(md.wp.items()):
        stage_of[id(x)] = r
    for k, y in md.out.items():
        stage_of[id(y)] = min(r for (kk, r) in md.wp if kk == k)
    base = problem.costs.compute_only_j
    total, det, parts = 0.0, 0.0, []
    for a, b in zip(edges, edges[1:], strict=False):
        terms = [(x, c) for x, c in md.cost if a <= stage_of[id(x)] < b]
        md.m.minimize(sum(c * x for x, c in terms))
        res = _solve_here(md.m, NativeLimits(time_limit_s=wall_s, deterministic_s=effort, core=True))
        bound = math.floor((res.bound or 0.0) + 1e-6) / md.e_scale
        total += bound
        det += res.deterministic_s or 0.0
        parts.append({"window": [a, b], "status": res.status, "bound_j": bound,
                      "det_s": round(res.deterministic_s or 0.0, 2)})
    return {"bound_j": base + total, "det_s": round(det, 2), "windows": parts}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cell")
    ap.add_argument("variants", nargs="+",
                    help=f"{', '.join(VARIANTS)}, ub_fix, portfolio, several joined by +; or windows:C1,C2,...")
    ap.add_argument("--dir", type=Path, default=ROOT / "ref")
    ap.add_argument("--effort", type=float, default=60.0)
    ap.add_argument("--wall", type=float, default=7200.0)
    args = ap.parse_args()
    problem = pickle.loads((args.dir / args.cell / "problem.pkl").read_bytes())
    best = args.dir / args.cell / "best.pkl"
    upper = pickle.loads(best.read_bytes())["energy_j"] if best.is_file() else None
    if args.variants[0].startswith("windows:"):
        cuts = [int(c) for c in args.variants[0].partition(":")[2].split(",")]
        print(json.dumps(windows(problem, args.effort, args.wall, cuts)), flush=True)
        return
    for variant in args.variants:
        row = run(problem, variant, args.effort, args.wall, upper)
        print(json.dumps({"cell": args.cell, "upper_j": upper, **row}), flush=True)


if __name__ == "__main__":
    main()
