"""The eviction cover's CP-SAT model, built and not solved (:mod:`.cover` solves it):
per tensor and next consumer a *gap* with a literal per restore mechanism, the bytes each
choice takes off the checkpoint-all live set at every point, the restores' energy and
time; in the *refined* model, the dead inputs a recompute needs (absence literals along
chains of them) and, with ``exposure``, the paging time that outlasts its stage
(:mod:`.exposure`). The rules are the module docstring's of :mod:`.cover`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple  # Any: CP-SAT objects (the model is built on solvers/native.py)

from poet_compiler.solve.exposure import IMPOSSIBLE, StageExposure, applies
from poet_compiler.solve.problem import Problem
from poet_compiler.solvers.native import new_model

RECOMPUTE, PAGE = "recompute", "page"
_SCALE = 1e7          # integer units per largest cost: rounding loses < 1e-7 of it per choice
_DEADLINE_TOL = 1e-9  # the formulations' deadline row has the same relative slack


@dataclass(eq=False)
class Gap:
    """Tensor ``node`` out of RAM at ``points``, between a use and its ``next_use``, and the
    literal of each mechanism that may restore it there."""

    node: int
    next_use: int
    points: range
    options: dict[str, Any]      # mechanism -> CP-SAT literal


@dataclass
class CoverModel:
    """The cover model before its budget rows and objective; ``around``: per point, the
    bytes each choice takes off ``need``."""

    m: Any
    need: list[int]
    around: dict[int, list[tuple[Any, int]]]
    gaps: list[Gap]
    cost: list[tuple[Any, int]]
    time_terms: list[tuple[Any, int]]
    slack: float | None
    e_scale: float
    t_scale: float


def build_cover(problem: Problem, *, closure: bool, deadline: bool = True, absences: bool = True,
                depth: int = 1, exposure: bool = False) -> CoverModel:
    """The choices of :func:`~.cover.cover_bound`; ``closure``: a recompute charged with its
    whole :func:`recompute_closure`; ``deadline=False``: not filtered by the deadline (the
    minimum-time bound); ``absences=False``: the light model; ``depth``: how deep the
    chains of dead inputs go; ``exposure``: with the paging time that outlasts its stage
    (:mod:`.exposure`)."""
    b = _Builder(problem, deadline)
    b.add_gaps(closure)
    if closure:
        _forbid_conflicts(problem, b.gaps, b.m)
    around: dict[int, list[tuple[Any, int]]] = {t: [] for t in range(problem.n)}
    # Per gap with a recompute option: the chains of dead inputs a recompute in it may need.
    dead = {} if closure or not absences else {
        gap: paths for gap in b.gaps
        if RECOMPUTE in gap.options and (paths := _dead_paths(problem, gap.node, gap.points.start, depth))}
    ex = StageExposure(problem, b.m, b.page_out_of) if exposure and applies(problem) else None
    for gap in b.gaps:
        paged = {} if ex is None or PAGE not in gap.options else _page_requirements(ex, gap)
        if gap in dead:
            b.add_absences(gap, dead[gap], paged, around)
        else:
            _add_present(b.m, gap, paged, b.size, around)
    if ex is not None:
        ex.add_static_cost(b.cost, b.busy, b.e_scale)
        # The summed excess fits the deadline's slack too: T >= T0 + max(R, E).
        add_deadline_row(b.m, [(lit, math.floor(s * b.t_scale)) for lit, s in ex.terms], b.slack, b.t_scale)
    return CoverModel(b.m, b.need, around, b.gaps, b.cost, b.time_terms, b.slack, b.e_scale, b.t_scale)


class _Builder:
    """The model's literals and terms as :func:`build_cover` adds them, in its order (the
    variables' order is the model's: the same input gives the same model)."""

    def __init__(self, problem: Problem, deadline: bool) -> None:
        g, n = problem.graph, problem.n
        self.problem = problem
        self.size = [node.output_bytes for node in g.nodes]
        self.need = [self.size[t] + g.nodes[t].workspace_bytes for t in range(n)]
        self.slack = restore_slack(problem) if deadline else None
        self.e_scale, self.t_scale = cost_scales(problem, _SCALE)
        self.m = new_model()
        self.cost: list[tuple[Any, int]] = []
        self.time_terms: list[tuple[Any, int]] = []
        self.page_out: dict[int, Any] = {}
        self.gaps: list[Gap] = []
        self.busy: list[tuple[Any, float]] = []     # recompute literals, with their seconds
        self.post_life: dict[int, _PostLife] = {}
        self.kept: dict[tuple[int, int], Any] = {}

    def page_out_of(self, i: int) -> Any:
        """Tensor i's one page-out literal (every page-in of i reads what it wrote)."""
        if i not in self.page_out:
            y = self.page_out[i] = self.m.new_bool_var(f"o[{i}]")
            self.cost.append((y, math.floor(transfer_j(self.problem, i, "out") * self.e_scale)))
            if not self.problem.overlaps:
                self.time_terms.append((y, math.floor(self.problem.costs.page_out_s[i] * self.t_scale)))
        return self.page_out[i]

    def add_gaps(self, closure: bool) -> None:
        """Every gap of every tensor, with its restore options, and the checkpoint-all live
        set ``need`` at every point."""
        problem, size, need = self.problem, self.size, self.need
        g = problem.graph
        for i in range(problem.n):
            pinned = g.nodes[i].pinned
            prev = i
            for nxt in sorted(set(g.consumers[i])):
                need[nxt] += size[i]           # an input of nxt: in RAM at its compute point
                gap = Gap(i, nxt, range(prev + 1, nxt), {})
                prev = nxt
                for t in gap.points:
                    need[t] += size[i]
                if not gap.points or pinned:
                    continue
                self._add_options(gap, recompute_closure(problem, i, nxt) if closure else [i])
                if gap.options:
                    if len(gap.options) > 1:
                        self.m.add_at_most_one(list(gap.options.values()))  # one restore covers the gap
                    self.gaps.append(gap)

    def _add_options(self, gap: Gap, ks: list[int]) -> None:
        """The gap's recompute (of ``ks``) and page-in literals, where the mode and the
        deadline's slack allow them."""
        problem, m, slack = self.problem, self.m, self.slack
        c, i, nxt = problem.costs, gap.node, gap.next_use
        r_s = sum(c.compute_s[k] for k in ks)
        # A reader of a parameter may not be recomputed after its update (docs/training.md),
        # but a recompute before it and kept till nxt is legal: the option stays, as the
        # relaxation of both (a bound; realize() meets the rule or is dropped).
        if problem.allows_remat and (slack is None or r_s <= slack):
            x = m.new_bool_var(f"r[{i},{nxt}]")
            self.cost.append((x, math.floor(sum(recompute_j(problem, k) for k in ks) * self.e_scale)))
            self.time_terms.append((x, math.floor(r_s * self.t_scale)))
            self.busy.append((x, r_s))
            gap.options[RECOMPUTE] = x
        pair_s = c.page_in_s[i] + c.page_out_s[i]
        if problem.allows_paging and (slack is None or problem.overlaps or pair_s <= slack):
            x = m.new_bool_var(f"p[{i},{nxt}]")
            self.cost.append((x, math.floor(transfer_j(problem, i, "in") * self.e_scale)))
            if not problem.overlaps:
                self.time_terms.append((x, math.floor(c.page_in_s[i] * self.t_scale)))
            m.add_implication(x, self.page_out_of(i))
            gap.options[PAGE] = x

    def kept_at(self, j: int, t: int, around: dict[int, list[tuple[Any, int]]]) -> Any:
        """The literal "dead tensor j is in RAM at point t", whose bytes count there."""
        if (j, t) not in self.kept:
            self.kept[(j, t)] = self.m.new_bool_var(f"k[{j},{t}]")
            around[t].append((self.kept[(j, t)], -self.size[j]))
        return self.kept[(j, t)]

    def add_absences(self, gap: Gap, paths: list[tuple[int, ...]], paged: dict[int, tuple[Any, ...]],
                     around: dict[int, list[tuple[Any, int]]]) -> None:
        """Absence per point: the node, out at t and recomputed after it, needs each dead
        input j1 then: kept through t or brought back after its last use. A j1 not in RAM
        at t and never paged in is recomputed after t, and needs its own dead input j2
        then: the same rule one level down, along every chain of :func:`_dead_paths`."""
        problem, m = self.problem, self.m
        opts = list(gap.options.values())
        for t in gap.points:
            a = m.new_bool_var(f"a[{gap.node},{t}]")
            m.add(a <= sum(opts))
            if paged:
                _require(m, a, gap, paged[t])
            around[t].append((a, self.size[gap.node]))
            for path in paths:
                for j in path:
                    if j not in self.post_life:
                        self.post_life[j] = _post_life_event(problem, j, m, self.cost, self.e_scale, self.page_out_of)
                        if problem.allows_remat:   # a recompute literal, charged static time
                            self.busy.append((self.post_life[j].recomputed, problem.costs.compute_s[j]))
                excused = sum(self.kept_at(j, t, around) + self.post_life[j].paged for j in path[:-1])
                last = path[-1]
                restored = self.post_life[last].recomputed + self.post_life[last].paged
                m.add(self.kept_at(last, t, around) >= a - gap.options.get(PAGE, 0) - excused - restored)


def _add_present(m: Any, gap: Gap, paged: dict[int, tuple[Any, ...]], size: list[int],
                 around: dict[int, list[tuple[Any, int]]]) -> None:
    """A gap of the light model: out of RAM at every point by any of its options, or, where
    paging must meet its stage-long requirements, by one absence literal per run of points
    with the same requirements."""
    if not paged:
        for t in gap.points:
            around[t].extend((x, size[gap.node]) for x in gap.options.values())
        return
    for points, req in _cells(gap.points, paged):
        a = m.new_bool_var(f"a[{gap.node},{points.start}]")
        m.add(a <= sum(gap.options.values()))
        _require(m, a, gap, req)
        for t in points:
            around[t].append((a, size[gap.node]))


def _forbid_conflicts(problem: Problem, gaps: list[Gap], m: Any) -> None:
    """A recompute in stage ``c`` reads its closure's inputs there: none of them may be out
    of RAM across ``c`` (``closure`` only: a bound must allow it, a schedule may pay both)."""
    g = problem.graph
    by_node: dict[int, list[Gap]] = {}
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


def _page_requirements(ex: StageExposure, gap: Gap) -> dict[int, tuple[Any, ...]]:
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


def _require(m: Any, a: Any, gap: Gap, req: tuple[Any, ...]) -> None:
    """``a`` (the gap's tensor out of RAM at a point) by recompute, or by paging with ``req``."""
    rec = gap.options.get(RECOMPUTE, 0)
    for r in req:
        m.add(a <= rec) if r is IMPOSSIBLE else m.add(a <= rec + r)


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
