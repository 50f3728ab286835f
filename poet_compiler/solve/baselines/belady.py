"""Offline eviction: DTR's execution with the future known (Belady's rule, DTR's cost).

DTR (:mod:`.dtr`) runs online and so ranks a tensor by the time since its last use. A
compiler sees the whole step: this strategy runs the same execution (nodes in order,
evicted inputs recomputed on demand) and evicts the tensor read again the latest for
what its eviction costs:

- *next use*: the first compute still to come of one of its readers, or the next use of
  an evicted reader that is still needed (its recompute reads it);
- *cost*: DTR's evicted neighbourhood — its own compute time plus that of the evicted
  tensors its recompute needs first and of the evicted readers whose recompute now
  needs it too (at most ``Tuning.neighbourhood_cap`` nodes, solve/tuning.py).

Both rules run and the cheaper Program that meets the budgets is kept: ``cost``, least
``cost / (bytes * stages to next use)``; ``net``, the same over the bytes freed net of the
resident inputs whose life it extends (the recompute reads them later), with any victim
that extends a chain (an evicted input, or an evicted reader still needed) or frees
nothing net last. Why both: on random layered DAGs the first avoids online DTR's long
chains of recomputes (100 nodes at 80 % of the peak: 310 J against DTR's 1,706 J; optimum
near 269 J), and the second fits where chains lock everything (500 and 1,000 nodes at
80 %, where DTR and the first rule find nothing). BENCHMARKS.md, "Optimizer grid".
"""

from __future__ import annotations

import math

from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schedule.program import Program
from poet_compiler.solve.baselines._common import Trial, heuristic
from poet_compiler.solve.baselines.dtr import EvictingRun, run_or_why
from poet_compiler.solve.problem import feasible_energy
from poet_compiler.solve.result import Result
from poet_compiler.solve.tuning import TUNING

RULES = ("cost", "net")


class _OfflineRun(EvictingRun):
    """DTR's execution (:class:`EvictingRun`) with :meth:`victim` chosen by ``rule``."""

    def __init__(self, graph: TrainingGraph, compute_s: tuple[float, ...], budget: int, rule: str) -> None:
        super().__init__(graph, compute_s, budget)
        self.rule = rule
        # next_uses() as of len(self.out) == _next_at: one scan per make_room, not per
        # victim; between victims only the evicted tensor's inputs are updated (its own
        # evicted inputs' inputs wait for the next scan: an approximation of the rule).
        self._next: list[float] = []
        self._next_at = -1

    def next_uses(self) -> list[float]:
        """``next[i]``: the stage at which tensor ``i`` is read next (inf: never again)."""
        t, g = self.stage, self.g
        nxt = [math.inf] * g.n
        for i in range(g.n - 1, -1, -1):   # a reader still to come reads it then; an evicted one, when next used
            nxt[i] = min((c if c >= t else nxt[c] for c in g.consumers[i] if c >= t or c not in self.ram),
                         default=math.inf)
        return nxt

    def neighbourhood_cost(self, i: int, nxt: list[float]) -> float:
        """Compute time of ``i``, its evicted ancestors and its evicted, still-needed
        descendants (the recomputes that evicting ``i`` makes longer)."""
        g, ram = self.g, self.ram
        seen = {i}
        for edges, keep in ((lambda x: g.nodes[x].inputs, lambda j: True),
                            (lambda x: g.consumers[x], lambda j: j < self.stage and nxt[j] < math.inf)):
            stack = [i]
            while stack and len(seen) < TUNING.neighbourhood_cap:
                x = stack.pop()
                for j in edges(x):
                    if j not in ram and j not in seen and keep(j):
                        seen.add(j)
                        stack.append(j)
        return sum(self.cost[x] for x in seen)

    def victim(self, candidates: list[int]) -> int:
        if self._next_at != len(self.out):
            self._next = self.next_uses()
        nxt = self._next
        g, ram, t = self.g, self.ram, self.stage

        def key(i: int) -> tuple[bool, float, int]:
            dist = nxt[i] - t + 1
            if self.rule == "cost":
                return False, self.neighbourhood_cost(i, nxt) / (max(1, self.size[i]) * dist), i
            chain = any(j not in ram for j in g.nodes[i].inputs) or \
                any(c < t and c not in ram and nxt[c] < math.inf for c in g.consumers[i])
            extended = sum(self.size[j] for j in set(g.nodes[i].inputs) if nxt[j] < nxt[i])
            net = self.size[i] - extended
            return chain or net <= 0, self.neighbourhood_cost(i, nxt) / (max(1, net) * dist), i

        chosen = min(candidates, key=key)
        # Evicting it is the next instruction: its recompute reads its inputs then.
        for j in self.g.nodes[chosen].inputs:
            nxt[j] = min(nxt[j], nxt[chosen])
        self._next_at = len(self.out) + 1
        return chosen


@heuristic("belady", remat=True)
def belady(trial: Trial) -> Result:
    problem = trial.problem
    best: tuple[float, str, Program] | None = None
    failures = []
    for rule in RULES:
        program = run_or_why(_OfflineRun(problem.graph, problem.costs.compute_s, problem.activation_budget, rule))
        if isinstance(program, str):
            failures.append(f"{rule}: {program}")
            continue
        energy = feasible_energy(problem, program)
        if energy is not None and (best is None or energy < best[0]):
            best = (energy, rule, program)
    if best is None:
        why = "; ".join(failures) or "no rule's plan meets the budgets"
        return trial.infeasible(f"offline eviction failed ({why})")
    _, rule, program = best
    return trial.finish(program, note=f"{program.n_recompute} recomputations by offline eviction (rule {rule})")
