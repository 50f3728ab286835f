"""DTR-like online eviction (Kirisame et al., "Dynamic Tensor Rematerialization", 2021).

The strategy *executes* the step in stage order under the activation budget and emits
the Program (COMPUTE and FREE only; the simulator judges it). Before each computation it
makes the inputs resident (an evicted input is recomputed on demand, recursively), then
evicts until the output and workspace fit. The victim minimizes DTR's ``h = cost / (bytes
* staleness)``: ``cost`` is the tensor's compute time plus that of its evicted inputs
(DTR's local "evicted neighbourhood"), ``staleness`` the time since its last use on a
clock that advances by compute time. The inputs of a computation under way are locked;
pinned tensors are never evicted (they cannot be recomputed). A tensor is freed for good
once no future computation can need it: none of its consumers is still to be computed
for the first time, and no evicted tensor that may still be needed reads it.

DTR knows nothing of paging or deadlines: it needs recomputation, and a plan that misses
the deadline is reported infeasible.
"""

from __future__ import annotations

from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schedule.program import Instruction, Op, Program
from poet_compiler.solve.baselines._common import Trial, heuristic
from poet_compiler.solve.result import Result

# An eviction heuristic can thrash (recompute what it just evicted, recursively): a run
# that has emitted more than this many COMPUTEs per node reports failure instead. A
# schedule that computes every node this many times over costs more than any warm start
# worth having; a 1,000-node random layered DAG at 90 % never returned without it.
MAX_COMPUTES_PER_NODE = 8


class EvictionFailed(Exception):
    """Nothing evictable is left and the next allocation still does not fit, or the run
    thrashed past its work bound (MAX_COMPUTES_PER_NODE)."""


class EvictingRun:
    """One execution of the step under a RAM limit: recompute on demand, evict by
    :meth:`victim` (DTR's rule here)."""

    def __init__(self, graph: TrainingGraph, compute_s: tuple[float, ...], budget: int) -> None:
        self.g = graph
        self.cost = compute_s
        self.budget = budget
        self.size = [node.output_bytes for node in graph.nodes]
        self.work = [node.workspace_bytes for node in graph.nodes]
        self.ram: set[int] = set()
        self.locked: dict[int, int] = {}
        self.last_use: dict[int, float] = {}
        self.live = 0
        self.clock = 0.0
        self.stage = 0          # the node whose first compute is under way
        self.out: list[Instruction] = []
        self.computes = 0

    def needed(self, t: int) -> list[bool]:
        """``needed[i]``: tensor ``i`` may still be read once stage ``t`` has started."""
        need = [False] * self.g.n
        for i in range(self.g.n - 1, -1, -1):   # a reader still to compute, or evicted but still needed
            need[i] = any(c >= t or (need[c] and c not in self.ram) for c in self.g.consumers[i])
        return need

    def free_dead(self, t: int) -> None:
        need = self.needed(t)
        for i in sorted(self.ram):
            if not need[i] and i not in self.locked:
                self._free(i)

    def _free(self, i: int) -> None:
        self.ram.discard(i)
        self.live -= self.size[i]
        self.out.append(Instruction(Op.FREE, i))

    def _score(self, i: int) -> float:
        cost = self.cost[i] + sum(self.cost[j] for j in set(self.g.nodes[i].inputs) if j not in self.ram)
        stale = self.clock - self.last_use.get(i, 0.0) + 1e-12
        return cost / (max(1, self.size[i]) * stale)

    def victim(self, candidates: list[int]) -> int:
        """The tensor to evict next, of the resident ones that are neither locked nor
        pinned (non-empty). Subclasses change the rule here (:mod:`.belady`)."""
        return min(candidates, key=lambda i: (self._score(i), i))

    def make_room(self, need_bytes: int) -> None:
        while self.live + need_bytes > self.budget:
            candidates = [i for i in self.ram if i not in self.locked and not self.g.nodes[i].pinned]
            if not candidates:
                raise EvictionFailed(f"cannot fit {need_bytes} more bytes under {self.budget} with "
                                     f"{self.live} bytes locked or pinned")
            self._free(self.victim(candidates))

    def materialize(self, k: int) -> None:
        """Compute ``k`` (recomputing evicted inputs first), evicting to make room."""
        inputs = self.g.nodes[k].inputs
        # Lock the resident inputs first, so rematerializing a missing one cannot evict them.
        for i in inputs:
            if i in self.ram:
                self.locked[i] = self.locked.get(i, 0) + 1
        for i in inputs:
            if i not in self.ram:
                if self.g.nodes[i].pinned:   # (inputs come first: every other one was computed)
                    raise EvictionFailed(f"input {i} of node {k} is gone and cannot be recomputed")
                self.materialize(i)
                self.locked[i] = self.locked.get(i, 0) + 1
        self.make_room(self.size[k] + self.work[k])
        self.computes += 1
        if self.computes > MAX_COMPUTES_PER_NODE * self.g.n:
            raise EvictionFailed(f"more than {MAX_COMPUTES_PER_NODE} computes per node (the eviction thrashes)")
        self.out.append(Instruction(Op.COMPUTE, k))
        self.ram.add(k)
        self.live += self.size[k]
        self.clock += self.cost[k]
        self.last_use[k] = self.clock
        for i in self.g.nodes[k].inputs:
            self.last_use[i] = self.clock
            self.locked[i] -= 1
            if not self.locked[i]:
                del self.locked[i]

    def execute(self) -> Program:
        """Run every node in order; the Program executed. Raises EvictionFailed."""
        for t in range(self.g.n):
            self.stage = t
            self.free_dead(t)
            self.materialize(t)
        self.free_dead(self.g.n)
        return Program(n_nodes=self.g.n, instructions=tuple(self.out))


def run_or_why(run: EvictingRun) -> Program | str:
    """The Program ``run`` executes, or why it failed."""
    try:
        return run.execute()
    except EvictionFailed as exc:
        return str(exc)
    except RecursionError:   # recomputing an input recursively, deeper than Python allows
        return "its chain of recomputes is too deep"


@heuristic("dtr", remat=True)
def dtr(trial: Trial) -> Result:
    problem = trial.problem
    program = run_or_why(EvictingRun(problem.graph, problem.costs.compute_s, problem.activation_budget))
    if isinstance(program, str):
        return trial.infeasible(f"online eviction failed: {program}")
    return trial.finish(program, note=f"{program.n_recompute} recomputations by online eviction")
