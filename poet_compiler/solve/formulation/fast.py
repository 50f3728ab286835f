"""The default formulation: docs/model.md, small and tight.

Same problem as :mod:`.dense`, with fewer variables and a tighter memory accounting.

Variables exist only where they can be non-zero in some optimal schedule:

- ``useful(t, i)``: node ``i`` can still be read at stage ``t`` or later — a consumer
  ``j >= t``, or a consumer ``j < t`` that may itself be recomputed in stage ``t``.
  ``R[t,i]`` (``i < t``) exists only for recomputable (not pinned, has consumers) useful
  nodes, ``S_RAM[t,i]`` only for useful ones: a recompute or a residency nothing can
  read is dropped from any schedule without raising energy, time or memory.
- Paging variables only in modes that page, for nodes that are not pinned: ``M_out[t,i]``
  only if ``i`` can be paged back in a later stage and still be read after that;
  ``S_AUX`` and ``M_in`` only from stage ``i+2`` on (a page-out must come first).
- Dominated choices are forbidden (symmetry breaking): a page-in that is not kept into
  the next stage (it is usable only from there), a page-out of a tensor already on
  flash.

Memory ("last use in stage" accounting, instead of Checkmate's per-edge frees): for each
tensor ``i`` present in stage ``t`` and its consumers ``c_1 < ... < c_m`` that may run in
the stage, a non-increasing chain ``A[t,i,1] >= ... >= A[t,i,m] >= H[t,i]`` with
``A[t,i,r] >= R[t,c_r]``; ``H[t,i]`` (held through the stage) ``>= S_RAM[t+1,i], M_in,
M_out``. At a compute point ``k > i`` the tensor is allocated iff ``A[t,i,r(k)] = 1``
(``r(k)``: first consumer ``>= k``), which is exactly "in RAM and not yet freed after its
last use". Before its own compute point (``k < i``) the tensor occupies RAM only if it
came in resident (or by a page-in) and something needs it: ``B[t,i] >= R[t,c] - R[t,i]``,
``>= S_RAM[t+1,i] - R[t,i]``, ``>= M_in, M_out``. The row at ``(t, k)`` is written for
every ``k`` that may run in stage ``t``; it is also implied at non-compute points by the
next compute point, so it never over-constrains.
"""

from __future__ import annotations

from poet_compiler.solve.formulation.common import (
    Built,
    Expr,
    add,
    add_state_rules,
    add_time_and_energy,
    neg,
)
from poet_compiler.solve.formulation.model import LinearModel
from poet_compiler.solve.problem import Problem


def useful_table(problem: Problem) -> list[list[bool]]:
    """``useful[t][i]`` for ``i < t`` (see the module docstring)."""
    g, n = problem.graph, problem.n
    cons = g.consumers
    remat = problem.allows_remat
    recomputable = [remat and not node.pinned and bool(cons[i]) for i, node in enumerate(g.nodes)]
    useful = [[False] * n for _ in range(n)]
    for t in range(n):
        for i in range(t - 1, -1, -1):
            useful[t][i] = any(j >= t or (recomputable[j] and useful[t][j]) for j in cons[i])
    return useful


def build_fast(problem: Problem, *, objective: str = "energy", budget: int | None = None) -> Built:
    """Build the fast formulation. ``objective="ram"`` minimizes the RAM budget itself."""
    g, n = problem.graph, problem.n
    cons = g.consumers
    model = LinearModel()
    one = model.var("ONE", "bin", 1.0, 1.0)
    b = Built(problem=problem, model=model, formulation="fast", one=one)
    useful = useful_table(problem)
    remat, paging = problem.allows_remat, problem.allows_paging
    pinned = [node.pinned for node in g.nodes]

    for t in range(n):
        for i in range(t):
            if not useful[t][i]:
                continue
            b.S_RAM[(t, i)] = model.var(f"S[{t},{i}]")
            if remat and not pinned[i] and cons[i]:
                b.R[(t, i)] = model.var(f"R[{t},{i}]")
    if paging:
        for i in range(n):
            if pinned[i] or not cons[i]:
                continue
            # S_AUX[t,i]: a page-in at stage t or later is possible (kept into t+1).
            for t in range(i + 2, n - 1):
                if (t + 1, i) in b.S_RAM:
                    b.S_AUX[(t, i)] = model.var(f"X[{t},{i}]")
                    b.M_in[(t, i)] = model.var(f"Min[{t},{i}]")
            for t in range(i + 1, n - 2):
                if (t, i) in b.S_RAM and (t + 1, i) in b.S_AUX:
                    b.M_out[(t, i)] = model.var(f"Mout[{t},{i}]")
    add_state_rules(b)
    # Dominated choices (module docstring).
    for (t, i), v in b.M_in.items():
        model.le(add({v: 1.0}, neg(b.expr("S_RAM", t + 1, i))), 0.0)
    for (t, i), v in b.M_out.items():
        model.le(add({v: 1.0}, b.expr("S_AUX", t, i)), 1.0)

    if objective == "ram":
        cap = sum(node.output_bytes + node.workspace_bytes for node in g.nodes)
        b.budget_var = model.var("BUDGET", "bytes", 0.0, float(cap))
    cap_expr: Expr = {b.budget_var: -1.0} if b.budget_var is not None else {}
    limit = 0.0 if b.budget_var is not None else float(problem.activation_budget if budget is None else budget)

    size = [node.output_bytes for node in g.nodes]
    work = [node.workspace_bytes for node in g.nodes]
    for t in range(n):
        can_run = [k for k in range(t + 1) if k == t or (t, k) in b.R]
        present = [i for i in range(t) if (t, i) in b.S_RAM or (t, i) in b.R or (t, i) in b.M_in]
        # H[t,i]: held through the whole stage (kept, or in transfer).
        hold: dict[int, Expr] = {}
        for i in present:
            lows = [e for e in (b.expr("S_RAM", t + 1, i) if t + 1 < n else {}, b.expr("M_in", t, i),
                                b.expr("M_out", t, i)) if e]
            if not lows:
                hold[i] = {}
            elif len(lows) == 1:
                hold[i] = lows[0]
            else:
                h = model.var(f"H[{t},{i}]")
                for e in lows:
                    model.le(add(e, {h: -1.0}), 0.0)
                hold[i] = {h: 1.0}
        # A chains over the consumers that may run in the stage, last to first.
        chain: dict[int, list[tuple[int, Expr]]] = {}
        for i in present:
            users = [c for c in cons[i] if c in can_run]
            links: list[tuple[int, Expr]] = []
            below = hold[i]
            for c in reversed(users):
                a = model.var(f"A[{t},{i},{c}]")
                model.le(add(b.expr("R", t, c), {a: -1.0}), 0.0)
                if below:
                    model.le(add(below, {a: -1.0}), 0.0)
                below = {a: 1.0}
                links.append((c, below))
            chain[i] = list(reversed(links))
        # B[t,i]: occupies RAM from the stage start, before its own compute point.
        start: dict[int, Expr] = {}
        for i in present:
            if (t, i) not in b.S_RAM and (t, i) not in b.M_in:
                continue
            ri = b.expr("R", t, i)
            lows = [add(b.expr("R", t, c), neg(ri)) for c, _ in chain[i]]
            if t + 1 < n and b.expr("S_RAM", t + 1, i):
                lows.append(add(b.expr("S_RAM", t + 1, i), neg(ri)))
            lows += [e for e in (b.expr("M_in", t, i), b.expr("M_out", t, i)) if e]
            if not lows:
                continue
            bv = model.var(f"B[{t},{i}]")
            for e in lows:
                model.le(add(e, {bv: -1.0}), 0.0)
            start[i] = {bv: 1.0}
        for k in can_run:
            row: Expr = add(b.expr("R", t, k), scale=float(size[k] + work[k]))
            for i in present:
                if i == k:
                    continue
                if i < k:
                    e = next((ex for c, ex in chain[i] if c >= k), hold[i])
                else:
                    e = start.get(i, {})
                if e:
                    row = add(row, add(e, scale=float(size[i])))
            model.le(add(row, cap_expr), limit)

    add_time_and_energy(b, objective="none" if objective == "ram" else objective)
    if objective == "ram":
        model.objective, model.objective_unit = {b.budget_var: 1.0}, "B"
    return b
