"""Judging a result against its bounds: the gap, "optimal", and the union of families
(pure functions on :class:`~poet_compiler.solve.result.Result`, used by :mod:`.milp`)."""

from __future__ import annotations

import time

from poet_compiler.solve.result import Result

# A gap this small is closed: CP-SAT solves integer-scaled costs (2^-32 of the total per
# coefficient) and the reported bound subtracts that rounding, so a proven optimum shows
# a relative gap of ~1e-8 against the simulator's energy.
OPTIMALITY_TOL = 1e-6

# Relative float noise between a proven optimum's bound and its simulated energy.
BOUND_NOISE = 1e-7


def better(a: Result | None, b: Result) -> Result:
    """The one with less energy: ``b`` when it is cheaper or ``a`` is None, else ``a``."""
    if a is None or (b.energy_j is not None and a.energy_j is not None and b.energy_j < a.energy_j):
        return b
    return a


def apply_bound(res: Result, bound: float | None) -> None:
    """Judge ``res`` against the full-budget bound: every schedule the user could get
    (arena included) costs at least that much. ``optimal`` only for a closed gap."""
    if res.energy_j is None:
        return
    if bound is None:
        res.lower_bound_j, res.gap = None, None
        if res.status == "optimal" and res.extra.fragmentation_retries:
            res.status = "feasible"
        return
    if bound > res.energy_j * (1 + BOUND_NOISE) + 1e-300:
        # A lower bound above what the schedule really costs means the model and the
        # device disagree: a defect to report, never to clamp away into "optimal".
        res.lower_bound_j, res.gap = bound, None
        res.status = "feasible"
        note = (f"defect: the lower bound {bound:.6g} J exceeds the simulated energy {res.energy_j:.6g} J; "
                "no optimality is claimed (please report this with the input)")
        res.message = f"{res.message}; {note}" if res.message else note
        return
    bound = min(bound, res.energy_j)     # a proven optimum's bound can exceed it by float noise
    res.lower_bound_j = bound
    res.gap = max(0.0, (res.energy_j - bound) / res.energy_j) if res.energy_j > 0 else 0.0
    if res.gap <= OPTIMALITY_TOL:
        res.gap = 0.0
        res.status = "optimal"
    elif res.status == "optimal":
        res.status = "feasible"


GAP_CLAIM = "stopped within the relative gap limit"


def keep_gap_claim_true(res: Result, gap_limit: float) -> None:
    """Drop a "stopped within the relative gap limit" clause from ``res.message`` when the
    final gap is above ``gap_limit``: the claim was made against a stage's own figures,
    and finalizing (an arena's copies) or a re-solve at a lower budget (whose bound does
    not hold for the user's) can move the answer past it. Say so instead."""
    if res.gap is None or res.gap <= gap_limit * (1 + 1e-9) + 1e-12 or GAP_CLAIM not in res.message:
        return
    clauses = [c for c in res.message.split("; ") if not c.startswith(GAP_CLAIM)]
    note = (f"{res.gap:.3%} above the bound, over the gap limit {gap_limit:g}: a stage reached the limit "
            "against its own figures, and the arena's copies or a re-solve at a lower budget cost the rest")
    res.message = "; ".join([note, *clauses])


def union(stage: Result, sync: Result, started: float) -> Result:
    """The better of two program families' results, judged by the union's bound: the
    smallest bound of the families that may hold a schedule (a family proven empty
    contributes none; one with no bound leaves the union without one)."""
    families = (stage, sync)
    empty = [r.status == "infeasible" and bool(r.extra.proven_infeasible) for r in families]
    solved = [r for r in families if r.ok and r.energy_j is not None]
    if not solved:
        out = stage if empty[0] or not empty[1] else sync
        if not all(empty):
            out.extra.unset("proven_infeasible")   # only one family is proven empty
    else:
        out = min(solved, key=lambda r: r.energy_j or 0.0)
        bounds = [r.lower_bound_j for r, e in zip(families, empty) if not e]
        union_bound = None if any(b is None for b in bounds) else min(b for b in bounds if b is not None)
        out.status = "feasible"
        apply_bound(out, union_bound)
    out.extra.transfers = "stage" if out is stage else "sync"
    out.extra.family_energy_j = {"stage": stage.energy_j, "sync": sync.energy_j}
    out.solve_time_s = time.perf_counter() - started
    return out


def count_rescues(res: Result, arena_failures: int) -> None:
    """``arena_rescue`` of the answer: did compaction keep its schedule (``compacted``:
    its arena laid out with MOVEs, or re-placed online without any), a re-solve against
    the arena (``resolved``), and how many schedules whose live bytes fit were given up
    for their arena (``lost``)."""
    compacted = int(bool(res.program is not None and res.program.meta.get("arena_order") == "compacted"))
    resolved = int(bool(res.extra.fragmentation_retries) and res.extra.fallback_schedule is None)
    lost = max(0, arena_failures - resolved) + (res.extra.arena_rescue or {}).get("lost", 0)
    if compacted or resolved or lost:
        res.extra.arena_rescue = {"resolved": resolved, "lost": lost}
        if compacted:
            res.extra.arena_rescue["compacted"] = compacted
