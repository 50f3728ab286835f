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
  ``min over s in [i + 1, t - 1] of (X_out - c_s)+``, and paging cannot take ``i`` out
  of RAM at point ``i + 1``;
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
    return problem.allows_paging and not problem.synchronous and problem.time_matters


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
        (paged out before a point: before every later one) down to the page-out itself."""
        c = self.problem.costs
        x = c.page_out_s[i]
        last = max(self.problem.graph.consumers[i])
        floor_s = min((_excess(x, c.compute_s[s]) for s in range(i + 1, last)), default=0.0)
        y = self.page_out_of(i)
        if floor_s > 0:
            self.terms.append((y, floor_s))
        # The page-out runs in a stage before t: the least excess over [i + 1, t - 1].
        points = range(i + 1, last)
        return self._chain(points, [t - 1 if t - 1 > i else None for t in points], x, floor_s, y, f"po[{i},")

    def in_requirements(self, i: int, reader: int, points: range, page: Any) -> dict[int, Any]:
        """Per point ``t`` of the gap before ``reader``: what ``i`` out of RAM there by
        paging (the gap's page option ``page``) needs of the page-in that brings it back."""
        c = self.problem.costs
        x = c.page_in_s[i]
        base = min((_excess(x, c.compute_s[s]) for s in range(max(points.start, i + 2), reader)), default=math.inf)
        if base == math.inf:
            return dict.fromkeys(points, IMPOSSIBLE)
        if base > 0:
            self.terms.append((page, base))
        # The page-in runs in a stage after t: the least excess over [t + 1, reader - 1].
        back = range(points.stop - 1, points.start - 1, -1)
        return self._chain(back, [t + 1 if t + 1 < reader else None for t in back], x, base, page,
                           f"pi[{i},{reader},")

    def _chain(self, points: range, stages: list[int | None], x: float, base: float, anchor: Any,
               name: str) -> dict[int, Any]:
        """Walk ``points`` in order; each adds its stage of ``stages`` (None: none) to those
        a transfer of ``x`` seconds may run in, and the least excess so far is what the
        transfer costs at the least for that point. Before any stage: IMPOSSIBLE. Points
        whose least excess is above ``base`` get a literal per distinct value; each implies
        the next (looser) one, the last ``anchor`` (the transfer at all, charged ``base``),
        and each is charged its excess over the next."""
        cs = self.problem.costs.compute_s
        req: dict[int, Any] = {}
        segments: list[tuple[float, Any]] = []       # (excess, literal), excess decreasing
        least = math.inf
        for t, s in zip(points, stages, strict=True):
            if s is not None:
                least = min(least, _excess(x, cs[s]))
            if least == math.inf:
                req[t] = IMPOSSIBLE
            elif least > base:
                if not segments or segments[-1][0] != least:
                    segments.append((least, self.m.new_bool_var(f"{name}{t}]")))
                req[t] = segments[-1][1]
        for k, (value, lit) in enumerate(segments):
            looser = segments[k + 1] if k + 1 < len(segments) else (base, anchor)
            self.m.add_implication(lit, looser[1])
            self.terms.append((lit, value - looser[0]))
        return req

    def add_static_cost(self, cost: list[tuple[Any, int]], busy: list[tuple[Any, float]], e_scale: float) -> None:
        """Charge ``static_w * max(0, E - R)`` (``busy``: the recompute literals whose
        static time the cover charges already, with their seconds), rounded so that the
        bound stays valid. (``E`` against the deadline's slack is the cover's row.)"""
        sw = self.problem.costs.static_w
        if not self.terms or sw <= 0:
            return
        gain = [(lit, math.floor(sw * s * e_scale)) for lit, s in self.terms]
        spent = [(lit, math.ceil(sw * s * e_scale)) for lit, s in busy]
        w = self.m.new_int_var(0, sum(k for _, k in gain), "exposure")
        self.m.add(w >= sum(k * lit for lit, k in gain) - sum(k * lit for lit, k in spent))
        cost.append((w, 1))
