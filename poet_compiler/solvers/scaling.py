"""Integer scaling of a :class:`LinearModel` for CP-SAT, which takes integer coefficients only.

Units: bytes are integers already. Times are measured in a unit ``u_t`` and energies in
``u_e``. When every figure is a multiple of ``10^-d`` (costs read from a file with ``d``
decimals), that grid is used and the scaling is exact; otherwise ``u_t`` is the largest
possible step time over ``2^40`` and ``u_e`` the largest possible energy over ``2^32``.
After scaling, objective coefficients are divided by their GCD.

Rounding and its error:
- time rows round the binaries' coefficients **down** and the right-hand side down: every
  schedule that meets the real deadline meets the scaled one; a schedule accepted by the
  scaled rows exceeds the real deadline by at most ``(number of ops) * u_t`` (about
  ``1e-8`` relative on a 100-node graph) — the simulator re-checks it with its own
  tolerance;
- energy coefficients are rounded to nearest; the sum of all their rounding errors
  ``err`` (in units of ``u_e``) is subtracted from the solver's bound, so the reported
  lower bound stays valid. Reported energies never come from here: the simulator
  recomputes them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from poet_compiler.solvers.model import LinearModel

_TIME_BITS = 40
_ENERGY_BITS = 32


def _grid(values: list[float], limit: float) -> float | None:
    """The coarsest ``10^-d`` on which every value lies, if the scaled total stays below ``limit``."""
    vals = [abs(v) for v in values if v != 0]
    if not vals:
        return 1.0
    total = sum(vals)
    for d in range(0, 10):
        u = 10.0 ** -d
        if total / u > limit:
            return None
        if all(abs(v / u - round(v / u)) <= 1e-6 for v in vals):
            return u
    return None


@dataclass
class Scaled:
    """The integer model: coefficients per row, objective, domains, and the units."""

    lb: list[int]
    ub: list[int]
    rows: list[tuple[dict[int, int], int | None, int | None]]
    objective: dict[int, int]
    obj_unit: float          # physical value of one objective unit (after GCD division)
    obj_err: float           # max |scaled objective - true/obj_unit| over all solutions
    u_t: float
    u_e: float


def scale_model(model: LinearModel) -> Scaled:
    time_vals: list[float] = []
    energy_vals: list[float] = []
    for r in model.rows:
        if r.kind == "time":
            time_vals += [c for v, c in r.terms.items() if model.kind[v] != "time"]
            if math.isfinite(r.hi):
                time_vals.append(r.hi)
        elif r.kind == "energy":
            energy_vals += [c for v, c in r.terms.items() if model.kind[v] != "energy"]
    if model.objective_unit == "J":
        energy_vals += [c for v, c in model.objective.items() if model.kind[v] != "energy"]
    if model.objective_unit == "s":
        time_vals += [c for v, c in model.objective.items() if model.kind[v] != "time"]
    t_total = sum(abs(v) for v in time_vals) or 1.0
    e_total = sum(abs(v) for v in energy_vals) or 1.0
    u_t = _grid(time_vals, 2.0 ** 50) or t_total / 2.0 ** _TIME_BITS
    u_e = _grid(energy_vals, 2.0 ** 50) or e_total / 2.0 ** _ENERGY_BITS

    def floor_t(x: float) -> int:
        return math.floor(x / u_t + 1e-6)

    lb: list[int] = []
    ub: list[int] = []
    for v in range(model.n_vars):
        k = model.kind[v]
        if k == "time":
            lb.append(0)
            ub.append(math.ceil(model.ub[v] / u_t) + 1)
        elif k == "energy":
            lb.append(0)
            ub.append(math.ceil(model.ub[v] / u_e) + len(model.lb))
        else:
            lb.append(math.ceil(model.lb[v] - 1e-9))
            ub.append(math.floor(model.ub[v] + 1e-9))
    err = 0.0
    rows: list[tuple[dict[int, int], int | None, int | None]] = []
    for r in model.rows:
        lo = None if not math.isfinite(r.lo) else r.lo
        hi = None if not math.isfinite(r.hi) else r.hi
        if r.kind == "exact":
            terms = {v: int(round(c)) for v, c in r.terms.items()}
            rows.append(
                (terms, None if lo is None else math.ceil(lo - 1e-9), None if hi is None else math.floor(hi + 1e-9))
            )
        elif r.kind == "time":
            assert lo is None and hi is not None, "time rows are <= rows"
            terms = {v: (int(round(c)) if model.kind[v] == "time" else floor_t(c)) for v, c in r.terms.items()}
            rows.append((terms, None, floor_t(hi)))
        else:
            terms = {}
            for v, c in r.terms.items():
                if model.kind[v] == "energy":
                    terms[v] = int(round(c))
                else:
                    terms[v] = int(round(c / u_e))
                    err += abs(terms[v] - c / u_e)
            rows.append(
                (terms, None if lo is None else math.ceil(lo / u_e), None if hi is None else math.floor(hi / u_e))
            )
    objective: dict[int, int] = {}
    unit = {"J": u_e, "s": u_t, "B": 1.0}[model.objective_unit]
    for v, c in model.objective.items():
        k = model.kind[v]
        if (model.objective_unit == "J" and k == "energy") or (model.objective_unit == "s" and k == "time"):
            objective[v] = int(round(c))
        elif model.objective_unit == "s":
            objective[v] = floor_t(c)    # down: the scaled time is a lower bound of the real one
        elif model.objective_unit == "J":
            objective[v] = int(round(c / unit))
            err += abs(objective[v] - c / unit)
        else:
            objective[v] = int(round(c))
    g = max(math.gcd(*objective.values()), 1)
    objective = {v: c // g for v, c in objective.items() if c != 0}
    return Scaled(lb=lb, ub=ub, rows=rows, objective=objective, obj_unit=unit * g, obj_err=err / g, u_t=u_t, u_e=u_e)
