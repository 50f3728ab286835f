"""The plan PyTorch runs for a schedule, searched to fit the activation budget (:func:`derive_plan`).

This is a post-processing step outside the optimizer, by choice (docs/pytorch.md, "What
PyTorch can run"): the optimizer's stages stay as they are, and what is reported for the
PyTorch run is the simulator's replay of the plan that runs. The schedule's lower bound
stays a lower bound on the plan's energy (a plan is a Program).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from poet_compiler.schedule.program import Op, Program
from poet_compiler.torch_exec.checkpoint_model import pytorch_program, simulate_plan
from poet_compiler.torch_exec.regions import plan_from

if TYPE_CHECKING:
    from poet_compiler.devices.costs import CostTable
    from poet_compiler.torch_exec.analysis import Analysis
    from poet_compiler.torch_exec.torch_plan import TorchPlan


def _quick(an: Analysis, plan: TorchPlan, costs: CostTable) -> tuple[int, float]:
    """(peak bytes, energy) of ``plan``'s Program without the simulator's checks: what
    the search compares (the chosen plan is simulated)."""
    program = pytorch_program(an, plan)
    size = [nd.output_bytes for nd in an.graph.nodes]
    work = [nd.workspace_bytes for nd in an.graph.nodes]
    live = peak = 0
    energy = 0.0
    t = 0.0
    for ins in program.instructions:
        op = ins.op
        if op is Op.COMPUTE:
            i = ins.node
            live += size[i]
            peak = max(peak, live + work[i])
            energy += costs.compute_j[i]
            t += costs.compute_s[i]
        elif op is Op.FREE:
            live -= size[ins.node]
        elif op is Op.PAGE_IN:
            live += size[ins.node]
            peak = max(peak, live)
            energy += costs.page_in_j[ins.node]
            t += 0.0 if costs.dma else costs.page_in_s[ins.node]
        elif op is Op.PAGE_OUT:
            energy += costs.page_out_j[ins.node]
            t += 0.0 if costs.dma else costs.page_out_s[ins.node]
    # PyTorch's checkpoint machinery costs time per region that no node carries (Python:
    # the checkpoint call, the selective-checkpoint dispatch modes, the recomputation's
    # set-up); the search charges it at the step's mean power, so that of two plans
    # alike in RAM the one with fewer regions wins.
    busy = sum(costs.compute_s)
    watts = sum(costs.compute_j) / busy if busy > 0 else 0.0
    return peak, energy + costs.static_w * t + len(plan.regions) * REGION_OVERHEAD_S * (watts + costs.static_w)


#: Seconds one checkpoint region costs beyond its ops (forward and recomputation): a
#: region of four small ops under ``checkpoint(..., context_fn=<selective policy>)`` took
#: 445 us for forward and backward against 57 us plain (the 2-vCPU bench VM, torch 2.13, one
#: thread, idle; docs/pytorch.md).
REGION_OVERHEAD_S = 3.5e-4


#: Plans the search of :func:`derive_plan` may evaluate (each one a Program built and replayed).
SEARCH_EVALUATIONS = 4000


def derive_plan(an: Analysis, program: Program, costs: CostTable, budget: int | None = None) -> TorchPlan:
    """The plan PyTorch runs for ``program``, within ``budget`` activation bytes when it can.

    A plan is the set of forward values it drops (and the ones it pages):

    * a dropped value's op and every op whose autograd node saves it share one region
      (else that node would keep it), so do dropped values that are recomputed from one
      another (else the first would be the second's region input, kept by its frame);
      regions are the forward-order hulls of these groups, merged where they overlap;
    * in a region an op is ``MUST_RECOMPUTE`` when it is dropped, or when nothing needs it
      at the region's recomputation (or it is never run again, after the early stop), and
      ``MUST_SAVE`` otherwise (kept, or alive then anyway);
    * a paged value is paged by the saved-tensor hooks when only autograd nodes outside
      regions save it and no region reads it, else kept; with DMA its page-in starts at
      the stage where the schedule issues it.

    The schedule's recomputed and paged values are the first plan. PyTorch recomputes a
    region at once, so a schedule that recomputes a chain piece by piece can need more
    RAM as a plan: from that plan, from checkpoint-all and from paging every value the
    hooks can, a greedy search then drops or keeps, pages or keeps one value at a time
    (each plan's Program replayed): first the move that lowers the peak most until the
    plan fits ``budget``, then moves that lower the energy and keep it within. The plan
    with the least energy that fits (else the smallest) is simulated and returned; its
    figures are the simulator's.
    """
    n_comp, paged_out, page_in_stage = _what_the_schedule_does(an, program)
    fwd = set(an.forward)
    droppable = {i for i in an.forward if an.op_of[i] == an.tm.node_fx[i][0] and not an.graph.nodes[i].pinned
                 and not any(g not in fwd for g in an.saved_by.get(i, ()))}
    seed = {i for i in droppable if n_comp[i] > 1 or any(n_comp[k] > 1 for k in an.readers[i]
                                                            if an.op_of[k] == an.op_of[i])}
    # Values the saved-tensor hooks can page: droppable ones that some autograd node saves.
    pageable = {i for i in droppable if an.saved_by.get(i)}
    search = _Search(an, costs, budget, droppable, pageable, page_in_stage)
    start = (frozenset(seed), frozenset(paged_out & fwd))
    results = [search.run(start)]
    if seed or start[1]:
        results.append(search.run((frozenset(), frozenset())))
    if pageable:
        results.append(search.run((frozenset(), frozenset(pageable))))
    chosen_st = results[0]
    for st in results[1:]:
        if search.better(search.score(st), search.score(chosen_st)):
            chosen_st = st
    chosen, paged = chosen_st
    plan = dataclasses.replace(plan_from(an, set(chosen), set(paged - chosen), costs, page_in_stage),
                               source_recomputes=program.n_recompute,
                               schedule_recompute=frozenset(an.op_of[i] for i in seed))
    return simulate_plan(an, plan, costs)


def _what_the_schedule_does(an: Analysis, program: Program) -> tuple[list[int], set[int], dict[int, int]]:
    """Per node how often ``program`` computes it, the nodes it pages out, and the stage
    at which it pages each one in during the backward (the stage: one past the last node
    computed for the first time)."""
    n_comp = [0] * an.graph.n
    paged_out: set[int] = set()
    page_in_stage: dict[int, int] = {}
    stage = 0
    last_fwd = an.forward[-1]
    for ins in program.instructions:
        if ins.op is Op.COMPUTE:
            n_comp[ins.node] += 1
            if n_comp[ins.node] == 1:
                stage = ins.node + 1
        elif ins.op is Op.PAGE_OUT:
            paged_out.add(ins.node)
        elif ins.op is Op.PAGE_IN and stage > last_fwd + 1:
            page_in_stage.setdefault(ins.node, stage)
    return n_comp, paged_out, page_in_stage


#: A plan of the search: (the values it drops, the values it pages).
State = tuple[frozenset[int], frozenset[int]]


class _Search:
    """The greedy search of :func:`derive_plan`: one move at a time (drop or keep a
    droppable value, page or keep a pageable one), each plan scored once by its Program
    (:func:`_quick`); the scores are shared by every start, and together they evaluate at
    most :data:`SEARCH_EVALUATIONS` plans."""

    def __init__(self, an: Analysis, costs: CostTable, budget: int | None, droppable: set[int],
                 pageable: set[int], page_in_stage: dict[int, int]) -> None:
        self.an, self.costs, self.budget = an, costs, budget
        self.droppable, self.pageable, self.page_in_stage = droppable, pageable, page_in_stage
        self.cache: dict[State, tuple[int, float]] = {}

    def score(self, st: State) -> tuple[int, float]:
        got = self.cache.get(st)
        if got is None:
            an, costs = self.an, self.costs
            got = _quick(an, plan_from(an, set(st[0]), set(st[1] - st[0]), costs, self.page_in_stage), costs)
            self.cache[st] = got
        return got

    def better(self, a: tuple[int, float], b: tuple[int, float]) -> bool:
        """a beats b: within the budget with less energy, or nearer to it."""
        budget = self.budget
        if budget is None:
            return a[1] < b[1]
        fa, fb = a[0] <= budget, b[0] <= budget
        if fa != fb:
            return fa
        return a[1] < b[1] if fa else (a[0], a[1]) < (b[0], b[1])

    def moves(self, st: State) -> list[State]:
        d, p = st
        out = [(d - {v}, p) if v in d else (d | {v}, p) for v in sorted(self.droppable) if v not in p]
        out += [(d, p - {v}) if v in p else (d, p | {v}) for v in sorted(self.pageable) if v not in d]
        return out

    def run(self, start: State) -> State:
        """From ``start``, the best move while one improves (or the evaluations run out)."""
        budget = self.budget
        cur = start
        cur_s = self.score(cur)
        while len(self.cache) < SEARCH_EVALUATIONS:
            fits = budget is None or cur_s[0] <= budget
            best, best_s = None, None
            for cand in self.moves(cur):
                if fits and budget is not None and (cand[0] > cur[0] or cand[1] > cur[1]):
                    continue   # within budget: only keeping more can lower the energy
                s_ = self.score(cand)
                if (best_s is None or self.better(s_, best_s)) and self.better(s_, cur_s):
                    best, best_s = cand, s_
                if len(self.cache) >= SEARCH_EVALUATIONS:
                    break
            if best is None or best_s is None:
                break
            cur, cur_s = best, best_s
        return cur


__all__ = ["REGION_OVERHEAD_S", "SEARCH_EVALUATIONS", "derive_plan"]
