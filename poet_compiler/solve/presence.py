"""The presence bound: a relaxation that sees when restores happen and what they hold
(docs/optimizer.md, "The presence model").

The cover (:mod:`.cover`) charges nothing for what a restore needs, so on chains it stays
below the optimum (README demo: 0.006061 against 0.008284 J). This model keeps the cover's
*points* (the first compute of every node) and tracks every tensor at every point and
every restore by its stage:

- ``p[k, t]``: tensor ``k`` is in RAM at point ``t`` (fixed 1 at its own compute and its
  readers' points; a variable in between and, up to its *horizon*, after its last reader,
  which a reader's recompute may still need);
- ``wr[k, r]`` / ``wp[k, r]``: ``k`` is recomputed / paged in during stage ``r`` (between
  points ``r - 1`` and ``r``); ``o[k]``: ``k`` is paged out at least once;
- absent at ``r - 1`` and present at ``r``: restored in stage ``r``; a recompute in stage
  ``r`` reads each input present at ``r - 1`` or restored in ``r``;
- RAM at every point within the budget; restore time within the deadline's slack.

A Program maps onto it (:func:`image_of`) at no more than its energy above the
compute-once energy, so the optimum plus that is a lower bound and a Program a feasible
hint. Its size is O(n²) (tensor, point) pairs, hence ``Tuning.presence_max_pairs``. CP-SAT
proves it by unsatisfiable cores on one worker (``NativeLimits.core``): the default
portfolio left it at the compute-once energy for 60 s. Rows for RAM *during* a stage's restores are
valid too, but moved no bound and doubled the time (demo: 8.2 s against 4.3 s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any  # CP-SAT objects: the model is built on solvers/native.py

import numpy as np

from poet_compiler import work
from poet_compiler.errors import ScheduleError
from poet_compiler.schedule.build import assemble
from poet_compiler.schedule.program import Op, Program
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.cover import StagedChoice
from poet_compiler.solve.cover_model import add_deadline_row, cost_scales, recompute_j, restore_slack, transfer_j
from poet_compiler.solve.problem import Problem
from poet_compiler.solvers.native import NativeLimits, NativeResult, new_model, solve_native

_SCALE = 1e9          # integer units per largest cost: rounding stays far below OPTIMALITY_TOL


@dataclass(frozen=True)
class PresenceBound:
    """``energy_j``: a lower bound on every schedule's energy (None: infeasible, or
    nothing proven); ``closed``: solved to optimality."""

    energy_j: float | None
    infeasible: bool
    closed: bool
    solve_s: float = 0.0
    pairs: int = 0
    message: str = ""
    # The best solution realized (:func:`_realize`, not checked), and its restores by
    # stage (:func:`_choice`), which the guided stage opens whether or not that holds.
    schedule: Schedule | None = field(default=None, repr=False, compare=False)
    choice: StagedChoice = field(default=StagedChoice(), repr=False, compare=False)

    def summary(self) -> dict[str, Any]:
        """The figures a Result reports (``extra.presence``)."""
        return {"bound_j": self.energy_j, "closed": self.closed, "infeasible": self.infeasible,
                "pairs": self.pairs, "message": self.message}


def horizons(problem: Problem) -> list[int]:
    """The last point at which each tensor can be read: by its last reader, or by a
    reader's recompute within that reader's horizon."""
    g = problem.graph
    out = [max(g.consumers[k], default=k) for k in range(problem.n)]
    for k in reversed(range(problem.n)):
        for i in g.consumers[k]:
            out[k] = max(out[k], out[i])
    return out


def pairs(problem: Problem) -> int:
    """The number of (tensor, point) pairs: the model's size, known before building it."""
    return sum(h - k + 1 for k, h in enumerate(horizons(problem)))


@dataclass
class _Model:
    m: Any
    p: dict[tuple[int, int], Any]          # (tensor, point) -> literal, or 1 (fixed)
    wr: dict[tuple[int, int], Any] = field(default_factory=dict)
    wp: dict[tuple[int, int], Any] = field(default_factory=dict)
    out: dict[int, Any] = field(default_factory=dict)
    cost: list[tuple[Any, int]] = field(default_factory=list)
    time_terms: list[tuple[Any, int]] = field(default_factory=list)
    e_scale: float = 1.0
    infeasible: bool = False


def _is_var(x: Any) -> bool:
    return not isinstance(x, int)


def _build(problem: Problem) -> _Model:
    g, n = problem.graph, problem.n
    size = [node.output_bytes for node in g.nodes]
    horizon = horizons(problem)
    slack = restore_slack(problem)
    e_scale, t_scale = cost_scales(problem, _SCALE)
    md = _Model(new_model(), {}, e_scale=e_scale)
    m = md.m
    for k in range(n):
        fixed = g.nodes[k].pinned
        readers = set(g.consumers[k])
        for t in range(k, horizon[k] + 1):
            md.p[(k, t)] = 1 if fixed or t == k or t in readers else m.new_bool_var(f"p[{k},{t}]")
        if fixed:
            continue
        for r in range(k + 1, horizon[k] + 1):
            _restore_options(problem, md, k, r, slack, t_scale)
            before, now = md.p[(k, r - 1)], md.p[(k, r)]
            if not _is_var(before) and not _is_var(now):
                continue          # in RAM at both points by need: a restore between is waste
            options = [x for x in (md.wr.get((k, r)), md.wp.get((k, r))) if x is not None]
            # Absent at r - 1 and present at r: restored in stage r.
            m.add(sum(options) >= now - before)
    _input_rows(problem, md)
    _point_rows(problem, md, problem.activation_budget, size)
    add_deadline_row(m, md.time_terms, slack, t_scale)
    m.minimize(sum(k * x for x, k in md.cost))
    return md


def _restore_options(problem: Problem, md: _Model, k: int, r: int, slack: float | None,
                     t_scale: float) -> None:
    """``wr[k, r]`` and ``wp[k, r]`` where the mode and the deadline allow them."""
    c, m = problem.costs, md.m
    # A reader of a parameter is not recomputed after its update (docs/training.md).
    if problem.allows_remat and (slack is None or c.compute_s[k] <= slack) and r <= problem.graph.last_compute_stage[k]:
        x = md.wr[(k, r)] = m.new_bool_var(f"wr[{k},{r}]")
        md.cost.append((x, math.floor(recompute_j(problem, k) * md.e_scale)))
        md.time_terms.append((x, math.floor(c.compute_s[k] * t_scale)))
    if problem.allows_paging and (slack is None or problem.overlaps
                                  or c.page_in_s[k] + c.page_out_s[k] <= slack):
        x = md.wp[(k, r)] = m.new_bool_var(f"wp[{k},{r}]")
        md.cost.append((x, math.floor(transfer_j(problem, k, "in") * md.e_scale)))
        if not problem.overlaps:
            md.time_terms.append((x, math.floor(c.page_in_s[k] * t_scale)))
        if k not in md.out:
            y = md.out[k] = m.new_bool_var(f"o[{k}]")
            md.cost.append((y, math.floor(transfer_j(problem, k, "out") * md.e_scale)))
            if not problem.overlaps:
                md.time_terms.append((y, math.floor(c.page_out_s[k] * t_scale)))
        m.add_implication(x, md.out[k])


def _input_rows(problem: Problem, md: _Model) -> None:
    """A recompute in stage ``r`` reads each input: in RAM at ``r - 1`` or restored in ``r``."""
    g = problem.graph
    for (k, r), x in md.wr.items():
        for j in sorted(set(g.nodes[k].inputs)):
            before = md.p.get((j, r - 1), 0)
            if not _is_var(before) and before == 1:
                continue
            either = [lit for lit in (before, md.wr.get((j, r)), md.wp.get((j, r)))
                      if lit is not None and _is_var(lit)]
            md.m.add_bool_or([x.Not(), *either])


def _point_rows(problem: Problem, md: _Model, budget: int, size: list[int]) -> None:
    """RAM at the first compute of every node: what is present, plus its workspace."""
    g, n = problem.graph, problem.n
    at: list[list[tuple[Any, int]]] = [[] for _ in range(n)]
    for (k, t), x in md.p.items():
        at[t].append((x, size[k]))
    for t in range(n):
        fixed = sum(s for x, s in at[t] if not _is_var(x)) + g.nodes[t].workspace_bytes
        if fixed > budget:
            md.infeasible = True
            return
        free = [(x, s) for x, s in at[t] if _is_var(x)]
        if free and fixed + sum(s for _, s in free) > budget:
            md.m.add(sum(s * x for x, s in free) <= budget - fixed)


def image_of(problem: Problem, program: Program) -> dict[str, Any]:
    """The model's values for ``program``: ``p`` ((k, t) -> 0/1), ``wr``/``wp`` (sets of
    (k, r)) and ``out`` (the tensors paged out)."""
    n = problem.n
    ram: set[int] = set()
    computed: set[int] = set()
    p: dict[tuple[int, int], int] = {}
    wr: set[tuple[int, int]] = set()
    wp: set[tuple[int, int]] = set()
    out: set[int] = set()
    stage = 0
    for ins in program:
        k = ins.node
        if ins.op is Op.COMPUTE:
            ram.add(k)
            if k in computed:
                wr.add((k, stage))
            else:
                computed.add(k)
                p.update(((j, k), int(j in ram)) for j in range(n))
                stage = k + 1
        elif ins.op is Op.PAGE_IN:
            wp.add((k, stage))
            ram.add(k)
        elif ins.op is Op.PAGE_OUT:
            out.add(k)
        elif ins.op is Op.FREE:
            ram.discard(k)
    return {"p": p, "wr": wr, "wp": wp, "out": out}


def _hint(md: _Model, image: dict[str, Any]) -> None:
    for key, x in md.p.items():
        if _is_var(x):
            md.m.add_hint(x, image["p"].get(key, 0))
    for name in ("wr", "wp", "out"):
        for key, x in getattr(md, name).items():
            md.m.add_hint(x, int(key in image[name]))


def presence_bound(problem: Problem, *, time_limit_s: float, hint: Program | None = None,
                   fix_to_hint: bool = False) -> PresenceBound:
    """The presence bound of ``problem`` within ``time_limit_s``, with its best solution
    realized as a schedule. ``hint``: a Program, a first solution. The search runs to the
    optimum or the limit in a child process (its memory is returned when it ends).
    ``fix_to_hint``: only check that the hint satisfies the model (the tests' check)."""
    started = work.now()
    size = pairs(problem)
    md = _build(problem)
    if md.infeasible:
        return PresenceBound(None, True, True, work.now() - started, size, "a point's fixed RAM exceeds the budget")
    if hint is not None:
        _hint(md, image_of(problem, hint))
    res = solve_native(md.m, NativeLimits(time_limit_s=max(0.0, time_limit_s - (work.now() - started)),
                                          core=True, fix_to_hint=fix_to_hint, isolate=True))
    elapsed = work.now() - started
    if res.status == "infeasible":
        return PresenceBound(None, True, True, elapsed, size)
    if res.bound is None:
        return PresenceBound(None, False, False, elapsed, size, res.message or res.status)
    bound = problem.costs.compute_only_j + math.floor(res.bound + 1e-6) / md.e_scale
    closed = res.status == "optimal"
    if not res.has_solution:
        return PresenceBound(bound, False, closed, elapsed, size, res.message)
    return PresenceBound(bound, False, closed, elapsed, size, res.message,
                         schedule=_realize(problem, md, res), choice=_choice(md, res))


def _choice(md: _Model, res: NativeResult) -> StagedChoice:
    """The solution's recomputes ``(stage, node)`` and paged nodes: where the points are
    not the only peaks its realization does not fit, but a cheaper schedule uses these
    restores (ResNet-18-CIFAR m4 50 % 2.0x: the guided sub-problem with them found
    106.849 J in 11 s, 107.429 J without)."""
    recompute = frozenset((r, k) for (k, r), x in md.wr.items() if res.value(x))
    paging = frozenset(k for (k, _), x in md.wp.items() if res.value(x))
    return StagedChoice(recompute, paging)


def _realize(problem: Problem, md: _Model, res: NativeResult) -> Schedule | None:
    """The solution as a schedule (not checked): its recomputes, each page-in a paged gap
    after the tensor's previous use, the rest kept until the next need (:func:`assemble`)."""
    g, n = problem.graph, problem.n
    R = np.eye(n, dtype=bool)
    for (k, r), x in md.wr.items():
        if res.value(x):
            R[r, k] = True
    paged = []
    for (k, r), x in md.wp.items():
        if res.value(x):
            before = [t for t in range(k, r) if R[t, k] or any(R[t, i] for i in g.consumers[k])]
            paged.append((k, before[-1]))
    try:
        return assemble(g, R, paged)
    except ScheduleError:
        return None


__all__ = ["PresenceBound", "horizons", "image_of", "pairs", "presence_bound"]
