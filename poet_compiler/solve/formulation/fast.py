"""The default formulation: docs/model.md, small and tight.

Same problem as :mod:`.dense`, with far fewer variables and nonzeros and a tighter
memory accounting.

Variables exist only where they can be non-zero in some optimal schedule:

- ``useful(t, i)``: node ``i`` can still be read at stage ``t`` or later — a consumer
  ``j >= t``, or a consumer ``j < t`` that may itself be recomputed in stage ``t``.
  ``R[t,i]`` (``i < t``) exists only for recomputable (not pinned, has consumers) useful
  nodes, ``S_RAM[t,i]`` only for useful ones: a recompute or a residency nothing can
  read is dropped from any schedule without raising energy, time or memory.
- Deadline slack ``D - sum compute_s`` (the time any schedule can spend beyond computing
  each node once): a recompute of ``i`` needs ``compute_s[i] <= slack``; without DMA a
  page-out/page-in pair of ``i`` needs ``page_out_s[i] + page_in_s[i] <= slack``; with
  DMA a transfer in stage ``t`` needs its time ``<= slack + (most compute stage t can
  have)``. Variables that cannot fit are not created.
- Paging variables only in modes that page, for nodes that are not pinned: ``M_out[t,i]``
  only if ``i`` can be paged back in a later stage and still be read after that;
  ``S_AUX`` and ``M_in`` only from stage ``i+2`` on (a page-out must come first).

Dominated choices are forbidden (symmetry breaking; each removal below turns any
schedule into one at most as costly, so an optimum survives — :func:`canonical` applies
the same removals to a warm start):

- a page-in not kept into the next stage (it is usable only from there); a page-out of
  a tensor already on flash (a page-out never paged back in costs energy for nothing,
  so no optimum has one; it is not written as a row, which would need O(n) terms);
- a recompute nothing reads in the stage and that is not kept;
- a residency nothing reads in the stage, not kept and not paged out.

Memory ("last use in stage" accounting, instead of Checkmate's per-edge frees): for each
tensor ``i`` present in stage ``t`` and its consumers ``c_1 < ... < c_m`` that may run in
the stage, a non-increasing chain ``A[t,i,1] >= ... >= A[t,i,m] >= H[t,i]`` with
``A[t,i,r] >= R[t,c_r]``; ``H[t,i]`` (held through the stage) ``>= S_RAM[t+1,i], M_in,
M_out``. At a compute point ``k > i`` the tensor is allocated iff ``A[t,i,r(k)] = 1``
(``r(k)``: first consumer ``>= k``), which is exactly "in RAM and not yet freed after its
last use". Before its own compute point (``k < i``) the tensor occupies RAM only if it
came in resident (or by a page-in) and something needs it: ``B[t,i] >= R[t,c] - R[t,i]``,
``>= S_RAM[t+1,i] - R[t,i]``, ``>= M_in, M_out``.

The bytes allocated at consecutive compute points differ only in the tensors whose
indicator changes between them (the point's own output, tensors whose consumer just ran),
so the memory of stage ``t`` is a running sum ``U[t,k] = U[t,k'] + delta`` over the points
``k' < k`` that may run, with ``U[t,k] + (m_k + w_k) R[t,k] <= budget``: O(n + |E|)
nonzeros per stage instead of O(n^2). The row at ``(t, k)`` is written for every ``k``
that may run in stage ``t``; at non-compute points it is implied by the next compute
point, so it never over-constrains.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.formulation.common import (
    Built,
    Expr,
    add,
    add_state_rules,
    add_time_and_energy,
    check_build_deadline,
    neg,
    seed,
)
from poet_compiler.solve.problem import Problem
from poet_compiler.solvers.model import LinearModel

#: Which stages get every memory row (row generation; the others get one, see _add_point_row).
StageFilter = Callable[[int], bool]

# Relative tolerance on the deadline slack (the deadline row has the same 1e-9).
_SLACK_TOL = 1e-9


@dataclass(frozen=True)
class Restriction:
    """A sub-problem: only these recomputes ``(stage, node)`` and only these nodes may be
    paged. Every schedule of the restricted model is a schedule of the full one (the
    missing variables are 0), so its optimum is an upper bound — used to find good
    schedules fast (:mod:`poet_compiler.solve.guided`), never to claim optimality."""

    recompute: frozenset[tuple[int, int]]
    paging: frozenset[int]
    # Nodes held in RAM from their compute to their last consumer, as checkpoint-all does.
    keep: frozenset[int] = frozenset()


def useful_table(problem: Problem, restriction: Restriction | None = None) -> list[list[bool]]:
    """``useful[t][i]`` for ``i < t`` (see the module docstring)."""
    g, n = problem.graph, problem.n
    cons = g.consumers
    recomputable = _recomputable(problem)
    useful = [[False] * n for _ in range(n)]
    if restriction is not None:
        # Node j can be recomputed in stage t or later: a reader of its inputs then.
        last_r = [-1] * n
        for t, j in restriction.recompute:
            last_r[j] = max(last_r[j], t)
        for t in range(n):
            check_build_deadline()
            for i in range(t):
                useful[t][i] = any(j >= t or (recomputable[j] and last_r[j] >= t) for j in cons[i])
        return useful
    for t in range(n):
        check_build_deadline()
        for i in range(t - 1, -1, -1):
            useful[t][i] = any(j >= t or (recomputable[j] and useful[t][j]) for j in cons[i])
    return useful


def _slack(problem: Problem) -> float | None:
    """Time any schedule may spend beyond computing every node once (None: no deadline)."""
    if problem.deadline_s is None:
        return None
    return problem.deadline_s * (1 + _SLACK_TOL) - problem.costs.compute_only_s + 1e-12


def _recomputable(problem: Problem) -> list[bool]:
    g = problem.graph
    cons = g.consumers
    slack = _slack(problem)
    return [problem.allows_remat and not node.pinned and bool(cons[i])
            and (slack is None or problem.costs.compute_s[i] <= slack)
            for i, node in enumerate(g.nodes)]


def _create_variables(b: Built, useful: list[list[bool]], restriction: Restriction | None = None) -> None:
    problem, model = b.problem, b.model
    g, n, c = problem.graph, problem.n, problem.costs
    cons = g.consumers
    recomputable = _recomputable(problem)
    last = g.last_compute_stage  # a reader of a parameter is not recomputed after its update
    for t in range(n):
        check_build_deadline()
        for i in range(t):
            if not useful[t][i]:
                continue
            b.S_RAM[(t, i)] = model.var(f"S[{t},{i}]")
            if recomputable[i] and t <= last[i] and (restriction is None or (t, i) in restriction.recompute):
                b.R[(t, i)] = model.var(f"R[{t},{i}]")
    if not problem.allows_paging:
        return
    slack = _slack(problem)
    # Most compute stage t can hold (stage-long transfers hide behind it).
    cmax = [c.compute_s[t] + sum(c.compute_s[i] for i in range(t) if (t, i) in b.R) for t in range(n)]

    def fits(t: int, i: int, direction: str) -> bool:
        if slack is None:
            return True
        if not problem.overlaps:
            return c.page_out_s[i] + c.page_in_s[i] <= slack
        s = c.page_in_s[i] if direction == "in" else c.page_out_s[i]
        return s <= slack + cmax[t]

    for i in range(n):
        if restriction is not None and i not in restriction.paging:
            continue
        if g.nodes[i].pinned or not cons[i] or (slack is not None and not problem.overlaps
                                                 and c.page_out_s[i] + c.page_in_s[i] > slack):
            continue
        if problem.synchronous:
            # A synchronous page-in serves a reader in its own stage; a page-out follows
            # the tensor's last use in a stage where it is resident or recomputed.
            ins = [t for t in range(i + 2, n) if fits(t, i, "in")
                   and any(r == t or (t, r) in b.R for r in cons[i] if r <= t)]
            if not ins:
                continue
            outs = [t for t in range(i + 1, ins[-1]) if ((t, i) in b.S_RAM or (t, i) in b.R)
                    and fits(t, i, "out")]
        else:
            ins = [t for t in range(i + 2, n - 1) if (t + 1, i) in b.S_RAM and fits(t, i, "in")]
            if not ins:
                continue
            outs = [t for t in range(i + 1, ins[-1]) if (t, i) in b.S_RAM and fits(t, i, "out")]
        if not outs:
            continue
        # S_AUX[t,i] needs a page-out before t; M_in[t,i] needs S_AUX[t,i].
        for t in range(outs[0] + 1, ins[-1] + 1):
            b.S_AUX[(t, i)] = model.var(f"X[{t},{i}]")
        for t in ins:
            if t > outs[0]:
                b.M_in[(t, i)] = model.var(f"Min[{t},{i}]")
        last_in = max(t for t in ins if t > outs[0])
        for t in outs:
            if t < last_in:
                b.M_out[(t, i)] = model.var(f"Mout[{t},{i}]")


def _add_dominance_rules(b: Built) -> None:
    """The symmetry-breaking rules of the module docstring."""
    model, g, n = b.model, b.problem.graph, b.problem.n
    cons = g.consumers
    sync = b.problem.synchronous
    for (t, i), v in b.M_in.items():
        if sync:
            # Without DMA a page-in nothing reads in its stage is the same page-in one
            # stage later, where it holds no RAM before its reader.
            read_expr = add(*(b.expr("R", t, c) for c in cons[i] if c <= t))
            model.le(add({v: 1.0}, neg(read_expr)), 0.0)
        else:
            model.le(add({v: 1.0}, neg(b.expr("S_RAM", t + 1, i))), 0.0)
    for (t, i), v in b.M_out.items():
        model.le(add({v: 1.0}, b.expr("S_AUX", t, i)), 1.0)
    for t in range(n):
        check_build_deadline()
        keep_next = (lambda i: b.expr("S_RAM", t + 1, i)) if t + 1 < n else (lambda i: {})
        for i in range(t):
            readers = [c for c in cons[i] if c <= t and (c == t or (t, c) in b.R)]
            if t in readers:
                continue            # node t reads i: i is needed in this stage anyway
            users = add(*(b.expr("R", t, c) for c in readers))
            if (t, i) in b.R:
                out = neg(b.expr("M_out", t, i)) if sync else {}
                model.le(add({b.R[(t, i)]: 1.0}, neg(users), neg(keep_next(i)), out), 0.0)
            if (t, i) in b.S_RAM:
                model.le(add({b.S_RAM[(t, i)]: 1.0}, neg(users), neg(keep_next(i)),
                             neg(b.expr("M_out", t, i))), 0.0)


def _aux_max(b: Built, name: str, lows: list[Expr], reuse: bool = True) -> Expr:
    """An expression ``>=`` every non-empty one of ``lows`` ({} if none): with ``reuse``,
    the expression itself when there is one, a single variable; else a new variable."""
    lows = [e for e in lows if e]
    if not lows:
        return {}
    if reuse and len(lows) == 1 and all(c > 0 for c in lows[0].values()) and len(lows[0]) == 1:
        return lows[0]
    v = b.model.var(name)
    for e in lows:
        b.model.le(add(e, {v: -1.0}), 0.0)
    b.define(v, "max", lows)
    return {v: 1.0}


def _add_memory(b: Built, limit: float, cap_expr: Expr, full_stages: StageFilter | None = None) -> None:
    """Running-sum memory rows (module docstring). With ``full_stages``, the stages it
    rejects get one row only, at their own compute point (a relaxation: see
    :func:`_add_point_row`)."""
    for t in range(b.problem.n):
        check_build_deadline()
        stage = _StageMemory(b, t)
        if full_stages is not None and not full_stages(t):
            _add_point_row(b, t, stage.present, stage.hold, limit, cap_expr)
        else:
            stage.add_rows(limit, cap_expr)


class _StageMemory:
    """The memory rows of stage ``t``, built in steps (the auxiliary variables are made in
    the same order every time: the same problem gives the same model). ``present``: the
    earlier tensors the stage may hold; ``hold[i]``: ``i`` held into the next stage (or,
    with DMA, in transfer)."""

    def __init__(self, b: Built, t: int) -> None:
        self.b, self.t = b, t
        problem = b.problem
        g, n = problem.graph, problem.n
        self.sync = problem.synchronous
        self.can_run = [k for k in range(t + 1) if k == t or (t, k) in b.R]
        self.present = [i for i in range(t) if (t, i) in b.S_RAM or (t, i) in b.R or (t, i) in b.M_in]
        self.hold: dict[int, Expr] = {}
        for i in self.present:
            keep = b.expr("S_RAM", t + 1, i) if t + 1 < n else {}
            # With DMA a transfer holds its buffer for the whole stage; without, it holds
            # nothing beyond the tensor's own residency.
            transfers = [] if self.sync else [b.expr("M_in", t, i), b.expr("M_out", t, i)]
            self.hold[i] = _aux_max(b, f"H[{t},{i}]", [keep, *transfers])
        self.users_of = {i: [c for c in g.consumers[i] if c in self.can_run] for i in self.present}
        self.chain: dict[int, list[tuple[int, Expr]]] = {}
        self.start: dict[int, Expr] = {}
        self.arrived: dict[int, list[tuple[int, Expr]]] = {}

    def add_rows(self, limit: float, cap_expr: Expr) -> None:
        self._chains()
        self._starts()
        if self.sync:
            self._arrivals()
        self._running_sum(limit, cap_expr)

    def _chains(self) -> None:
        """A chains over the consumers that may run in the stage, created last to first."""
        b, t = self.b, self.t
        for i in self.present:
            links: list[tuple[int, Expr]] = []
            below = self.hold[i]
            for c in reversed(self.users_of[i]):
                below = _aux_max(b, f"A[{t},{i},{c}]", [b.expr("R", t, c), below])
                links.append((c, below))
            self.chain[i] = list(reversed(links))

    def _starts(self) -> None:
        """B: a tensor resident at stage start (not recomputed, and without DMA not paged in)."""
        b, t, sync = self.b, self.t, self.sync
        for i in self.present:
            if (t, i) not in b.S_RAM and (t, i) not in b.M_in:
                continue
            if sync and (t, i) not in b.S_RAM:
                continue    # only paged in: no RAM before its first reader (> i)
            ri = add(b.expr("R", t, i), b.expr("M_in", t, i) if sync else {})
            lows = [add(b.expr("R", t, c), neg(ri)) for c, _ in self.chain[i]]
            if t + 1 < b.problem.n and b.expr("S_RAM", t + 1, i):
                lows.append(add(b.expr("S_RAM", t + 1, i), neg(ri)))
            if not sync:
                lows += [b.expr("M_in", t, i), b.expr("M_out", t, i)]
            self.start[i] = _aux_max(b, f"B[{t},{i}]", lows, reuse=False)

    def _arrivals(self) -> None:
        """Without DMA a page-in allocates right before its first reader: G[t,i,c] >= 1
        once a reader <= c has run (a non-decreasing chain), and the tensor counts at point
        k as A - M_in + G (0 before the first reader, A from it on)."""
        b, t = self.b, self.t
        for i in self.present:
            mi = b.expr("M_in", t, i)
            if not mi:
                continue
            links = []
            above: Expr = {}
            for c in self.users_of[i]:
                above = _aux_max(b, f"G[{t},{i},{c}]", [add(mi, b.expr("R", t, c), {b.one: -1.0}), above])
                links.append((c, above))
            self.arrived[i] = links

    def _alloc(self, i: int, k: int) -> Expr:
        """Indicator of ``i`` allocated at compute point ``k`` (``i != k``)."""
        if i < k:
            needed = next((ex for c, ex in self.chain[i] if c >= k), self.hold[i])
            if i in self.arrived:
                got = next((ex for c, ex in reversed(self.arrived[i]) if c <= k), {})
                return add(needed, neg(self.b.expr("M_in", self.t, i)), got)
            return needed
        return self.start.get(i, {})

    def _running_sum(self, limit: float, cap_expr: Expr) -> None:
        """A row per compute point that may run: the level before it (named U, so the next
        point adds only its changes) plus the point's own output and workspace."""
        b, t, model = self.b, self.t, self.b.model
        g = b.problem.graph
        size = [node.output_bytes for node in g.nodes]
        ub_bytes = float(sum(size))
        present_set = set(self.present)
        by_user: dict[int, list[int]] = {}
        for i in self.present:
            for c in self.users_of[i]:
                by_user.setdefault(c, []).append(i)
        u_prev: Expr = {}
        kp = -1
        for idx, k in enumerate(self.can_run):
            if idx == 0:
                delta = add(*(add(self._alloc(i, k), scale=float(size[i])) for i in self.present if i != k))
            else:
                changed = ({kp} | {i for i in range(kp + 1, k + 1)} | set(by_user.get(kp, []))
                           | set(by_user.get(k, [])))
                delta = {}
                for i in sorted(changed & present_set):
                    new = self._alloc(i, k) if i != k else {}
                    old = self._alloc(i, kp) if i != kp else {}
                    delta = add(delta, add(new, neg(old), scale=float(size[i])))
            level = add(u_prev, delta)
            row = add(level, add(b.expr("R", t, k), scale=float(size[k] + g.nodes[k].workspace_bytes)))
            model.le(add(row, cap_expr), limit)
            if idx + 1 < len(self.can_run):
                u = model.var(f"U[{t},{k}]", "bytes", 0.0, ub_bytes)
                model.add(add(level, {u: -1.0}), 0.0, 0.0)
                b.define(u, "eq", [level])
                u_prev = {u: 1.0}
            kp = k


def _add_point_row(b: Built, t: int, present: list[int], hold: dict[int, Expr], limit: float,
                   cap_expr: Expr) -> None:
    """The memory at stage ``t``'s own compute point only: ``t``'s output and workspace,
    its inputs, and every earlier tensor held into the next stage (or in transfer). Each
    term is allocated there in any schedule, so the row is implied by the stage's rows."""
    g = b.problem.graph
    row: Expr = {}
    const = float(g.nodes[t].output_bytes + g.nodes[t].workspace_bytes)
    for i in present:
        if t in g.consumers[i]:
            const += g.nodes[i].output_bytes
        else:
            row = add(row, add(hold[i], scale=float(g.nodes[i].output_bytes)))
    b.model.le(add(row, cap_expr), limit - const)


def build_fast(problem: Problem, *, objective: str = "energy", budget: int | None = None,
               restriction: Restriction | None = None, full_stages: StageFilter | None = None,
               hint: Schedule | None = None, floor: float | None = None) -> Built:
    """Build the fast formulation. ``objective="ram"`` minimizes the RAM budget itself;
    ``restriction`` builds the sub-problem it names (see :class:`Restriction`); ``hint``
    and ``floor``: its start and objective floor (:func:`~.common.seed`)."""
    g = problem.graph
    model = LinearModel()
    one = model.var("ONE", "bin", 1.0, 1.0)
    b = Built(problem=problem, model=model, one=one)
    _create_variables(b, useful_table(problem, restriction), restriction)
    if restriction is not None:
        for i in restriction.keep:
            for t in range(i + 1, max(g.consumers[i], default=i) + 1):
                v = b.S_RAM.get((t, i))
                if v is not None:
                    model.lb[v] = 1.0
    add_state_rules(b)
    _add_dominance_rules(b)
    if objective == "ram":
        cap = sum(node.output_bytes + node.workspace_bytes for node in g.nodes)
        b.budget_var = model.var("BUDGET", "bytes", 0.0, float(cap))
    cap_expr: Expr = {b.budget_var: -1.0} if b.budget_var is not None else {}
    limit = 0.0 if b.budget_var is not None else float(problem.activation_budget if budget is None else budget)
    _add_memory(b, limit, cap_expr, full_stages)
    add_time_and_energy(b, objective="none" if objective == "ram" else objective)
    if objective == "ram":
        assert b.budget_var is not None
        model.objective, model.objective_unit = {b.budget_var: 1.0}, "B"
    return seed(b, hint, floor)


def canonical(problem: Problem, schedule: Schedule) -> Schedule:
    """``schedule`` without the dominated choices the fast formulation forbids.

    Removes (latest stage first, so a removal can expose the next): page-ins not kept,
    recomputes and residencies nothing reads that are not kept (or paged out), then
    page-outs never paged back in, page-outs of tensors already on flash, and flash
    residency after the last page-in. Memory, time and energy never increase, so a
    feasible warm start stays feasible.
    """
    s = schedule.copy()
    if problem.synchronous:
        _defer_unread_page_ins(problem, s)
    while True:     # removals can expose others (a page-out dropped frees its residency)
        before = s.copy()
        _drop_unread(problem, s)
        _drop_useless_paging(s)
        if s == before:
            return s


def _defer_unread_page_ins(problem: Problem, s: Schedule) -> None:
    """Without DMA, a page-in nothing reads in its stage becomes the same page-in in the
    next stage (if kept into it; dropped otherwise): same energy and time, no more RAM.
    This turns the stage-long prefetches of DMA-style schedules (heuristics) into the
    synchronous page-ins the fast model allows."""
    n = problem.n
    cons = problem.graph.consumers
    for t in range(n):
        for i in map(int, np.flatnonzero(s.M_in[t])):
            if any(s.R[t, c] for c in cons[i] if c <= t):
                continue
            s.M_in[t, i] = False
            if t + 1 < n and s.S_RAM[t + 1, i]:
                s.S_RAM[t + 1, i] = False
                s.M_in[t + 1, i] = True
                s.S_AUX[t + 1, i] = True
                s.M_out[t + 1, i] = False   # already on flash


def _drop_unread(problem: Problem, s: Schedule) -> None:
    n = problem.n
    cons = problem.graph.consumers
    sync = problem.synchronous
    for t in range(n - 1, -1, -1):
        for i in range(t - 1, -1, -1):
            keep = bool(s.S_RAM[t + 1, i]) if t + 1 < n else False
            read = any(s.R[t, c] for c in cons[i] if c <= t)
            if s.M_in[t, i] and not (read if sync else keep):
                s.M_in[t, i] = False
            if s.R[t, i] and not read and not keep and not (sync and s.M_out[t, i]):
                s.R[t, i] = False
            if s.S_RAM[t, i] and not read and not keep and not s.M_out[t, i]:
                s.S_RAM[t, i] = False


def _drop_useless_paging(s: Schedule) -> None:
    n = s.n
    for i in range(n):
        ins = np.nonzero(s.M_in[:, i])[0]
        last_in = int(ins[-1]) if len(ins) else -1
        on_flash = False
        for t in range(n):
            if t >= last_in or on_flash:
                s.M_out[t, i] = False
            s.S_AUX[t, i] = on_flash and t <= last_in
            on_flash = on_flash or bool(s.M_out[t, i])
