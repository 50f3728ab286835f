"""Does adding the fast model's memory rows inside a stage lift the presence bound?
Row generation on the presence model, by rounds.

Each round solves the presence model (poet_compiler/solve/presence.py) by cores, replays
every stage of its solution with the stage's recomputes in node order, adds a cut for
each stage whose peak goes over the budget, and solves again, until no stage is over
(then the solution's restores fit every stage) or ``--rounds`` or ``--effort``
(deterministic seconds over all rounds) run out. One JSON line per round: the bound, the
status, the stages over the budget (excess bytes, node at the peak). Every round's bound
is a bound over schedules whose recomputes in a stage run in node order (the fast
model's space). The cell's problem comes from bench/gap_reference.py ``prepare``.

    PYTHONPATH=. .venv/bin/python bench/presence_rowgen.py op_resnet18_cifar_m4_50_1.5 rows --effort 120
    PYTHONPATH=. .venv/bin/python bench/presence_rowgen.py op_resnet18_cifar_m4_50_1.5 peaks --effort 120
    PYTHONPATH=. .venv/bin/python bench/presence_rowgen.py op_resnet18_cifar_m4_50_1.5 clauses --effort 120

Cuts: ``rows``, the fast model's memory rows of every over-budget stage
(:func:`add_stage_rows`); ``peaks``, only the rows at each stage's peak; ``clauses``, a
clause per stage forbidding the peak's cause (:func:`cover_clauses`). Figures:
BENCHMARKS.md, "Where the m4 gap is".
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from poet_compiler.solve import presence  # noqa: E402
from poet_compiler.solve.problem import Problem  # noqa: E402
from poet_compiler.solvers.native import NativeLimits, _solve_here  # noqa: E402

Clause = list[tuple[str, int, int, bool]]


def add_stage_rows(problem: Problem, md: Any, stages: set[int], at: set[tuple[int, int]] | None = None) -> int:
    """The fast formulation's memory rows of ``stages`` (docs/model.md, "Memory inside a
    stage") written on the presence model's literals: in stage r the recomputes run in
    node order, a tensor is allocated at compute position k when it is available (present
    at r - 1, or recomputed in r at a position before k) and still needed (a reader at or
    after k in the stage, or present at r). Valid over schedules whose recomputes in a
    stage run in node order (the fast model's space). Returns the rows added."""
    g = problem.graph
    size = [node.output_bytes for node in g.nodes]
    work = [node.workspace_bytes for node in g.nodes]
    budget = problem.activation_budget
    m = md.m
    rows = 0
    for r in sorted(stages):
        options = sorted(k for (k, rr) in md.wr if rr == r)
        positions = options + [r]
        pos_set = set(positions)
        # "still needed from position c on": a non-increasing chain over j's readers in r
        still: dict[int, list[tuple[int, Any]]] = {}
        for j in range(r):
            readers = sorted({c for c in g.consumers[j] if c in pos_set})
            kept = md.p.get((j, r), 0)
            if not readers and (isinstance(kept, int) and not kept):
                continue
            below: Any = kept
            links: list[tuple[int, Any]] = []
            for c in reversed(readers):
                run: Any = 1 if c == r else md.wr[(c, r)]
                if (isinstance(below, int) and below) or isinstance(run, int):
                    a: Any = 1
                else:
                    a = m.new_bool_var(f"still[{j},{r},{c}]")
                    m.add(a >= run)
                    if not isinstance(below, int):
                        m.add(a >= below)
                links.append((c, a))
                below = a
            still[j] = list(reversed(links)) + [(r + 1, kept)]

        for k in options:
            if at is not None and (r, k) not in at:
                continue
            terms: list[tuple[Any, int]] = []
            const = 0
            for j, chain in still.items():
                if j == k:
                    continue
                need = next(a for c, a in chain if c >= k)     # still needed from position k on
                before = md.p.get((j, r - 1), 0)
                restored_late = [x for x in (md.wr.get((j, r)) if j > k else None, md.wp.get((j, r))) if x is not None]
                if j > k and isinstance(before, int) and not before:
                    continue          # not in RAM before its own recompute, after k
                # alloc >= need (+ before - 1 when j comes after k) - late restores
                lits = [need] + ([before] if j > k else [])
                if all(isinstance(x, int) for x in lits) and not restored_late:
                    const += size[j] * int(all(lits))
                    continue
                al = m.new_bool_var(f"alloc[{j},{r},{k}]")
                fixed = sum(x for x in lits if isinstance(x, int))
                m.add(al >= sum(x for x in lits if not isinstance(x, int)) + fixed - (len(lits) - 1)
                      - sum(restored_late))
                terms.append((al, size[j]))
            x = md.wr[(k, r)]
            m.add(sum(s * al for al, s in terms) + (size[k] + work[k]) * x <= budget - const)
            rows += 1
    return rows


def stage_peaks(problem: Problem, md: Any, res: Any) -> dict[int, tuple[int, int]]:
    """Per stage with restores: the RAM peak of the solution's stage under the fast
    model's accounting (recomputes in node order, a tensor freed after its last use in
    the stage unless present at r); only the stages over the budget."""
    g = problem.graph
    size = [node.output_bytes for node in g.nodes]
    work = [node.workspace_bytes for node in g.nodes]

    def val(x: Any) -> int:
        return x if isinstance(x, int) else res.value(x)

    over: dict[int, tuple[int, int]] = {}
    for r in range(1, problem.n):
        ks = sorted(k for (k, rr), x in md.wr.items() if rr == r and res.value(x))
        pages = {k for (k, rr), x in md.wp.items() if rr == r and res.value(x)}
        if not ks and not pages:
            continue
        order = ks + [r]

        def later(j: int, pos: int, order: list[int] = order, r: int = r) -> bool:
            return any(j in g.nodes[c].inputs for c in order[pos:]) or bool(val(md.p.get((j, r), 0)))

        live = {j for j in range(r) if val(md.p.get((j, r - 1), 0)) and later(j, 0) and j not in ks}
        peak, at = 0, r
        for pos, c in enumerate(order):
            live |= {j for j in set(g.nodes[c].inputs) if j in pages}
            mem = sum(size[j] for j in live) + size[c] + work[c]
            if mem > peak:
                peak, at = mem, c
            live.add(c)
            live = {j for j in live if later(j, pos + 1)}
        if peak > problem.activation_budget and at != r:
            over[r] = (peak - problem.activation_budget, at)
    return over


def cover_clauses(problem: Problem, md: Any, res: Any) -> list[Clause]:
    """For each stage whose replay (node order, as :func:`stage_peaks`) goes over the
    budget: a clause that forbids the cause at its peak, ``not (k recomputed in r and
    these tensors live then)``, each tensor's being live written as the literals that
    made it so in the solution (held through the stage; present at r - 1 and read by a
    later recompute of the stage; recomputed earlier in the stage and read later or
    present at r), the biggest first until they and k exceed the budget. A literal is
    ``(kind, tensor, point or stage, positive)`` with kind p, wr or wp; the clause is
    their disjunction. Valid over node-ordered stages."""
    g = problem.graph
    size = [node.output_bytes for node in g.nodes]
    work = [node.workspace_bytes for node in g.nodes]
    budget = problem.activation_budget

    def val(x: Any) -> int:
        return x if isinstance(x, int) else res.value(x)

    def lit(kind: str, j: int, t: int, positive: bool) -> Clause:
        table = md.p if kind == "p" else md.wr if kind == "wr" else md.wp
        x = table.get((j, t))
        return [] if x is None or isinstance(x, int) else [(kind, j, t, positive)]

    clauses = []
    for r in range(1, problem.n):
        ks = sorted(k for (k, rr), x in md.wr.items() if rr == r and res.value(x))
        if not ks:
            continue
        order = ks + [r]

        def readers_from(j: int, pos: int, order: list[int] = order) -> list[int]:
            return [c for c in order[pos:] if j in g.nodes[c].inputs]

        for pos, k in enumerate(ks):
            live: dict[int, Clause] = {}
            for j in range(r):
                if j == k or j in g.nodes[k].inputs:
                    continue
                later = readers_from(j, pos + 1)
                kept = bool(val(md.p.get((j, r), 0)))
                if j in ks and ks.index(j) < pos and (later or kept):
                    why = lit("wr", j, r, False) + (lit("p", j, r, False) if kept else lit("wr", later[0], r, False))
                elif j not in ks and val(md.p.get((j, r - 1), 0)) and (later or kept):
                    why = lit("p", j, r - 1, False) + lit("wr", j, r, True) + lit("wp", j, r, True) + \
                        (lit("p", j, r, False) if kept else lit("wr", later[0], r, False) if later[0] != r else [])
                else:
                    continue
                live[j] = why
            fixed = size[k] + work[k] + sum(size[j] for j in set(g.nodes[k].inputs))
            if fixed + sum(size[j] for j in live) <= budget:
                continue
            clause = lit("wr", k, r, False)
            total = fixed
            for j in sorted(live, key=lambda j: -size[j]):
                clause += live[j]
                total += size[j]
                if total > budget:
                    break
            clauses.append(clause)
            break        # the stage's first peak over the budget
    return clauses


def add_clauses(md: Any, clauses: list[Clause]) -> None:
    for clause in clauses:
        lits = []
        for kind, j, t, positive in clause:
            x = (md.p if kind == "p" else md.wr if kind == "wr" else md.wp)[(j, t)]
            lits.append(x if positive else x.Not())
        md.m.add_bool_or(lits)


def lazy_clauses(problem: Problem, effort: float, wall_s: float, rounds: int) -> None:
    """Presence with :func:`cover_clauses` added by rounds until no stage of the solution
    goes over the budget (node order), or ``rounds`` or ``effort`` run out."""
    cuts: list[Clause] = []
    used = 0.0
    for k in range(rounds):
        md = presence._build(problem)
        add_clauses(md, cuts)
        t0 = time.perf_counter()
        res = _solve_here(md.m, NativeLimits(time_limit_s=wall_s, deterministic_s=max(0.1, effort - used), core=True))
        used += res.deterministic_s or 0.0
        row: dict[str, Any] = {"round": k, "clauses": len(cuts), "status": res.status,
                               "det_s": round(res.deterministic_s or 0.0, 2), "det_total": round(used, 2),
                               "wall_s": round(time.perf_counter() - t0, 1),
                               "bound_j": _joules(problem, md, res.bound)}
        if res.status != "optimal":
            print(json.dumps(row), flush=True)
            return
        new = cover_clauses(problem, md, res)
        row["over_stages"] = len(new)
        print(json.dumps(row), flush=True)
        if not new or used >= effort:
            return
        cuts += new


def lazy_rows(problem: Problem, effort: float, wall_s: float, rounds: int,
              peaks_only: bool = False) -> list[dict[str, Any]]:
    """Presence with the fast model's stage rows added by rounds (module docstring); with
    ``peaks_only``, a stage's rows only at the recomputes where a replay peaked."""
    stages: set[int] = set()
    at: set[tuple[int, int]] = set()
    out = []
    used = 0.0
    for k in range(rounds):
        md = presence._build(problem)
        rows = add_stage_rows(problem, md, stages, at if peaks_only else None)
        t0 = time.perf_counter()
        trail: list[float] = []
        res = _solve_here(md.m, NativeLimits(time_limit_s=wall_s, deterministic_s=max(0.1, effort - used), core=True),
                          on_bound=trail.append)
        used += res.deterministic_s or 0.0
        row: dict[str, Any] = {"round": k, "stages": len(stages), "rows": rows, "status": res.status,
                               "last_bound_j": _joules(problem, md, trail[-1] if trail else None),
                               "det_s": round(res.deterministic_s or 0.0, 2), "det_total": round(used, 2),
                               "wall_s": round(time.perf_counter() - t0, 1),
                               "bound_j": _joules(problem, md, res.bound)}
        if res.status != "optimal":
            out.append(row)
            print(json.dumps(row), flush=True)
            break
        over = stage_peaks(problem, md, res)
        row["over"] = {r: over[r] for r in sorted(over)}
        at |= {(r, pk) for r, (_, pk) in over.items()}
        out.append(row)
        print(json.dumps(row), flush=True)
        if not over or used >= effort:
            break
        stages |= set(over)
    return out


def _joules(problem: Problem, md: Any, units: float | None) -> float | None:
    """A bound of the presence model's objective (scaled integer units) in joules."""
    return None if units is None else problem.costs.compute_only_j + math.floor(units + 1e-6) / md.e_scale


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cell")
    ap.add_argument("cuts", choices=["rows", "peaks", "clauses"])
    ap.add_argument("--dir", type=Path, default=ROOT / "ref")
    ap.add_argument("--effort", type=float, default=120.0, help="deterministic seconds over all rounds")
    ap.add_argument("--wall", type=float, default=7200.0, help="wall cap of each round")
    ap.add_argument("--rounds", type=int, default=50)
    args = ap.parse_args()
    problem = pickle.loads((args.dir / args.cell / "problem.pkl").read_bytes())
    if args.cuts == "clauses":
        lazy_clauses(problem, args.effort, args.wall, args.rounds)
    else:
        lazy_rows(problem, args.effort, args.wall, args.rounds, peaks_only=args.cuts == "peaks")


if __name__ == "__main__":
    main()
