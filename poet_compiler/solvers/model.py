"""A backend-neutral MILP: variables, linear rows and an objective, in physical units.

Formulations build a :class:`LinearModel`; backends translate it. Coefficients stay in
their physical units here (bytes, seconds, joules); every row carries a ``kind`` that
tells an integer-only backend (CP-SAT) how it may round it:

- ``exact``: integer coefficients already (bytes, 0/1 logic) — taken as is;
- ``time``: ``sum a_j x_j + sum T_j <= rhs`` over binaries ``x`` (seconds) and time
  variables ``T`` (coefficient +-1) — the binaries' coefficients are rounded *down*, so
  every schedule that meets the real deadline also meets the scaled one;
- ``energy``: a row over binaries and energy variables that only shapes the objective
  (static power during paging that outlasts compute) — rounded to nearest, with the
  rounding error added to the bound correction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

VarKind = Literal["bin", "time", "energy", "bytes"]
RowKind = Literal["exact", "time", "energy"]
INF = float("inf")


@dataclass
class Row:
    terms: dict[int, float]
    lo: float
    hi: float
    kind: RowKind = "exact"


@dataclass
class LinearModel:
    """Variables are indices into ``lb``/``ub``/``kind``; the objective is minimized."""

    lb: list[float] = field(default_factory=list)
    ub: list[float] = field(default_factory=list)
    kind: list[VarKind] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    objective: dict[int, float] = field(default_factory=dict)
    objective_unit: str = "J"   # "J" (energy), "B" (bytes: min RAM), "s" (seconds: min time)
    hint: dict[int, float] = field(default_factory=dict)
    # A valid lower bound on the objective known from elsewhere (the eviction-cover
    # bound): every backend reports at least it as the bound; HiGHS and Gurobi also stop
    # once an incumbent is within the gap limit of it, CP-SAT does not (solvers/cpsat.py:
    # with several workers that stop would depend on thread timing).
    objective_floor: float | None = None

    @property
    def n_vars(self) -> int:
        return len(self.lb)

    def var(self, name: str, kind: VarKind = "bin", lb: float = 0.0, ub: float = 1.0) -> int:
        self.lb.append(lb)
        self.ub.append(ub)
        self.kind.append(kind)
        self.names.append(name)
        return len(self.lb) - 1

    def add(self, terms: dict[int, float], lo: float = -INF, hi: float = INF, kind: RowKind = "exact") -> None:
        """Add ``lo <= sum terms <= hi``; zero coefficients are dropped."""
        clean = {v: c for v, c in terms.items() if c != 0}
        if not clean:
            if lo > 1e-12 or hi < -1e-12:
                raise ValueError("an empty row that cannot hold was added to the model")
            return
        self.rows.append(Row(clean, lo, hi, kind))

    def le(self, terms: dict[int, float], hi: float, kind: RowKind = "exact") -> None:
        self.add(terms, -INF, hi, kind)

    def ge(self, terms: dict[int, float], lo: float, kind: RowKind = "exact") -> None:
        self.add(terms, lo, INF, kind)

    def stats(self) -> dict[str, int]:
        return {
            "variables": self.n_vars,
            "binaries": sum(1 for k in self.kind if k == "bin"),
            "constraints": len(self.rows),
            "nonzeros": sum(len(r.terms) for r in self.rows),
        }
