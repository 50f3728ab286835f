"""The program-level oracle: an exhaustive search over instruction sequences.

It knows nothing of stages, matrices or formulations. It plays the device: a Program is
any sequence of ``COMPUTE k``, ``PAGE_OUT i``, ``PAGE_IN i``, ``FREE i`` (and ``FENCE``
with DMA), one at a time, and this module searches all of them with Dijkstra over the
device's state. The only facts it uses are what an instruction does to RAM, flash and
the clock (docs/model.md, "Programs"), written here from scratch:

- ``COMPUTE k``: every input of ``k`` is in RAM (and, with DMA, not still arriving);
  ``k`` is not in RAM; allocates ``k``'s output, and for the compute's duration its
  workspace too. A node computed for the first time must be the next one in graph
  order (the one restriction every poetc schedule shares: first computes follow the
  node order); a node computed before is a recompute (modes ``poet``/``remat``, never
  a pinned node).
- ``PAGE_OUT i``: ``i`` in RAM; without DMA the copy is on flash when the instruction
  ends; with DMA when the next ``FENCE`` completes, and ``i`` may not be freed before.
- ``PAGE_IN i``: ``i`` on flash and not in RAM; allocates ``i``'s bytes at once; readable
  at once without DMA, after the next ``FENCE`` with DMA.
- ``FREE i``: ``i`` in RAM (with DMA: not in flight).
- ``FENCE`` (DMA only): waits until every transfer in flight is complete.
- Time: the CPU runs computes one after another. Without DMA it also runs the transfers
  (time is the sum of all instruction times). With DMA one channel runs the transfers in
  issue order, each starting when it is issued and the channel is free; a ``FENCE``
  waits for the channel.

Energy is dynamic energy plus ``static_w`` times the total time; live bytes (plus the
running compute's workspace) never exceed the budget; total time meets the deadline.
The search is exact: labels are Pareto sets of (energy, time) when there is a deadline.
Two pruning rules only, both plain waste: no second page-out of a tensor whose copy is
already on flash (copies are permanent and identical), and with DMA a ``FENCE`` only
when a transfer is in flight (otherwise it changes nothing).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

from poet_compiler.schedule.program import Instruction, Op, Program
from poet_compiler.solve.problem import Problem

_EPS = 1e-12


@dataclass(frozen=True)
class OracleResult:
    energy_j: float
    time_s: float
    program: tuple[tuple[str, int], ...]


class _Device:
    """Per-node constants as plain lists, and the moves from one state."""

    def __init__(self, problem: Problem, budget: int | None) -> None:
        g, c = problem.graph, problem.costs
        self.n = g.n
        self.size = [node.output_bytes for node in g.nodes]
        self.work = [node.workspace_bytes for node in g.nodes]
        self.inputs = [sum(1 << i for i in set(node.inputs)) for node in g.nodes]
        self.pinned = [node.pinned for node in g.nodes]
        self.remat = problem.mode in ("poet", "remat")
        self.paging = problem.mode in ("poet", "paging")
        self.c = c
        self.dma = c.dma
        self.sw = c.static_w
        self.budget = problem.activation_budget if budget is None else budget
        self.deadline = None if problem.deadline_s is None else problem.deadline_s * (1 + 1e-9)

    def live(self, ram: int) -> int:
        return sum(self.size[i] for i in range(self.n) if ram >> i & 1)


def _bits(mask: int, n: int):
    return (i for i in range(n) if mask >> i & 1)


def search(problem: Problem, *, budget: int | None = None, objective: str = "energy",
           stage_long: bool = False) -> OracleResult | None:
    """The best Program of ``problem`` (None if there is none).

    ``objective="energy"``: least energy. ``objective="ram"``: ignore the budget and find
    the least peak of live bytes (``energy_j`` then holds the peak in bytes), still under
    the deadline.

    ``stage_long`` (DMA): only the Programs of the stage-long family (docs/model.md, "Which
    transfers"), said in instructions. A stage ends with the first compute of a node. Its
    transfers are issued before its first compute, and its one ``FENCE`` comes after its
    last compute, with only ``FREE`` in between. So a page-in is readable from the next
    stage on, a page-out's source stays until the stage ends, and a stage lasts
    max(compute, transfers).
    """
    d = _Device(problem, budget if objective == "energy" else 1 << 62)
    n, c = d.n, d.c
    # Time is part of the state only where it matters: a deadline, or with DMA and static
    # power (a window's static energy depends on max(compute, transfer)).
    track_time = d.deadline is not None or (d.sw > 0 and d.dma and objective == "energy")
    # State: ram, flash, nxt, arriving (page-ins in flight), leaving (page-outs in flight),
    # lag (how long the DMA channel stays busy after the CPU's clock). Label: (cost, CPU
    # clock, program link).
    # ... and phase (stage_long only): 0 before the stage's first compute, 1 after it,
    # 2 after its last compute with transfers in flight (its FENCE is due).
    start = (0, 0, 0, 0, 0, 0.0, 0)
    counter = itertools.count()
    heap: list = [(0.0, 0.0, next(counter), start, None)]
    settled: dict[tuple, list[float]] = {}

    def now(cpu: float, lag: float) -> float:
        return cpu + lag

    while heap:
        cost, cpu, _, state, link = heapq.heappop(heap)
        ram, flash, nxt, arriving, leaving, lag, phase = state
        t_now = now(cpu, lag)
        key = state if d.dma and track_time else state[:5] + state[6:]   # without time, the DMA lag is moot too
        times = settled.setdefault(key, [])
        if any(t <= t_now + _EPS for t in times) or (not track_time and times):
            continue
        times.append(t_now)
        if nxt == n and not arriving and not leaving:
            prog = []
            while link is not None:
                link, step = link
                prog.append(step)
            return OracleResult(cost, t_now, tuple(reversed(prog)))
        live = d.live(ram)

        def push(new_cost: float, new_cpu: float, new_state: tuple, step: tuple[str, int]) -> None:
            if d.deadline is not None and now(new_cpu, new_state[5]) > d.deadline:
                return
            heapq.heappush(heap, (new_cost, new_cpu, next(counter), new_state, (link, step)))

        def energy_step(j: float, dt_cpu: float, dt_dma: float) -> tuple[float, float, float]:
            """(cost, CPU clock, lag) after an instruction: a compute (or, without DMA,
            a transfer) advances the CPU; with DMA a transfer queues on the channel."""
            if d.dma:
                ncpu, nlag = cpu + dt_cpu, max(0.0, lag - dt_cpu) + dt_dma
            else:
                ncpu, nlag = cpu + dt_cpu + dt_dma, 0.0
            if objective == "ram":
                return cost, ncpu, nlag
            return cost + j + d.sw * (now(ncpu, nlag) - now(cpu, lag)), ncpu, nlag

        # COMPUTE
        for k in range(min(nxt + 1, n) if phase < 2 else 0):
            if ram >> k & 1 or (d.inputs[k] & ~ram) or (d.inputs[k] & arriving):
                continue
            if k < nxt and (not d.remat or d.pinned[k]):
                continue
            peak = live + d.size[k] + d.work[k]
            if peak > d.budget:
                continue
            new_cost, ncpu, nlag = energy_step(c.compute_j[k], c.compute_s[k], 0.0)
            if objective == "ram":
                new_cost = max(cost, float(peak))
            after = phase
            if stage_long:
                after = 1 if k < nxt else (2 if arriving or leaving else 0)
            push(new_cost, ncpu, (ram | 1 << k, flash, max(nxt, k + 1), arriving, leaving, nlag, after),
                 ("COMPUTE", k))
        if d.paging and not (stage_long and phase):
            for i in _bits(ram & ~flash & ~leaving & ~arriving, n):
                if d.pinned[i]:
                    continue
                new_cost, ncpu, nlag = energy_step(c.page_out_j[i], 0.0, c.page_out_s[i])
                if d.dma:
                    nstate = (ram, flash, nxt, arriving, leaving | 1 << i, nlag, phase)
                else:
                    nstate = (ram, flash | 1 << i, nxt, arriving, leaving, nlag, phase)
                push(new_cost, ncpu, nstate, ("PAGE_OUT", i))
            for i in _bits(flash & ~ram, n):
                peak = live + d.size[i]
                if peak > d.budget:
                    continue
                new_cost, ncpu, nlag = energy_step(c.page_in_j[i], 0.0, c.page_in_s[i])
                if objective == "ram":
                    new_cost = max(cost, float(peak))
                push(new_cost, ncpu, (ram | 1 << i, flash, nxt, arriving | (1 << i if d.dma else 0), leaving, nlag,
                                      phase), ("PAGE_IN", i))
        for i in _bits(ram & ~arriving & ~leaving, n):
            push(cost, cpu, (ram & ~(1 << i), flash, nxt, arriving, leaving, lag, phase), ("FREE", i))
        if d.dma and (arriving or leaving) and (not stage_long or phase == 2):
            push(cost, now(cpu, lag), (ram, flash | leaving, nxt, 0, 0, 0.0, 0), ("FENCE", -1))
    return None


def min_ram(problem: Problem) -> int | None:
    """The least budget (activation bytes) under which some Program meets the deadline."""
    res = search(problem, objective="ram")
    return None if res is None else int(round(res.energy_j))


def brute_force(problem: Problem) -> tuple[float, OracleResult] | None:
    """``(least energy, its program)`` or None: the tests' oracle for any problem."""
    res = search(problem)
    return None if res is None else (res.energy_j, res)


def as_program(problem: Problem, result: OracleResult) -> Program:
    """The oracle's instruction sequence as a poetc Program. Without DMA a transfer is
    complete when it returns; the Program says so with a FENCE right after it."""
    out: list[Instruction] = []
    for op, node in result.program:
        out.append(Instruction(Op[op], node))
        if op in ("PAGE_IN", "PAGE_OUT") and not problem.costs.dma:
            out.append(Instruction(Op.FENCE))
    return Program(n_nodes=problem.n, instructions=tuple(out))
