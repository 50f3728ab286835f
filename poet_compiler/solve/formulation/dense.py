"""The reference formulation: POET's MILP as published (Checkmate's memory accounting),
with the physical corrections of docs/model.md.

Every matrix is a full ``n x n`` block of binaries (entries that the model forbids — the
upper triangle, recomputation or paging outside the mode, pinned nodes — are fixed to
0 by their bounds, ``R[t,t]`` to 1). Memory follows Checkmate: ``U[t,k]``, the bytes in
use right after computing ``k`` in stage ``t``, by the recursion

``U[t,0] = m_0 R[t,0] + sum_i m_i S_RAM[t,i] + sum_i m_i M_in[t,i]``
``U[t,k] = U[t,k-1] - sum_{i in inputs(k-1) + {k-1}} m_i FREE[t,i,k-1] + m_k R[t,k]``

with ``U[t,k] + w_k R[t,k] <= budget``, and one ``FREE[t,i,k]`` per stage and per edge
(and per node for its own output): ``FREE = R[t,k] * (1 - S_RAM[t+1,i]) * (1 - M_out[t,i])
* prod_{j in users(i), k < j <= t} (1 - R[t,j])``, linearized as in Checkmate
(``FREE <= R[t,k]``, ``num_hazards * (1 - FREE) >= sum hazards``, ``FREE + sum hazards >=
R[t,k]``). Corrections: a page-in occupies its RAM for the whole stage (it enters
``U[t,0]`` and is never freed within the stage); a page-out holds its source until the
stage ends (it is a hazard of FREE); time counts paging (common rules).

One deliberate difference from our exact accounting: a tensor resident at stage start
that nothing reads, keeps or pages out stays counted (Checkmate never frees it). Such a
residency can always be dropped without any other change, so the optimum is the same.
"""

from __future__ import annotations

from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.formulation.common import (
    Built,
    Expr,
    add,
    add_state_rules,
    add_time_and_energy,
    neg,
    seed,
)
from poet_compiler.solve.problem import Problem
from poet_compiler.solvers.model import LinearModel


def build_dense(problem: Problem, *, budget: int | None = None, hint: Schedule | None = None,
                floor: float | None = None) -> Built:
    """The dense formulation (docs/model.md), minimizing energy; ``hint`` and ``floor``: its
    start and objective floor (:func:`~.common.seed`)."""
    g, n = problem.graph, problem.n
    cons = g.consumers
    model = LinearModel()
    one = model.var("ONE", "bin", 1.0, 1.0)
    b = Built(problem=problem, model=model, one=one)
    remat, paging = problem.allows_remat, problem.allows_paging
    sync = problem.synchronous
    for t in range(n):
        for i in range(n):
            pinned = g.nodes[i].pinned
            # A reader of a parameter is not recomputed after its update (docs/training.md).
            r_ub = 1.0 if (i == t or (i < t and remat and not pinned and t <= g.last_compute_stage[i])) else 0.0
            b.R[(t, i)] = model.var(f"R[{t},{i}]", "bin", 1.0 if i == t else 0.0, r_ub)
            b.S_RAM[(t, i)] = model.var(f"S[{t},{i}]", "bin", 0.0, 1.0 if i < t else 0.0)
            page_ub = 1.0 if (i < t and paging and not pinned) else 0.0
            b.S_AUX[(t, i)] = model.var(f"X[{t},{i}]", "bin", 0.0, page_ub)
            b.M_in[(t, i)] = model.var(f"Min[{t},{i}]", "bin", 0.0, page_ub)
            b.M_out[(t, i)] = model.var(f"Mout[{t},{i}]", "bin", 0.0, page_ub)
    add_state_rules(b)

    limit = float(problem.activation_budget if budget is None else budget)
    size = [node.output_bytes for node in g.nodes]
    work = [node.workspace_bytes for node in g.nodes]
    cap_total = float(sum(size))
    for t in range(n):
        R = lambda i: {b.R[(t, i)]: 1.0}  # noqa: E731
        free: dict[tuple[int, int], int] = {}
        for k in range(t + 1):
            for i in sorted(set(g.nodes[k].inputs) | {k}):
                f = model.var(f"FREE[{t},{i},{k}]")
                free[(i, k)] = f
                hazards: list[Expr] = [R(j) for j in cons[i] if k < j <= t]
                if t + 1 < n:
                    hazards.append({b.S_RAM[(t + 1, i)]: 1.0})
                if not sync:
                    hazards.append({b.M_out[(t, i)]: 1.0})
                model.le(add({f: 1.0}, neg(R(k))), 0.0)
                model.le(add(*hazards, {f: float(len(hazards))}), float(len(hazards)))
                model.ge(add({f: 1.0}, *hazards, neg(R(k))), 0.0)
        U_prev: int | None = None
        for k in range(t + 1):
            u = model.var(f"U[{t},{k}]", "bytes", 0.0, cap_total)
            row: Expr = {u: -1.0, b.R[(t, k)]: float(size[k])}
            if sync:
                # A synchronous page-in enters right before its first reader k:
                # PIN >= M_in + R[t,k] - 1 - (readers before k).
                for i in sorted(set(g.nodes[k].inputs)):
                    if model.ub[b.M_in[(t, i)]] == 0.0:
                        continue
                    earlier = add(*({b.R[(t, j)]: 1.0} for j in cons[i] if j < k))
                    low = add({b.M_in[(t, i)]: 1.0, b.R[(t, k)]: 1.0, one: -1.0}, neg(earlier))
                    pin = model.var(f"PIN[{t},{i},{k}]")
                    model.le(add(low, {pin: -1.0}), 0.0)
                    b.define(pin, "max", [low])
                    row = add(row, {pin: float(size[i])})
            if k == 0:
                for i in range(n):
                    row = add(row, {b.S_RAM[(t, i)]: float(size[i])})
                    if not sync:
                        row = add(row, {b.M_in[(t, i)]: float(size[i])})
            else:
                assert U_prev is not None  # set at k - 1
                row = add(row, {U_prev: 1.0})
                for i in sorted(set(g.nodes[k - 1].inputs) | {k - 1}):
                    row = add(row, {free[(i, k - 1)]: -float(size[i])})
            model.add(row, 0.0, 0.0)
            model.le({u: 1.0, b.R[(t, k)]: float(work[k])}, limit)
            U_prev = u
    add_time_and_energy(b)
    return seed(b, hint, floor)
