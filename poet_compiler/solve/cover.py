"""The eviction-cover bound: a small combinatorial lower bound on the optimal energy
(docs/optimizer.md, "The eviction cover").

At the first compute point of node ``t`` (docs/model.md, Memory), a tensor ``i < t`` whose
next consumer is ``c > t`` and that is out of RAM must be *restored* in a stage of
``(t, c]``: recomputed, or paged in (after a page-out of ``i`` somewhere). Restores before
different consumers are distinct events, so their costs add up. With a 0/1 choice per
(tensor, next consumer) *gap* and mechanism::

    minimize   sum cost(mechanism, i) * x[i, c, mechanism] + sum page_out_cost(i) * y[i]
    subject to for every node t:  need(t) - sum_{gaps (i, c) around t} size_i * x[i, c, .] <= budget
               x[i, c, page] <= y[i]
               recompute time (+ paging time without DMA) <= deadline - compute-only time

where ``need(t)`` is the checkpoint-all live set at ``t``. Every schedule maps to a choice
of no larger cost, so the optimum plus the compute-once energy is a lower bound and an
infeasible cover proves infeasibility; costs and times are rounded down to stay valid. It
ignores what a restore needs (a recompute's inputs), where the optimum can cost more.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple  # Any: CP-SAT objects (the model is built on solvers/native.py)

from poet_compiler import work
from poet_compiler.solve.exposure import IMPOSSIBLE, StageExposure, applies
from poet_compiler.solve.problem import Problem
from poet_compiler.solve.tuning import TUNING, Tuning
from poet_compiler.solvers.native import NativeLimits, NativeResult, new_model, solve_native

RECOMPUTE, PAGE = "recompute", "page"
_SCALE = 1e7          # integer units per largest cost: rounding loses < 1e-7 of it per choice
_DEADLINE_TOL = 1e-9  # the formulations' deadline row has the same relative slack


@dataclass(frozen=True)
class Restore:
    """The cover's choice for one gap: ``node`` is out of RAM from its previous use until
    ``next_use`` and comes back by ``how``."""

    node: int
    next_use: int
    how: str


@dataclass(frozen=True)
class StagedChoice:
    """Restores in the stages they happen in (the presence model's solution): ``(stage,
    node)`` recomputes and paged nodes; a guide for the guided sub-problem, not a schedule."""

    recompute: frozenset[tuple[int, int]] = frozenset()
    paging: frozenset[int] = frozenset()


@dataclass(frozen=True)
class CoverBound:
    """``energy_j``: a lower bound on every schedule's energy (None if infeasible);
    ``closed``: solved to optimality (else the solver's bound, still valid). ``restores``:
    the best choice (a guide, not a schedule); ``build_s``: the seconds its model took to
    build, what another cover of the graph can expect. ``other_restores``: the other
    model's choice when both were solved, where the guided search widens; ``staged``: the
    presence model's choice (set by the bounds stage, :mod:`.pipeline.bounds`)."""

    energy_j: float | None
    infeasible: bool
    closed: bool
    restores: tuple[Restore, ...] = ()
    build_s: float = 0.0
    other_restores: tuple[Restore, ...] = ()
    staged: StagedChoice = StagedChoice()


def _forbid_conflicts(problem: Problem, gaps: list[_Gap], m: Any) -> None:
    """A recompute in stage ``c`` reads its closure's inputs there: none of them may be out
    of RAM across ``c`` (``closure`` only: a bound must allow it, a schedule may pay both)."""
    g = problem.graph
    by_node: dict[int, list[_Gap]] = {}
    for gap in gaps:
        by_node.setdefault(gap.node, []).append(gap)
    for gap in gaps:
        x = gap.options.get(RECOMPUTE)
        if x is None:
            continue
        inputs = {j for k in recompute_closure(problem, gap.node, gap.next_use) for j in g.nodes[k].inputs}
        for j in sorted(inputs):
            for other in by_node.get(j, ()):
                if gap.next_use in other.points:
                    m.add(x + sum(other.options.values()) <= 1)


def _dead_paths(problem: Problem, node: int, first: int, depth: int = 1) -> list[tuple[int, ...]]:
    """Every chain ``(j1, ..., jk)``, ``k <= depth``, of dead inputs at ``first``
    (:func:`_dead_before`): recomputing ``node`` needs ``j1``, recomputing ``j1`` needs ``j2``."""
    out: list[tuple[int, ...]] = []
    stack: list[tuple[int, ...]] = [(j,) for j in reversed(_dead_before(problem, node, first))]
    while stack:
        path = stack.pop()
        out.append(path)
        if len(path) < depth:
            # Inputs come earlier in the node order (graph/validate.py): no chain repeats a node.
            stack.extend(path + (j,) for j in reversed(_dead_before(problem, path[-1], first)))
    return out


def _dead_before(problem: Problem, node: int, first: int) -> list[int]:
    """The inputs of ``node`` (not pinned) that nobody reads at or after point ``first``."""
    g = problem.graph
    return sorted({j for j in g.nodes[node].inputs if not g.nodes[j].pinned and max(g.consumers[j]) < first})


def recompute_j(problem: Problem, k: int) -> float:
    """Energy of one compute of ``k``: the formulations' objective coefficient of ``R``."""
    c = problem.costs
    return c.compute_j[k] + c.static_w * c.compute_s[k]


def transfer_j(problem: Problem, k: int, direction: str) -> float:
    """Energy of one page-in / page-out of ``k`` in the formulations' objective (static
    power only where transfers do not overlap compute)."""
    c = problem.costs
    j, s = (c.page_in_j[k], c.page_in_s[k]) if direction == "in" else (c.page_out_j[k], c.page_out_s[k])
    return j + (0.0 if problem.overlaps else c.static_w * s)


class _PostLife(NamedTuple):
    """Literals: tensor j is recomputed / paged in after its last use (both may hold)."""

    recomputed: Any
    paged: Any


def _post_life_event(problem: Problem, j: int, m: Any, cost: list, e_scale: float,
                     page_out: Callable[[int], Any]) -> _PostLife:
    """The restores of tensor j after its last use, each charged its least cost: a
    recompute (its inputs not charged: still a bound), or a page-in, which implies ``j``'s
    one page-out literal ``page_out(j)``. Charging the page-in alone undercharged it: on
    ResNet-18-CIFAR a72 a batch norm's output costs 0.0239 J to recompute and 0.0138 +
    0.0257 J to page in and out, and the bound took the 0.0138 J."""
    recomputed: Any = 0
    paged: Any = 0
    if problem.allows_remat:
        recomputed = m.new_bool_var(f"er[{j}]")
        cost.append((recomputed, math.floor(recompute_j(problem, j) * e_scale)))
    if problem.allows_paging:
        paged = m.new_bool_var(f"ep[{j}]")
        cost.append((paged, math.floor(transfer_j(problem, j, "in") * e_scale)))
        m.add_implication(paged, page_out(j))
    return _PostLife(recomputed, paged)


@dataclass(eq=False)
class _Gap:
    node: int
    next_use: int
    points: range
    options: dict[str, Any]      # mechanism -> CP-SAT literal


def recompute_closure(problem: Problem, node: int, stage: int) -> list[int]:
    """``node`` and the ancestors a recompute of it in ``stage`` recomputes too, when only
    the tensors read at or after ``stage`` are in RAM."""
    g = problem.graph
    out, stack, seen = [], [node], {node}
    while stack:
        k = stack.pop()
        out.append(k)
        for j in g.nodes[k].inputs:
            if j not in seen and not g.nodes[j].pinned and not any(c >= stage for c in g.consumers[j]):
                seen.add(j)
                stack.append(j)
    return sorted(out)


@dataclass
class _Cover:
    """The cover model before its budget rows and objective; ``around``: per point, the
    bytes each choice takes off ``need``."""

    m: Any
    need: list[int]
    around: dict[int, list[tuple[Any, int]]]
    gaps: list[_Gap]
    cost: list[tuple[Any, int]]
    time_terms: list[tuple[Any, int]]
    slack: float | None
    e_scale: float
    t_scale: float


def _build(problem: Problem, *, closure: bool, deadline: bool = True, absences: bool = True,
           depth: int = 1, exposure: bool = False) -> _Cover:
    """The choices of :func:`cover_bound`; ``deadline=False``: not filtered by the deadline
    (the minimum-time bound); ``absences=False``: the light model; ``exposure``: with the
    paging time that outlasts its stage (:mod:`.exposure`)."""
    g, c, n = problem.graph, problem.costs, problem.n
    size = [node.output_bytes for node in g.nodes]
    need = [size[t] + g.nodes[t].workspace_bytes for t in range(n)]
    slack = restore_slack(problem) if deadline else None
    e_scale, t_scale = cost_scales(problem, _SCALE)
    m = new_model()
    cost: list[tuple[Any, int]] = []
    time_terms: list[tuple[Any, int]] = []
    page_out: dict[int, Any] = {}
    gaps: list[_Gap] = []
    busy: list[tuple[Any, float]] = []     # recompute literals, with their seconds

    def page_out_of(i: int) -> Any:
        """Tensor i's one page-out literal (every page-in of i reads what it wrote)."""
        if i not in page_out:
            y = page_out[i] = m.new_bool_var(f"o[{i}]")
            cost.append((y, math.floor(transfer_j(problem, i, "out") * e_scale)))
            if not problem.overlaps:
                time_terms.append((y, math.floor(c.page_out_s[i] * t_scale)))
        return page_out[i]

    for i in range(n):
        pinned = g.nodes[i].pinned
        prev = i
        for nxt in sorted(set(g.consumers[i])):
            need[nxt] += size[i]           # an input of nxt: in RAM at its compute point
            gap = _Gap(i, nxt, range(prev + 1, nxt), {})
            prev = nxt
            for t in gap.points:
                need[t] += size[i]
            if not gap.points or pinned:
                continue
            ks = recompute_closure(problem, i, nxt) if closure else [i]
            r_s = sum(c.compute_s[k] for k in ks)
            # A reader of a parameter may not be recomputed after its update (docs/training.md),
            # but a recompute before it and kept till nxt is legal: the option stays, as the
            # relaxation of both (a bound; realize() meets the rule or is dropped).
            if problem.allows_remat and (slack is None or r_s <= slack):
                x = m.new_bool_var(f"r[{i},{nxt}]")
                cost.append((x, math.floor(sum(recompute_j(problem, k) for k in ks) * e_scale)))
                time_terms.append((x, math.floor(r_s * t_scale)))
                busy.append((x, r_s))
                gap.options[RECOMPUTE] = x
            pair_s = c.page_in_s[i] + c.page_out_s[i]
            if problem.allows_paging and (slack is None or problem.overlaps or pair_s <= slack):
                x = m.new_bool_var(f"p[{i},{nxt}]")
                cost.append((x, math.floor(transfer_j(problem, i, "in") * e_scale)))
                if not problem.overlaps:
                    time_terms.append((x, math.floor(c.page_in_s[i] * t_scale)))
                m.add_implication(x, page_out_of(i))
                gap.options[PAGE] = x
            if gap.options:
                if len(gap.options) > 1:
                    m.add_at_most_one(list(gap.options.values()))  # one restore covers the gap
                gaps.append(gap)
    if closure:
        _forbid_conflicts(problem, gaps, m)
    around: dict[int, list[tuple[Any, int]]] = {t: [] for t in range(n)}
    # Per gap with a recompute option: the chains of dead inputs a recompute in it may need.
    dead = {} if closure or not absences else {
        gap: paths for gap in gaps
        if RECOMPUTE in gap.options and (paths := _dead_paths(problem, gap.node, gap.points.start, depth))}
    post_life: dict[int, _PostLife] = {}
    kept: dict[tuple[int, int], Any] = {}

    def kept_at(j: int, t: int) -> Any:
        """The literal "dead tensor j is in RAM at point t", whose bytes count there."""
        if (j, t) not in kept:
            kept[(j, t)] = m.new_bool_var(f"k[{j},{t}]")
            around[t].append((kept[(j, t)], -size[j]))
        return kept[(j, t)]

    ex = StageExposure(problem, m, page_out_of) if exposure and applies(problem) else None
    for gap in gaps:
        paged = {} if ex is None or PAGE not in gap.options else _page_requirements(ex, gap)
        if gap not in dead:
            if not paged:
                for t in gap.points:
                    around[t].extend((x, size[gap.node]) for x in gap.options.values())
                continue
            for points, req in _cells(gap.points, paged):
                a = m.new_bool_var(f"a[{gap.node},{points.start}]")
                m.add(a <= sum(gap.options.values()))
                _require(m, a, gap, req)
                for t in points:
                    around[t].append((a, size[gap.node]))
            continue
        # Absence per point: the node, out at t and recomputed after it, needs each dead
        # input j1 then: kept through t or brought back after its last use. A j1 not in
        # RAM at t and never paged in is recomputed after t, and needs its own dead input
        # j2 then: the same rule one level down, along every chain of _dead_paths.
        opts = list(gap.options.values())
        for t in gap.points:
            a = m.new_bool_var(f"a[{gap.node},{t}]")
            m.add(a <= sum(opts))
            if paged:
                _require(m, a, gap, paged[t])
            around[t].append((a, size[gap.node]))
            for path in dead[gap]:
                for j in path:
                    if j not in post_life:
                        post_life[j] = _post_life_event(problem, j, m, cost, e_scale, page_out_of)
                        if problem.allows_remat:   # a recompute literal, charged static time
                            busy.append((post_life[j].recomputed, c.compute_s[j]))
                excused = sum(kept_at(j, t) + post_life[j].paged for j in path[:-1])
                last = path[-1]
                restored = post_life[last].recomputed + post_life[last].paged
                m.add(kept_at(last, t) >= a - gap.options.get(PAGE, 0) - excused - restored)
    if ex is not None:
        ex.add_static_cost(cost, busy, e_scale)
        # The summed excess fits the deadline's slack too: T >= T0 + max(R, E).
        add_deadline_row(m, [(lit, math.floor(s * t_scale)) for lit, s in ex.terms], slack, t_scale)
    return _Cover(m, need, around, gaps, cost, time_terms, slack, e_scale, t_scale)


def _page_requirements(ex: StageExposure, gap: _Gap) -> dict[int, tuple[Any, ...]]:
    """Per point of ``gap``: what its tensor out of RAM there by paging needs (the
    page-out before, the page-in after; IMPOSSIBLE where no stage-long transfer fits)."""
    ins = ex.in_requirements(gap.node, gap.next_use, gap.points, gap.options[PAGE])
    out: dict[int, tuple[Any, ...]] = {}
    for t in gap.points:
        req = tuple(r for r in (ex.out_requirement(gap.node, t), ins.get(t)) if r is not None)
        out[t] = (IMPOSSIBLE,) if any(r is IMPOSSIBLE for r in req) else req
    return out


def _cells(points: range, req: dict[int, tuple[Any, ...]]) -> Iterator[tuple[range, tuple[Any, ...]]]:
    """Runs of consecutive points with the same requirements (literals compared by identity)."""
    start = points.start
    for t in range(points.start + 1, points.stop + 1):
        if t == points.stop or [id(r) for r in req[t]] != [id(r) for r in req[start]]:
            yield range(start, t), req[start]
            start = t


def _require(m: Any, a: Any, gap: _Gap, req: tuple[Any, ...]) -> None:
    """``a`` (the gap's tensor out of RAM at a point) by recompute, or by paging with ``req``."""
    rec = gap.options.get(RECOMPUTE, 0)
    for r in req:
        m.add(a <= rec) if r is IMPOSSIBLE else m.add(a <= rec + r)


def cover_bound(problem: Problem, *, budget: int | None = None, time_limit_s: float | None = None,
                closure: bool = False, workers: int = 1, tuning: Tuning = TUNING) -> CoverBound:
    """The eviction-cover bound of ``problem`` at ``budget`` (default: its activation budget),
    within ``time_limit_s`` (default: ``tuning.cover_limit_s``).

    Two relaxations: the *light* model charges a recompute its own energy; the *refined*
    one also makes it keep (or bring back) the inputs nobody reads after the gap starts,
    with an absence literal per gap point (:func:`_dead_paths`). The refined one is the
    tighter when it closes (README demo: 0.03337 against 0.03216 J), but on big graphs
    CP-SAT stops it below the light optimum (gpt2_large: 2044.6 J after 11 s against
    2048.1 J in 3 s). So the light model gets at most half of the time, the refined one the
    rest when its forecast build (:func:`absence_literals`, at ``tuning.absence_literal_s``
    each) fits in half of that; the bound
    is the better, the restores the refined model's when it has some. The refined model
    runs on ``workers`` threads of CP-SAT's interleaved search (deterministic): its LNS
    workers closed it where one worker stayed at its first LP bound for 10 s
    (ResNet-18-CIFAR a72 50 % 2.0x: 43.924 J in 6.3 s against 43.716 J).

    ``closure=True`` charges a recompute with its whole :func:`recompute_closure`: closer
    to what a schedule pays, but ``energy_j`` is then **not** a bound (a schedule may keep
    those inputs); only its restores are used, to build a schedule (:mod:`.guided`)."""
    time_limit_s = tuning.cover_limit_s if time_limit_s is None else time_limit_s
    started = work.now()
    light = _solve_cover(problem, budget, time_limit_s / 2 if not closure else time_limit_s,
                         closure=closure, absences=False)
    left = time_limit_s - (work.now() - started)
    literals = 0 if closure or light.infeasible else absence_literals(problem)
    if not literals or tuning.absence_literal_s * literals > left / 2:
        return light
    refined = _solve_cover(problem, budget, left, closure=False, absences=True, workers=workers)
    build_s = light.build_s + refined.build_s
    if refined.infeasible:
        return dataclasses.replace(refined, build_s=build_s)
    best = refined if (refined.energy_j or 0.0) >= (light.energy_j or 0.0) else light
    restores = refined.restores if refined.restores or not light.restores else light.restores
    other = light.restores if restores is refined.restores else refined.restores
    return dataclasses.replace(best, restores=restores, build_s=build_s, other_restores=other)


def deeper_cover(problem: Problem, cover: CoverBound, *, time_limit_s: float, workers: int = 1,
                 exposure: bool = True, tuning: Tuning = TUNING) -> CoverBound:
    """``cover`` with the bound of the *deep* refined model when that is higher: chains of
    dead inputs ``tuning.dead_depth`` deep and, with ``exposure`` where transfers are
    stage-long, the paging time that outlasts its stage (:mod:`.exposure`). Its restores
    stay ``cover``'s (they guide the schedules better: ``Tuning.dead_depth``). ``cover``
    itself when the graph has neither, or the forecast build does not fit in half of
    ``time_limit_s``. A valid bound: every schedule (of the family searched) maps to a
    choice of it too."""
    depth = tuning.dead_depth
    literals = absence_literals(problem, depth)   # more than one level's: a chain
    exposure = exposure and applies(problem)
    if cover.energy_j is None or (not exposure and literals <= absence_literals(problem)) or \
            tuning.absence_literal_s * literals > time_limit_s / 2:
        return cover
    deep = _solve_cover(problem, None, time_limit_s, closure=False, absences=True, workers=workers,
                        depth=depth, exposure=exposure)
    if deep.energy_j is None or deep.energy_j <= cover.energy_j:
        return cover
    return dataclasses.replace(cover, energy_j=deep.energy_j, closed=deep.closed,
                               build_s=cover.build_s + deep.build_s)


def absence_literals(problem: Problem, depth: int = 1) -> int:
    """How many absence and keep literals the refined cover would build beyond the light
    model, without building it (an upper estimate: the deadline may rule recomputes out)."""
    g = problem.graph
    total = 0
    for i in range(problem.n if problem.allows_remat else 0):
        if g.nodes[i].pinned:
            continue
        prev = i
        for nxt in sorted(set(g.consumers[i])):
            length, first, prev = nxt - prev - 1, prev + 1, nxt
            if length > 0:
                total += length * (1 + len({j for path in _dead_paths(problem, i, first, depth) for j in path}))
    return total


def _budget_rows(cv: _Cover, limit: int) -> bool:
    """RAM within ``limit`` at every point; False when some point cannot get there."""
    for t, need in enumerate(cv.need):
        excess = need - limit
        if excess <= 0:
            continue
        if sum(s for _, s in cv.around[t] if s > 0) < excess:
            return False
        cv.m.add(sum(s * x for x, s in cv.around[t]) >= excess)
    return True


def _restores(gaps: list[_Gap], res: NativeResult) -> tuple[Restore, ...]:
    return tuple(Restore(gap.node, gap.next_use, how) for gap in gaps for how, x in gap.options.items() if res.value(x))


def _solve_cover(problem: Problem, budget: int | None, time_limit_s: float, *, closure: bool,
                 absences: bool, workers: int = 1, depth: int = 1, exposure: bool = False) -> CoverBound:
    """One cover model (:func:`cover_bound`) built and solved within ``time_limit_s``."""
    started = work.now()
    cv = _build(problem, closure=closure, absences=absences, depth=depth, exposure=exposure)
    # The build counts against the limit (1.8 s on a 1,567-node graph, which took a
    # compile at --time-limit 20 past its limit).
    build_s = work.now() - started
    infeasible = CoverBound(None, True, True, build_s=build_s)
    if not _budget_rows(cv, problem.activation_budget if budget is None else budget):
        return infeasible
    add_deadline_row(cv.m, cv.time_terms, cv.slack, cv.t_scale)
    cv.m.minimize(sum(k * x for x, k in cv.cost))
    res = _solve(cv.m, max(0.0, time_limit_s - build_s), workers)
    base = problem.costs.compute_only_j
    if res.status == "infeasible":
        return infeasible
    if res.status == "unknown":
        return CoverBound(base, False, False, build_s=build_s)
    bound = base + math.floor(_bound(res) + 1e-6) / cv.e_scale
    return CoverBound(bound, False, res.status == "optimal", _restores(cv.gaps, res), build_s)


def restore_slack(problem: Problem) -> float | None:
    """Seconds the deadline leaves for restores beyond the compute-only time, with the
    formulations' relative tolerance (None: no deadline)."""
    if problem.deadline_s is None:
        return None
    return problem.deadline_s * (1 + _DEADLINE_TOL) - problem.costs.compute_only_s + 1e-12


def cost_scales(problem: Problem, scale: float) -> tuple[float, float]:
    """Integer units per joule and per second: ``scale`` for the largest energy and time
    of one compute or transfer."""
    c = problem.costs
    return (scale / max(max(c.compute_j), max(c.page_in_j), max(c.page_out_j), 1e-300),
            scale / max(max(c.compute_s), max(c.page_in_s), max(c.page_out_s), 1e-300))


def add_deadline_row(m: Any, time_terms: list[tuple[Any, int]], slack: float | None, t_scale: float) -> None:
    """Restore time within ``slack``: times rounded down and the right side rounded up,
    a relaxation of the deadline."""
    if slack is not None and time_terms:
        m.add(sum(k * x for x, k in time_terms) <= math.floor(slack * t_scale) + len(time_terms))


def _solve(m: Any, time_limit_s: float, workers: int = 1) -> NativeResult:
    """A cover model solved deterministically: one worker, or several interleaved."""
    return solve_native(m, NativeLimits(time_limit_s=time_limit_s, workers=max(1, workers),
                                        interleave=workers > 1))


def _bound(res: NativeResult) -> float:
    """CP-SAT's bound of a result that has a solution."""
    assert res.bound is not None
    return res.bound


def cover_min_budget(problem: Problem, *, time_limit_s: float) -> int | None:
    """A lower bound on the smallest activation budget at which a schedule meets the
    deadline: the cover's rows with the budget as the variable (a schedule that fits B
    gives a choice that fits B). None when no budget fits the deadline; 0 (no
    information) when the solver stops without a proof."""
    cv = _build(problem, closure=False)
    m = cv.m
    b = m.new_int_var(0, max(cv.need, default=0), "budget")
    for t in range(problem.n):
        m.add(sum(s * x for x, s in cv.around[t]) + b >= cv.need[t])
    add_deadline_row(m, cv.time_terms, cv.slack, cv.t_scale)
    m.minimize(b)
    res = _solve(m, time_limit_s)
    if res.status == "infeasible":
        return None
    if res.status == "unknown":
        return 0
    return max(0, math.ceil(_bound(res) - 1e-6))


def cover_min_time(problem: Problem, *, budget: int | None = None,
                   time_limit_s: float) -> tuple[float, CoverBound] | None:
    """A lower bound on the step time of any schedule within ``budget`` (default: the
    activation budget) at any deadline: the cover's rows with the restores' time (as in
    the deadline row) as the objective. ``(seconds, choice)``, the choice's ``energy_j``
    its cover cost (not a bound); None when no schedule fits the budget."""
    cv = _build(problem, closure=False, deadline=False)
    if not _budget_rows(cv, problem.activation_budget if budget is None else budget):
        return None
    # Time first; among the fastest choices, the cheapest (energy breaks ties).
    worst_cost = sum(k for _, k in cv.cost) + 1
    cv.m.minimize(sum(k * worst_cost * x for x, k in cv.time_terms) + sum(k * x for x, k in cv.cost))
    res = _solve(cv.m, time_limit_s)
    if res.status == "infeasible":
        return None
    base = problem.costs.compute_only_s
    if res.status == "unknown":
        return base, CoverBound(None, False, False)
    t_units = max(0, math.floor(_bound(res) / worst_cost + 1e-9))
    energy = problem.costs.compute_only_j + sum(k for x, k in cv.cost if res.value(x)) / cv.e_scale
    return base + t_units / cv.t_scale, CoverBound(energy, False, res.status == "optimal", _restores(cv.gaps, res))
