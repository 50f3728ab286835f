"""The two formulations of docs/model.md: ``fast`` (default) and ``dense`` (reference)."""

from __future__ import annotations

from poet_compiler.errors import PoetError
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.formulation.common import Built
from poet_compiler.solve.formulation.dense import build_dense
from poet_compiler.solve.formulation.fast import build_fast
from poet_compiler.solve.problem import Problem

FORMULATIONS = ("fast", "dense")


def build(problem: Problem, formulation: str = "fast", *, budget: int | None = None, hint: Schedule | None = None,
          floor: float | None = None) -> Built:
    """Build ``formulation`` for ``problem``, minimizing energy; ``budget`` overrides the
    activation budget of the memory rows (fragmentation retries); ``hint`` and ``floor``:
    its start and objective floor."""
    if formulation == "fast":
        return build_fast(problem, budget=budget, hint=hint, floor=floor)
    if formulation == "dense":
        return build_dense(problem, budget=budget, hint=hint, floor=floor)
    raise PoetError(f"unknown formulation {formulation!r}; known: {', '.join(FORMULATIONS)}")


__all__ = ["FORMULATIONS", "Built", "build", "build_dense", "build_fast"]
