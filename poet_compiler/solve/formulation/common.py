"""What both formulations share: the decision matrices, the state rules, time and energy.

A :class:`Built` holds the model and, per matrix, a map ``(t, i) -> variable`` for the
entries that exist; a missing entry is the constant 0, except ``R[t,t]`` which is the
constant 1 (the model's fixed ``ONE`` variable). The rules written here are the ones of
docs/model.md that do not depend on how memory is accounted for:

- state: ``S_RAM[t+1,i] <= S_RAM[t,i] + R[t,i] + M_in[t,i]``,
  ``S_AUX[t+1,i] <= S_AUX[t,i] + M_out[t,i]``, ``M_in <= S_AUX``, ``M_in + S_RAM <= 1``;
  ``M_out <= S_RAM`` with DMA (a stage-long transfer of what was resident at stage
  start), ``M_out <= S_RAM + R`` without (a synchronous page-out right after the
  tensor's last use in the stage, also of a tensor recomputed in it);
- dependencies: ``R[t,k] <= R[t,i] + S_RAM[t,i]`` for every edge ``i -> k``, ``k <= t``,
  plus ``+ M_in[t,i]`` without DMA (a synchronous page-in is usable at once);
- validity rules the Program imposes (docs/model.md, Simulator): a resident tensor is not
  recomputed (``R + S_RAM <= 1``) and a tensor is not both computed and paged in in one
  stage (``R + M_in <= 1``) — neither can ever lower the energy, so no optimum is lost;
- time per stage: ``max(C_t, P_t)`` with DMA, ``C_t + P_t`` without; deadline; energy
  objective with static power.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.clock import past_step_deadline
from poet_compiler.solve.problem import Problem
from poet_compiler.solvers.model import LinearModel


class BuildDeadline(Exception):
    """Building a model did not finish by the deadline of
    :func:`~poet_compiler.solve.clock.step_until`."""


def check_build_deadline() -> None:
    """Raise :class:`BuildDeadline` once the deadline of
    :func:`~poet_compiler.solve.clock.step_until` has passed (called once per stage by
    the row-writing loops). The rows are written stage by stage in Python, n^2 pairs
    each: the guided sub-problem of a 1,567-node graph took 28 s to build, past a whole
    20 s time limit, before its solver was even asked."""
    if past_step_deadline():
        raise BuildDeadline


Key = tuple[int, int]
Expr = dict[int, float]
MATRICES = ("R", "S_RAM", "S_AUX", "M_in", "M_out")


@dataclass
class Built:
    """A formulation's model plus the variables of the schedule matrices."""

    problem: Problem
    model: LinearModel
    one: int
    R: dict[Key, int] = field(default_factory=dict)
    S_RAM: dict[Key, int] = field(default_factory=dict)
    S_AUX: dict[Key, int] = field(default_factory=dict)
    M_in: dict[Key, int] = field(default_factory=dict)
    M_out: dict[Key, int] = field(default_factory=dict)
    budget_var: int | None = None      # set when the RAM budget is itself minimized
    time_expr: Expr = field(default_factory=dict)   # total step time (seconds) as a linear expression
    # Auxiliary variables whose value follows from the matrices: ``("max", exprs)`` means
    # the smallest value >= every expression (and >= 0); ``("eq", [expr])`` an equality.
    # Used to complete a warm start, so the solver gets a full feasible assignment.
    defs: dict[int, tuple[str, list[Expr]]] = field(default_factory=dict)

    def define(self, v: int, how: str, exprs: list[Expr]) -> None:
        """Record how auxiliary ``v`` follows from earlier variables (see ``defs``)."""
        self.defs[v] = (how, exprs)

    def expr(self, mat: str, t: int, i: int) -> Expr:
        """The entry as a linear expression: ``{}`` (0), ``{ONE: 1}`` (R[t,t]) or ``{v: 1}``."""
        if mat == "R" and t == i and (t, i) not in self.R:
            return {self.one: 1.0}
        v = getattr(self, mat).get((t, i))
        return {} if v is None else {v: 1.0}

    def schedule(self, values: list[float]) -> Schedule:
        """Read the matrices back from a solution (values rounded to 0/1)."""
        n = self.problem.n
        s = Schedule.empty(n)
        np.fill_diagonal(s.R, True)
        for mat in MATRICES:
            target = getattr(s, mat)
            for (t, i), v in getattr(self, mat).items():
                if values[v] > 0.5:
                    target[t, i] = True
        return s

    def hint_from(self, schedule: Schedule) -> int:
        """Suggest a known schedule as a starting solution: its matrices (entries that
        exist) plus every auxiliary variable of ``defs``, evaluated in creation order.
        Returns the number of schedule entries set to 1 that have no variable here (0
        when the hint is complete)."""
        val: dict[int, float] = {self.one: 1.0}
        missing = 0
        for mat in MATRICES:
            m = getattr(schedule, mat)
            vars_ = getattr(self, mat)
            for (t, i), v in vars_.items():
                val[v] = 1.0 if m[t, i] else 0.0
            for t, i in zip(*np.nonzero(m)):
                if (int(t), int(i)) not in vars_ and not (mat == "R" and t == i):
                    missing += 1
        model = self.model
        for v in sorted(self.defs):
            how, exprs = self.defs[v]
            vals = [sum(c * val.get(u, 0.0) for u, c in e.items()) for e in exprs]
            x = vals[0] if how == "eq" else max([0.0, *vals])
            val[v] = min(max(x, model.lb[v]), model.ub[v])
        for v, x in val.items():
            if v != self.one:
                model.hint[v] = x
        return missing


def seed(b: Built, hint: Schedule | None, floor: float | None) -> Built:
    """``b`` started from ``hint`` (:meth:`Built.hint_from`) and given ``floor``, a valid
    lower bound of its objective known from elsewhere (``LinearModel.objective_floor``):
    the last step of every build."""
    if hint is not None:
        b.hint_from(hint)
    b.model.objective_floor = floor
    return b


def add(*exprs: Expr, scale: float = 1.0) -> Expr:
    out: Expr = {}
    for e in exprs:
        for v, c in e.items():
            out[v] = out.get(v, 0.0) + c * scale
    return out


def neg(e: Expr) -> Expr:
    return {v: -c for v, c in e.items()}


def add_state_rules(b: Built) -> None:
    """Transitions, dependencies and the Program's validity rules (see module docstring)."""
    m, g, n = b.model, b.problem.graph, b.problem.n
    sync = b.problem.synchronous
    for t in range(n):
        check_build_deadline()
        for i in range(t + 1):
            r, s, mi, mo, aux = (b.expr(k, t, i) for k in ("R", "S_RAM", "M_in", "M_out", "S_AUX"))
            if t + 1 < n:
                nxt = b.expr("S_RAM", t + 1, i)
                if nxt:
                    m.le(add(nxt, neg(s), neg(r), neg(mi)), 0.0)
                nxt_aux = b.expr("S_AUX", t + 1, i)
                if nxt_aux:
                    m.le(add(nxt_aux, neg(aux), neg(mo)), 0.0)
            if mo:
                m.le(add(mo, neg(s), neg(r) if sync and i < t else {}), 0.0)
            if mi:
                m.le(add(mi, neg(aux)), 0.0)
                m.le(add(mi, s), 1.0)
                m.le(add(mi, r), 1.0)
            if i < t and r and s:
                m.le(add(r, s), 1.0)
    for t in range(n):
        for k in range(t + 1):
            rk = b.expr("R", t, k)
            if not rk:
                continue
            for i in set(g.nodes[k].inputs):
                arrive = neg(b.expr("M_in", t, i)) if sync else {}
                m.le(add(rk, neg(b.expr("R", t, i)), neg(b.expr("S_RAM", t, i)), arrive), 0.0)


def add_time_and_energy(b: Built, *, objective: str = "energy") -> None:
    """Stage times, the deadline row and the objective.

    ``objective``: "energy" (the problem's), "time" (minimize the step time: used by
    the infeasibility analysis) or "none" (feasibility only / set by the caller).
    Static power ``static_w`` is folded into each compute's (and, with synchronous
    transfers, each transfer's) energy; with stage-long transfers only the paging time
    that outlasts compute costs extra static energy, carried by one variable
    ``Y_t >= static_w (P_t - C_t)`` per stage. Which of the two is ``Problem.overlaps``,
    not the device's DMA alone: the synchronous family on a DMA device where time matters
    waits for each transfer, so its time adds up as without DMA.
    """
    p, m, n = b.problem, b.model, b.problem.n
    c = p.costs
    sw, overlap = c.static_w, p.overlaps
    obj: Expr = {}
    total_time: Expr = {}
    for t in range(n):
        C: Expr = {}
        P: Expr = {}
        E: Expr = {}
        for (tt, i), v in b.R.items():
            if tt == t:
                C[v] = C.get(v, 0.0) + c.compute_s[i]
                E[v] = E.get(v, 0.0) + c.compute_j[i] + sw * c.compute_s[i]
        if (t, t) not in b.R:
            C[b.one] = C.get(b.one, 0.0) + c.compute_s[t]
            E[b.one] = E.get(b.one, 0.0) + c.compute_j[t] + sw * c.compute_s[t]
        for mat, ps, pj in (("M_in", c.page_in_s, c.page_in_j), ("M_out", c.page_out_s, c.page_out_j)):
            for (tt, i), v in getattr(b, mat).items():
                if tt == t:
                    P[v] = P.get(v, 0.0) + ps[i]
                    E[v] = E.get(v, 0.0) + pj[i] + (0.0 if overlap else sw * ps[i])
        obj = add(obj, E)
        if not P or not overlap:
            total_time = add(total_time, C, P)
            continue
        # Stage-long: stage time max(C, P) needs its own variable where paging can happen.
        need_T = p.deadline_s is not None or objective == "time"
        if need_T:
            ub = sum(C.values()) + sum(P.values())
            T = m.var(f"T[{t}]", "time", 0.0, ub)
            m.le(add(C, {T: -1.0}), 0.0, kind="time")
            m.le(add(P, {T: -1.0}), 0.0, kind="time")
            b.define(T, "max", [C, P])
            total_time = add(total_time, {T: 1.0})
        if sw > 0:
            ub = sw * sum(P.values())
            Y = m.var(f"Y[{t}]", "energy", 0.0, ub)
            m.le(add(add(P, neg(C), scale=sw), {Y: -1.0}), 0.0, kind="energy")
            b.define(Y, "max", [add(P, neg(C), scale=sw)])
            obj = add(obj, {Y: 1.0})
    b.time_expr = total_time
    if p.deadline_s is not None:
        m.le(total_time, p.deadline_s * (1 + 1e-9), kind="time")
    if objective == "energy":
        m.objective, m.objective_unit = obj, "J"
    elif objective == "time":
        m.objective, m.objective_unit = dict(total_time), "s"
