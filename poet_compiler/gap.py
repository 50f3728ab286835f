"""Relative optimality gaps, shared by the backends, the search and the status line."""

from __future__ import annotations


def within_gap(incumbent: float, bound: float, gap: float) -> bool:
    """``incumbent`` is proven within relative ``gap`` of optimal by ``bound``."""
    return incumbent - bound <= gap * abs(incumbent)


def relative_gap(objective: float | None, bound: float | None) -> float | None:
    if objective is None or bound is None:
        return None
    if objective <= 0:
        return 0.0 if bound >= objective - 1e-12 else None
    return max(0.0, (objective - bound) / abs(objective))
