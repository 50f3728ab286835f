"""Paging time that outlasts its stage: the cover's term for stage-long transfers.

With stage-long transfers (docs/model.md: DMA where time matters) stage ``s`` takes
``max(C_s, X_s)``, its computes or its transfers, whichever is longer, and static power
runs for all of it. The cover (:mod:`.cover`) charged a DMA transfer no time at all. On
the a72 grid that time was most of what the bound missed: on ResNet-18-CIFAR 30 % 1.5x
the schedule's stages outlasted their computes by 0.156 s (0.42 J of its 1.24 J over
compute-once): 4 MiB page-outs of 0.171 s in 0.151 s conv stages, and one page-in in a
0.017 s stage. A transfer hides behind a long compute only if its tensor stays in RAM
through that compute's stage, and that RAM is what the cover's rows count.

What every stage-long schedule of the family must pay (the cover's points are the first
computes; point ``t`` is in stage ``t``, whose compute is at least node ``t``'s, ``c_t``):

- a page-out of ``i`` runs in a stage ``s >= i + 1`` with ``i`` in RAM all through it. If
  ``i`` is out of RAM at point ``t`` and comes back by a page-in, the copy it reads was
  written in a stage ``s < t``: that stage outlasts its compute by at least
  ``min over s in [i + 1, t - 1] of (X_out - c_s)+``, and no page-out is possible before
  point ``i + 1``;
- the page-in holds RAM through its stage and is read from the next one, so it runs in a
  stage after the last point where ``i`` is out and before the reader ``c``: at least
  ``min over s in [t + 1, c - 1] of (X_in - c_s)+``, and not at all if ``t = c - 1``;
- transfers in one stage add up, and ``(a + b - c)+ >= (a - c)+ + (b - c)+``, so these
  excesses add up across tensors and gaps (one page-out per tensor is counted: the
  first; one page-in per gap);
- recomputes in a stage lengthen its compute and so hide transfers, but the cover
  charges their static time already: ``T >= T0 + max(R, E)`` (``R`` the recompute time,
  ``E`` the summed excess), so what is added is ``static_w * max(0, E - R)``, and ``E``
  counts against the deadline's slack as ``R`` does.

The bound holds for the family the optimizer searches with stage-long transfers, not for
every program (a program may overlap a transfer with the computes of several stages):
the full model's bound there is a bound of the same family.

Each minimum above changes at a few points only (the long computes), so the model gets a
chain of literals per tensor (page-outs) and per gap (page-ins), one per change.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from poet_compiler.solve.problem import Problem

# A point's requirement for a tensor to be out of RAM there by paging: IMPOSSIBLE, or a
# literal that must hold (the page-out before it, the page-in after it), or None.
IMPOSSIBLE = "impossible"


def applies(problem: Problem) -> bool:
    """Stage-long transfers whose time costs something (static power or a deadline)."""
    return (problem.allows_paging and not problem.synchronous
            and (problem.costs.static_w > 0 or problem.deadline_s is not None))


def _excess(x: float, c: float) -> float:
    return max(0.0, x - c)


@dataclass
class StageExposure:
    """The exposure literals and terms of one cover model (``m``, a CP-SAT model).

    ``page_out_of(i)`` is the model's page-out literal of tensor ``i``; ``terms`` collects
    (literal, seconds) pairs whose sum is a lower bound on the summed excess ``E``."""

    problem: Problem
    m: Any
    page_out_of: Callable[[int], Any]
    terms: list[tuple[Any, float]] = field(default_factory=list)
    _out: dict[int, dict[int, Any]] = field(default_factory=dict)

    def out_requirement(self, i: int, t: int) -> Any:
        """What tensor ``i`` out of RAM by paging at point ``t`` needs of its page-out."""
        if i not in self._out:
            self._out[i] = self._out_chain(i)
        return self._out[i].get(t)

    def _out_chain(self, i: int) -> dict[int, Any]:
        """Per point ``t``: the literal "i was paged out before t" where that costs more
        than paging it out at all, IMPOSSIBLE at ``i + 1``. The literals form a chain
        (paged out before a point: before every later one)."""
        c = self.problem.costs
        cs, x = c.compute_s, c.page_out_s[i]
        last = max(self.problem.graph.consumers[i])
        stages = range(i + 1, last)
        floor_s = min((_excess(x, cs[s]) for s in stages), default=0.0)
        req: dict[int, Any] = {}
        segments: list[tuple[float, Any]] = []       # (excess, literal), excess decreasing
        best = math.inf
        for t in range(i + 1, last):
            if t > i + 1:
                best = min(best, _excess(x, cs[t - 1]))
            if best == math.inf:
                req[t] = IMPOSSIBLE
            elif best > floor_s:
                if not segments or segments[-1][0] != best:
                    segments.append((best, self.m.new_bool_var(f"po[{i},{t}]")))
                req[t] = segments[-1][1]
        y = self.page_out_of(i)
        if floor_s > 0:
            self.terms.append((y, floor_s))
        for k, (value, lit) in enumerate(segments):
            following = segments[k + 1] if k + 1 < len(segments) else (floor_s, y)
            self.m.add_implication(lit, following[1])
            self.terms.append((lit, value - following[0]))
        return req

    def in_requirements(self, i: int, reader: int, points: range, page: Any) -> dict[int, Any]:
        """Per point ``t`` of the gap before ``reader``: what ``i`` out of RAM there by
        paging (the gap's page option ``page``) needs of the page-in that brings it back."""
        c = self.problem.costs
        cs, x = c.compute_s, c.page_in_s[i]
        stages = range(max(points.start, i + 2), reader)
        base = min((_excess(x, cs[s]) for s in stages), default=math.inf)
        if base == math.inf:
            return dict.fromkeys(points, IMPOSSIBLE)
        if base > 0:
            self.terms.append((page, base))
        req: dict[int, Any] = {}
        segments: list[tuple[float, Any]] = []       # (excess, literal), excess increasing
        after = math.inf
        for t in reversed(points):
            if t + 1 < reader:
                after = min(after, _excess(x, cs[t + 1]))
            if after == math.inf:
                req[t] = IMPOSSIBLE
            elif after > base:
                if not segments or segments[-1][0] != after:
                    segments.append((after, self.m.new_bool_var(f"pi[{i},{reader},{t}]")))
                req[t] = segments[-1][1]
        # segments run from the reader back: each one's literal ("out at a point of it or
        # later") implies the one before it in time, down to the page option itself.
        for k, (value, lit) in enumerate(segments):
            earlier = segments[k + 1] if k + 1 < len(segments) else (base, page)
            self.m.add_implication(lit, earlier[1])
            self.terms.append((lit, value - earlier[0]))
        return req

    def add_costs(self, cost: list[tuple[Any, int]], busy: list[tuple[Any, float]], e_scale: float,
                  time_terms_row: Callable[[list[tuple[Any, int]]], None], t_scale: float) -> None:
        """Charge ``static_w * max(0, E - R)`` (``busy``: the recompute literals whose
        static time the cover charges already, with their seconds) and put ``E`` against
        the deadline's slack (``time_terms_row``). Rounded so that the bound stays valid."""
        if not self.terms:
            return
        time_terms_row([(lit, math.floor(s * t_scale)) for lit, s in self.terms])
        sw = self.problem.costs.static_w
        if sw <= 0:
            return
        gain = [(lit, math.floor(sw * s * e_scale)) for lit, s in self.terms]
        spent = [(lit, math.ceil(sw * s * e_scale)) for lit, s in busy]
        w = self.m.new_int_var(0, sum(k for _, k in gain), "exposure")
        self.m.add(w >= sum(k * lit for lit, k in gain) - sum(k * lit for lit, k in spent))
        cost.append((w, 1))
