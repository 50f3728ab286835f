"""Infeasibility analysis: the smallest RAM at the problem's deadline, the smallest
deadline at its RAM, and a one-line reason.

Each minimum has a lower bound from the cover (:mod:`.cover`; for the RAM also a node's
working set, ``m_k + w_k +`` its inputs, in RAM at its compute point in any schedule) and
an upper one from quick schedules; when they differ, the fast formulation minimizes the
budget itself (objective "ram" or "time"). When the effort runs out first the result is a
range ``[lower, upper]`` and messages say "at least".
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from poet_compiler import work
from poet_compiler.errors import InfeasibleError
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.baselines.keep_all import checkpoint_all_schedule
from poet_compiler.solve.clock import step_until
from poet_compiler.solve.cover import CoverBound, cover_bound, cover_min_budget, cover_min_time
from poet_compiler.solve.formulation.common import BuildDeadline, Built
from poet_compiler.solve.formulation.fast import build_fast
from poet_compiler.solve.guided import cover_schedule, realize_within
from poet_compiler.solve.problem import Problem, simulate_schedule
from poet_compiler.solve.result import NO_NOTES, Notes
from poet_compiler.solve.tuning import TUNING, Tuning
from poet_compiler.solve.warm_start import warm_start_candidates
from poet_compiler.solvers import BackendOptions, solve_model
from poet_compiler.units import format_bytes

_DEADLINE_TOL = 1e-9


@dataclass(frozen=True)
class Requirement:
    """A minimum as a range: ``lower`` proven, ``upper`` achieved by a schedule (None: none found)."""

    lower: float
    upper: float | None

    @property
    def exact(self) -> bool:
        return self.upper is not None and self.upper <= self.lower * (1 + 1e-9) + 1e-12


@dataclass(frozen=True)
class Explanation:
    """Why no schedule exists, and the report's notes of it (the smallest RAM and deadline)."""

    message: str
    notes: Notes = field(default_factory=Notes)


def working_set(problem: Problem) -> tuple[int, int]:
    """``(bytes, node)``: the largest ``output + workspace + inputs`` of any node (the first of ties)."""
    g = problem.graph
    need, k = max(((node.output_bytes + node.workspace_bytes + sum(g.nodes[i].output_bytes for i in set(node.inputs)),
                    -node.id) for node in g.nodes), default=(0, 0))
    return need, -k


def _fixed(problem: Problem) -> int:
    return problem.fixed.total


def _deadline_too_short(problem: Problem) -> bool:
    return problem.deadline_s is not None and problem.deadline_s < problem.costs.compute_only_s * (1 - _DEADLINE_TOL)


def _left(until: float) -> float:
    """The effort left before the ``work.now()`` instant ``until``: a CP-SAT limit that ends by it."""
    return max(0.0, until - work.now())


def _build_within(problem: Problem, objective: str, until: float, tuning: Tuning, *, hint: Schedule | None,
                  floor: float) -> Built | None:
    """The fast formulation minimizing ``objective`` from ``hint`` with ``floor``, or None
    when no effort is left to solve it by ``until`` (the build stops there too)."""
    if _left(until) <= tuning.min_stage_s:
        return None
    try:
        with step_until(until):
            built = build_fast(problem, objective=objective, hint=hint, floor=floor)
    except BuildDeadline:
        return None
    return built if _left(until) > tuning.min_stage_s else None


def _quick_ram_upper(problem: Problem, lower: int, until: float, tuning: Tuning) -> tuple[int, Schedule] | None:
    """The smallest live peak (activation bytes) among quick schedules that meet the
    deadline: checkpoint-all, and the cover's schedule at budget ``lower`` (its cover
    solves end by ``until``)."""
    at_lower = dataclasses.replace(problem, ram_budget_bytes=lower + _fixed(problem))
    cap = min(tuning.quick_search_s, _left(until))
    candidates: list[Schedule | None] = [checkpoint_all_schedule(problem)]
    cover = cover_bound(at_lower, time_limit_s=cap, tuning=tuning) if cap > 0 else None
    if cover is not None and cover.energy_j is not None:
        candidates.append(cover_schedule(at_lower, cover, time_limit_s=tuning.quick_search_s, until=until))
    sims = [(simulate_schedule(problem, s), s) for s in candidates if s is not None]
    found = [(sim.peak_bytes, s) for sim, s in sims
             if problem.deadline_s is None or sim.runtime_s <= problem.deadline_s * (1 + _DEADLINE_TOL)]
    return min(found, key=lambda f: f[0], default=None)


def ram_requirement(problem: Problem, *, time_limit_s: float = 30.0, threads: int = 2,
                    tuning: Tuning = TUNING) -> Requirement:
    """Smallest RAM budget (``ram_budget_bytes`` units, fixed bytes included when counted)
    for which a schedule exists at the problem's deadline and mode, searched within
    ``time_limit_s``: proven when a quick schedule reaches the cover's bound (well under a
    second), else the fast formulation minimizes the budget down to that bound."""
    until = work.now() + time_limit_s
    if _deadline_too_short(problem):
        raise InfeasibleError(
            f"deadline {problem.deadline_s:.6g} s is below the compute-only minimum "
            f"{problem.costs.compute_only_s:.6g} s: no RAM budget helps")
    fixed = _fixed(problem)
    floor = max(working_set(problem)[0], cover_min_budget(problem, time_limit_s=tuning.cover_limit(time_limit_s)) or 0)
    quick = _quick_ram_upper(problem, floor, until, tuning)
    at_floor = Requirement(lower=float(floor + fixed), upper=None if quick is None else float(quick[0] + fixed))
    if quick is not None and quick[0] <= floor:
        return at_floor
    built = _build_within(problem, "ram", until, tuning, floor=float(floor),
                          hint=quick[1] if quick is not None else Schedule.checkpoint_all(problem.n))
    if built is None:
        return at_floor
    out = solve_model(built.model, "cpsat", BackendOptions(time_limit_s=_left(until), threads=threads))
    if out.values is None:
        return at_floor
    # The minimum is what the schedule really needs (simulated), not the solver's figure.
    upper = simulate_schedule(problem, built.schedule(out.values)).peak_bytes
    if quick is not None:
        upper = min(upper, quick[0])
    lower = upper if out.status == "optimal" else max(floor, math.ceil((out.bound or 0) - 1e-6))
    return Requirement(lower=float(min(lower, upper) + fixed), upper=float(upper + fixed))


def _quick_fastest(free: Problem, choice: CoverBound, time_limit_s: float,
                   until: float) -> tuple[float, Schedule] | None:
    """``(runtime, schedule)`` realized from the cover's fastest choice (its budget lowered
    on overshoot, as for the energy cover), or None; no new cover solve after ``until``."""
    def resolve(budget: int) -> CoverBound | None:
        found = cover_min_time(free, budget=budget, time_limit_s=min(time_limit_s, _left(until)))
        return None if found is None else found[1]

    found = realize_within(free, choice, resolve, until=until)
    return None if found is None else (found[0].runtime_s, found[1])


def deadline_requirement(problem: Problem, *, time_limit_s: float = 30.0, threads: int = 2,
                         model: bool = True, tuning: Tuning = TUNING) -> Requirement | None:
    """Smallest step time of any schedule within the problem's RAM budget (None: no
    schedule fits it), searched within ``time_limit_s``; ``upper`` is the simulated
    runtime of the fastest schedule found. As for the RAM: the cover's fastest choice,
    realized, is often at its bound; else (with ``model``) the fast formulation minimizes
    the step time from the fastest schedule known."""
    until = work.now() + time_limit_s
    free = dataclasses.replace(problem, deadline_s=None)
    limit = tuning.cover_limit(time_limit_s)
    quick = cover_min_time(free, time_limit_s=limit)
    if quick is None:
        return None
    lower = max(problem.costs.compute_only_s, quick[0])
    fastest = _quick_fastest(free, quick[1], limit, until)

    def so_far() -> Requirement:
        return Requirement(lower=lower if fastest is None else min(lower, fastest[0]),
                           upper=None if fastest is None else fastest[0])

    if (fastest is not None and fastest[0] <= lower * (1 + 1e-9) + 1e-12) or not model \
            or _left(until) <= tuning.min_stage_s:
        return so_far()
    # The heuristics' schedules within the RAM: the fastest is an upper bound and a hint.
    for _, _, schedule in warm_start_candidates(free, until=until):
        runtime = simulate_schedule(free, schedule).runtime_s
        if fastest is None or runtime < fastest[0]:
            fastest = (runtime, schedule)
    built = _build_within(free, "time", until, tuning, hint=None if fastest is None else fastest[1], floor=lower)
    if built is None:
        return so_far()
    out = solve_model(built.model, "cpsat", BackendOptions(time_limit_s=_left(until), threads=threads))
    if out.status == "infeasible":
        return None
    lower = max(lower, out.bound or 0.0)
    if out.values is not None:
        sched = built.schedule(out.values)
        runtime = simulate_schedule(problem, sched).runtime_s
        if fastest is None or runtime < fastest[0]:
            fastest = (runtime, sched)
        if out.status == "optimal":
            lower = min(lower, runtime)
    return so_far()


def what_fits(problem: Problem, *, timed_out: bool = False) -> tuple[str, int] | None:
    """For a solve that found no schedule: ``(clause, lower)``, the RAM range the user can
    act on, or None when a schedule fits the budget's live bytes (an arena problem).
    ``lower``: one node's working set, below which nothing fits; the clause adds the
    checkpoint-all peak, a schedule at the compute-only time (so within any deadline the
    quick checks let through). ``timed_out``: the wall cap, not the effort, ended the solve."""
    fixed = _fixed(problem)
    upper = simulate_schedule(problem, checkpoint_all_schedule(problem)).peak_bytes + fixed
    if upper <= problem.ram_budget_bytes:
        return None
    lower = working_set(problem)[0] + fixed
    return (f"checkpoint-all fits at {format_bytes(upper)}, nothing below "
            f"{format_bytes(lower)} (one node's working set): raise the RAM or the "
            f"{'time limit' if timed_out else 'effort'}", lower)


def _node_clause(problem: Problem) -> str:
    need, k = working_set(problem)
    g = problem.graph
    node = g.nodes[k]
    ins = sum(g.nodes[i].output_bytes for i in set(node.inputs))
    parts = [f"inputs {format_bytes(ins)}", f"output {format_bytes(node.output_bytes)}"]
    if node.workspace_bytes:
        parts.append(f"workspace {format_bytes(node.workspace_bytes)}")
    return f"largest single node: {node.name!r} alone needs {format_bytes(need)}: {' + '.join(parts)}"


def _deadline_clause(dl: Requirement | None, at: str) -> str:
    """``at`` the smallest deadline when proven, else the range the search left ("": none found)."""
    if dl is None or dl.upper is None:
        return ""
    if dl.exact:
        return f"{at} the smallest deadline is {dl.upper:.6g} s"
    return f"{at} a deadline of {dl.upper:.6g} s works (the smallest is at least {dl.lower:.6g} s)"


def explain_infeasible(problem: Problem, *, time_limit_s: float = 30.0, threads: int = 2,
                       tuning: Tuning = TUNING) -> Explanation:
    """Why no schedule exists, with the smallest RAM and/or deadline that would work.

    The RAM at the deadline comes first (the cover usually proves it in a second). When
    the RAM is the reason, the smallest deadline at this RAM is a side note and gets at
    most ``Tuning.quick_search_s`` of search."""
    half = max(0.0, time_limit_s / 2)
    at = "no deadline" if problem.deadline_s is None else f"deadline {problem.deadline_s:.6g} s"
    # Below the working set no deadline helps: skip that search.
    ws_limited = problem.activation_budget < working_set(problem)[0]

    def deadline(limit_s: float, model: bool = True) -> Requirement | None:
        return None if ws_limited else deadline_requirement(problem, time_limit_s=limit_s, threads=threads,
                                                            model=model, tuning=tuning)

    def noted(dl: Requirement | None, notes: Notes = NO_NOTES) -> Notes:
        """``notes`` with the smallest deadline's, when one was searched and found."""
        return notes if dl is None else notes.set(min_deadline_s=dl.upper if dl.exact else None,
                                                  min_deadline_lower_s=dl.lower)

    if _deadline_too_short(problem):
        dl = deadline(half)
        return Explanation(f"infeasible: deadline {problem.deadline_s:.6g} s < compute-only minimum "
                           f"{problem.costs.compute_only_s:.6g} s (every node must run once)"
                           + _deadline_clause(dl, f"; at RAM {format_bytes(problem.ram_budget_bytes)}"), noted(dl))
    if ws_limited and not tuning.small(problem.n):
        # Refused at once: one node's working set proves it; the message says "at least"
        # (the exact minimum, a solve, is left to a sweep).
        req = Requirement(lower=float(working_set(problem)[0] + _fixed(problem)), upper=None)
    else:
        req = ram_requirement(problem, time_limit_s=time_limit_s if ws_limited else half, threads=threads,
                              tuning=tuning)
    notes = Notes(min_ram_bytes=int(req.lower) if req.exact else None, min_ram_lower_bytes=int(req.lower))
    ram = format_bytes(req.lower) if req.exact else f"at least {format_bytes(req.lower)}"
    if problem.activation_budget < 0:
        # Below the fixed bytes alone: the split is the answer (bad input, one line).
        return Explanation(f"infeasible: RAM {format_bytes(problem.ram_budget_bytes)} is below the "
                           f"{format_bytes(problem.fixed.total)} the step keeps beside its arena "
                           f"({problem.fixed.describe()}); the smallest RAM that can work is {ram} at {at} in mode "
                           f"{problem.mode} ({_node_clause(problem)})", notes)
    if req.lower > problem.ram_budget_bytes:
        # The cover's range only: on VGG16-CIFAR m4 70 % 1.0x the model's solve took 25 s
        # of wall for 5 units and gave the range the cover had given.
        dl = deadline(min(half, tuning.quick_search_s), model=False) if problem.deadline_s is not None else None
        beside = f"beside the arena: {problem.fixed.describe()}; " if problem.fixed.total else ""
        return Explanation(f"infeasible: RAM {format_bytes(problem.ram_budget_bytes)} < {ram} needed at {at} "
                           f"in mode {problem.mode} ({beside}{_node_clause(problem)})"
                           + _deadline_clause(dl, "; at this RAM"), noted(dl, notes))
    dl = deadline(half)
    if dl is not None and dl.upper is not None:
        need = f"{dl.upper:.6g} s" if dl.exact else f"at least {dl.lower:.6g} s"
        return Explanation(
            f"infeasible: deadline {problem.deadline_s:.6g} s < {need} needed at RAM "
            f"{format_bytes(problem.ram_budget_bytes)} in mode {problem.mode} (the smallest RAM for this deadline is "
            f"{ram})", noted(dl, notes))
    return Explanation(f"infeasible at RAM {format_bytes(problem.ram_budget_bytes)} and {at} "
                       f"(minimum RAM {ram})", noted(dl, notes))


def quick_infeasibility(problem: Problem, *, time_limit_s: float = 30.0, threads: int = 2,
                        tuning: Tuning = TUNING) -> Explanation | None:
    """An explanation without the full solve when the budgets are obviously impossible."""
    if _deadline_too_short(problem) or problem.activation_budget < working_set(problem)[0]:
        return explain_infeasible(problem, time_limit_s=time_limit_s, threads=threads, tuning=tuning)
    return None
