"""POFO/rotor-style dynamic program for training chains: checkpoint, offload or recompute.

On a training chain (see :func:`~poet_compiler.solve.baselines.griewank.forward_chain`)
each forward tensor gets one of three fates, as in POFO (Beaumont et al., "Optimal
re-materialization strategies for heterogeneous chains: how to train deep neural networks
with limited memory" and its offloading extension):

* **keep** — a checkpoint held in RAM until its backward use;
* **offload** — a checkpoint paged out after its last forward use and paged back in just
  before its backward use (modes that allow paging);
* **drop** — recomputed in backward with the rest of its segment (the dropped tensors up
  to the next checkpoint), as in segment checkpointing (modes that allow recomputation).
  Tensors after the last checkpoint are kept.

The DP runs over chain positions with the kept bytes (in buckets of 1/48 of the budget,
rounded up) as state and minimizes the extra energy: recompute energy of dropped tensors
plus paging energy of offloaded ones, each with static power times the time it adds
(none for paging the device overlaps with compute). Peak memory is taken as kept bytes
plus the largest recomputed segment (or the kept tail if larger). The DP is solved for a
grid of segment caps and kept-byte limits; every distinct solution is replayed in the
simulator and the least-energy one that fits the budget and deadline is returned.
Non-chain graphs are reported unsupported.
"""

from __future__ import annotations

import math

import numpy as np

from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.baselines._common import Trial, assemble, evaluate, forward_phase, heuristic, idle_gaps
from poet_compiler.solve.baselines.chen import SegmentPolicy
from poet_compiler.solve.baselines.griewank import forward_chain
from poet_compiler.solve.baselines.remat import plan_remat
from poet_compiler.solve.result import Result

KEEP, OFFLOAD, DROP = 0, 1, 2
_Q = 48            # buckets of the kept-bytes state


def pofo_schedule(graph: TrainingGraph, chain: list[int], fate: list[int]) -> Schedule:
    """Matrices for per-position fates (the tail after the last checkpoint is kept)."""
    R = plan_remat(graph, SegmentPolicy(graph, [v for v, f in zip(chain, fate) if f != DROP]))
    phase = forward_phase(graph)
    offload = {v for v, f in zip(chain, fate) if f == OFFLOAD}
    paged = [(g.node, g.last) for g in idle_gaps(graph, R)
             if g.node in offload and phase[g.last] and not phase[g.next]]
    return assemble(graph, R, paged)


def solve_dp(m: list[int], rec: list[float], off: list[float], unit: float, seg_cap: float,
             allow_off: bool, allow_drop: bool) -> list[list[int] | None]:
    """``out[q]``: least-energy fates keeping at most ``q`` buckets (None if impossible)."""
    L = len(m)
    buckets = [int(math.ceil(b / unit)) for b in m]
    # f[p+1][q]: min energy with the last checkpoint at p (p = -1: none yet), q buckets kept.
    f = np.full((L + 1, _Q + 1), math.inf)
    f[0, 0] = 0.0
    # Back pointers of f[p+1, q]: previous row, previous q, fate of position p.
    b_prev, b_q, b_fate = (np.full((L + 1, _Q + 1), -1, dtype=np.int64) for _ in range(3))
    for p in range(L):                        # next checkpoint at p
        seg_bytes, seg_e = 0.0, 0.0
        for prev in range(p - 1, -2, -1):     # previous checkpoint at prev; prev+1..p-1 dropped
            if prev < p - 1:
                seg_bytes += m[prev + 1]
                seg_e += rec[prev + 1]
                if not allow_drop or seg_bytes > seg_cap:
                    break
            row = f[prev + 1]
            for fate in (KEEP, OFFLOAD) if allow_off else (KEEP,):
                add_q = buckets[p] if fate == KEEP else 0
                if add_q > _Q:
                    continue
                add_e = seg_e + (off[p] if fate == OFFLOAD else 0.0)
                cand = row[: _Q + 1 - add_q] + add_e
                target = f[p + 1, add_q:]
                better = np.flatnonzero(cand < target)
                if better.size:
                    f[p + 1, better + add_q] = cand[better]
                    b_prev[p + 1, better + add_q] = prev + 1
                    b_q[p + 1, better + add_q] = better
                    b_fate[p + 1, better + add_q] = fate
    # Finish: last checkpoint at p; the tail p+1..L-1 is kept.
    best: list[tuple[float, int, int]] = [(math.inf, -1, -1)] * (_Q + 1)
    # The tail is live at the start of the backward pass like a recomputed segment, and is
    # freed as the backward pass walks through it: it counts against the segment cap.
    for p in range(-1, L):
        if sum(m[p + 1:]) > max(seg_cap, m[-1]):
            continue
        for q in range(_Q + 1):
            e = f[p + 1, q]
            if e < best[q][0]:
                best[q] = (e, p + 1, q)
    out: list[list[int] | None] = []
    running: tuple[float, int, int] = (math.inf, -1, -1)
    for qlim in range(_Q + 1):
        if best[qlim][0] < running[0]:
            running = best[qlim]
        if running[0] == math.inf:
            out.append(None)
            continue
        fates = [KEEP] * L     # the tail after the last checkpoint is kept
        pos, q = running[1], running[2]
        while pos > 0:
            prev, pq, fp = int(b_prev[pos, q]), int(b_q[pos, q]), int(b_fate[pos, q])
            fates[pos - 1] = fp
            for j in range(prev, pos - 1):
                fates[j] = DROP
            pos, q = prev, pq
        out.append(fates)
    return out


@heuristic("pofo")
def pofo(trial: Trial) -> Result:
    problem = trial.problem
    graph, costs = problem.graph, problem.costs
    chain = forward_chain(graph)
    if chain is None:
        return trial.infeasible("unsupported graph: the DP needs the forward nodes to form a "
                                "chain that precedes the loss and backward nodes")
    pinned = [graph.nodes[v].pinned for v in chain]
    m = [graph.nodes[v].output_bytes for v in chain]
    sw = costs.static_w
    rec = [costs.compute_j[v] + sw * costs.compute_s[v] if not pinned[j] else math.inf
           for j, v in enumerate(chain)]
    off = [costs.page_in_j[v] + costs.page_out_j[v]
           + (0.0 if problem.overlaps else sw * (costs.page_in_s[v] + costs.page_out_s[v]))
           if not pinned[j] else math.inf for j, v in enumerate(chain)]
    unit = max(1.0, max(problem.activation_budget, 1) / _Q)
    caps = sorted({float(c) for c in np.geomspace(max(1, max(m)), max(1, sum(m)), 10).round()} | {0.0})
    seen: set[tuple[int, ...]] = set()
    for cap in caps:
        fates = solve_dp(m, rec, off, unit, cap, problem.allows_paging, problem.allows_remat)
        # Peak ~ kept + segment: try the kept limits just under what the budget leaves.
        q_top = max(0, min(_Q, int((problem.activation_budget - cap) // unit)))
        for fate in (fates[q] for q in sorted({max(0, q_top - d) for d in (0, 1, 2, 4, 8, 16, 32)}) + [_Q]):
            if fate is not None and tuple(fate) not in seen:
                seen.add(tuple(fate))
                trial.offer(pofo_schedule(graph, chain, fate))
    if trial.best is None and trial.fallback is None:   # the DP found nothing under its byte grid:
        sched = pofo_schedule(graph, chain, [KEEP] * len(chain))   # report keeping everything
        trial.fallback = (sched, evaluate(problem, sched))
    return trial.finish_best(lambda _: f"best of {len(seen)} DP solutions")
