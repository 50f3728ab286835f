"""Cover-guided search: a good schedule from a small sub-problem the cover bound points at.

The eviction-cover bound (:mod:`.cover`) says which tensors the cheapest way out of the
memory peaks evicts, and whether each comes back by recompute or by paging. That is not
yet a schedule (a recompute needs its inputs in RAM, a stage needs room for it), but it
names the few decisions that matter. The guided sub-problem is the fast formulation with
only those decisions open (:class:`~.formulation.fast.Restriction`):

- recompute a cover-chosen node in the stage of any of its consumers, together with its
  inputs (``CASCADE_DEPTH`` levels deep) in the same stage, so a recompute can
  rebuild what it reads;
- page a cover-chosen node in any stage;
- every recompute and paged node of the presence model's best solution, where it ran
  (``CoverBound.staged``): it sees when restores happen, and on ResNet-18-CIFAR m4 its
  choice led to schedules 0.5 % cheaper than the cover's alone;
- plus every recompute and paged node of the warm start, so the warm start stays a
  solution of the sub-problem and its optimum is never worse;
- every other tensor stays in RAM from its compute to its last consumer.

Before any solve, :func:`cover_schedule` turns the cover's choices straight into a
schedule (:func:`realize`); on most zoo cells that alone is within 0.1 % of the bound.
Otherwise the sub-problem (about a quarter of the full model's binaries on
ResNet-18-CIFAR, and far easier: most residencies are fixed) is solved on CP-SAT from the
better of that and the warm start. Its schedule is a schedule of the full problem (the
missing variables are 0) and becomes the full solve's warm start — when it is within
the gap limit of the cover bound, the full model is not needed at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import numpy as np

from poet_compiler import work
from poet_compiler.errors import InternalError, ScheduleError, UpdateOrderError
from poet_compiler.schedule.build import assemble
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.schedule.simulate import Simulation
from poet_compiler.solve.backends import BackendOptions, solve_model
from poet_compiler.solve.backends.base import BackendResult, is_large, within_gap
from poet_compiler.solve.clock import Clock, step_until
from poet_compiler.solve.cover import PAGE, RECOMPUTE, CoverBound, StagedChoice, cover_bound, cover_limit
from poet_compiler.solve.finalize import finalize
from poet_compiler.solve.formulation.common import BuildDeadline, Built
from poet_compiler.solve.formulation.fast import Restriction, build_fast, canonical
from poet_compiler.solve.problem import Problem, feasible_energy, simulate_schedule

# How deep the inputs of a chosen recompute may be recomputed with it in the first
# sub-problem (1: its inputs; 2: their inputs too). Swept at the default effort
# (docs/optimizer.md, "Constants"): at 1 ResNet-18-CIFAR m4 50 % 1.5x is 0.53 % and a72
# 30 % 2.0x 0.60 % cheaper, five other cells the same, but on the whole grid a72 30 % 1.5x
# is 1.6 % dearer; at 3 DAG 100 at 80 % is 1.97 % dearer.
CASCADE_DEPTH = 2
# A sub-problem that closes short of the gap is followed by wider ones, each with one
# level deeper of inputs recomputed with a chosen node, up to this many. Without them
# BERT-base a72 70 % is 0.04 % dearer (docs/optimizer.md, "Ablation"); at 1 no cell of the
# constants sweep changed.
WIDER_CASCADES = 2
# CP-SAT's full-problem subsolvers beside its neighbourhood (LNS) ones in the sub-problems.
# In the interleaved search a batch waits for its slowest task, and each of the eight
# full-problem subsolvers' first task is seconds long on ResNet-18 (its first LP): the LNS
# workers, which find the schedules, started after 10.9 s. max_lp alone is the one whose
# LP bound closes the sub-problems. Measured on the first sub-problem, 40 s, one run each
# (same hint): ResNet-18-CIFAR a72 30 % 1.5x 45.43 -> 44.68 J (two runs, the same
# schedule); m4 50 % 2.0x closed in 1.1 s at 107.672 J instead of 4.1 s at 107.676 J;
# VGG16-CIFAR a72 30 % 1.5x closed in 3.5 s instead of 4.8 s; ResNet-18-CIFAR a72 50 % 1.5x
# the same schedule, closed in 9.5 s instead of 5.1 s. (LNS alone stalled at 44.94 J and
# never closes a sub-problem, so no wider one followed.)
GUIDED_SUBSOLVERS = ("max_lp",)
# The hint's step time is the sub-problem's deadline up to this (the model's time rows are
# sums of the same costs in another order).
_HINT_TIME_TOL = 1e-6


def restriction_for(problem: Problem, cover: CoverBound, warm: Schedule | None = None,
                    depth: int = CASCADE_DEPTH) -> Restriction:
    """The decisions the cover's restores (and the warm start) need; see the module docstring."""
    g, n = problem.graph, problem.n
    recompute: set[tuple[int, int]] = set()
    paging: set[int] = set()

    def open_recompute(t: int, i: int, left: int) -> None:
        if (t, i) in recompute or i >= t or g.nodes[i].pinned:
            return
        recompute.add((t, i))
        if left > 0:
            for j in set(g.nodes[i].inputs):
                open_recompute(t, j, left - 1)

    for r in cover.restores:
        if r.how == RECOMPUTE:
            for t in sorted(set(g.consumers[r.node])):
                open_recompute(t, r.node, depth)
        elif r.how == PAGE:
            paging.add(r.node)
    # The presence model's restores in the stages it placed them (no cascade: its recompute
    # chains are in the choice already), and the warm start's, so it stays a solution.
    for choice in (cover.staged, *((decisions_of(warm),) if warm is not None else ())):
        recompute |= choice.recompute
        paging |= choice.paging
    touched = paging | {i for _, i in recompute}
    keep = frozenset(i for i in range(n) if i not in touched and g.consumers[i])
    return Restriction(frozenset(recompute), frozenset(paging), keep)


def decisions_of(schedule: Schedule) -> StagedChoice:
    """A schedule's recomputes ``(stage, node)`` and paged nodes: its entries below the
    diagonal (a node's own stage computes it once by definition)."""
    stage, node = np.nonzero(np.tril(schedule.R, -1))
    paged = np.nonzero(np.tril(schedule.M_out | schedule.M_in, -1).any(axis=0))[0]
    return StagedChoice(frozenset(zip(stage.tolist(), node.tolist(), strict=True)), frozenset(paged.tolist()))


def build_guided(problem: Problem, cover: CoverBound, warm: Schedule | None, *,
                 budget: int | None = None, depth: int = CASCADE_DEPTH) -> Built:
    """The guided sub-problem, hinted with ``warm`` (made canonical) when given."""
    built = build_fast(problem, budget=budget, restriction=restriction_for(problem, cover, warm, depth))
    if warm is not None:
        built.hint_from(canonical(problem, warm))
    return built


def realize(problem: Problem, cover: CoverBound) -> Schedule:
    """The cover's choices as a schedule (memory is not checked here).

    Each recomputed tensor is freed after its previous use and recomputed in the stage
    of its next consumer; each paged one is paged out after its previous use and back in
    before its next consumer; everything else is kept from its compute to its last use.
    A recompute needs its inputs in that stage: an input nobody reads any more is
    recomputed with it (recursively); an input the cover also evicts there is recomputed
    with it *instead of* at its own next use, and kept until then — one recompute, not
    a chain of them through every earlier layer."""
    g, n = problem.graph, problem.n
    cons = g.consumers
    R = np.eye(n, dtype=bool)
    spans: dict[int, list[list[int]]] = {}   # node -> [previous use, restore stage] (recompute)
    paged: list[tuple[int, int]] = []
    for r in cover.restores:
        prev = max(i for i in [r.node, *cons[r.node]] if i < r.next_use)
        if r.how == RECOMPUTE:
            R[r.next_use, r.node] = True
            spans.setdefault(r.node, []).append([prev, r.next_use])
        else:
            paged.append((r.node, prev))

    def absent_span(j: int, t: int) -> list[int] | None:
        return next((sp for sp in spans.get(j, ()) if sp[0] < t < sp[1]), None)

    for t in range(n if problem.allows_remat else 0):
        stack = [k for k in np.flatnonzero(R[t]).tolist() if k != t]
        while stack:
            x = stack.pop()
            for j in set(g.nodes[x].inputs):
                if R[t, j] or g.nodes[j].pinned or j >= t:
                    continue
                natural = any(c >= t for c in cons[j])
                span = absent_span(j, t)
                if natural and span is None:
                    continue                       # in RAM anyway
                if span is not None:
                    # Restore j here rather than at its own next use, and keep it until then.
                    R[span[1], j] = False
                    span[1] = t
                R[t, j] = True
                stack.append(j)
    return assemble(g, R, paged)


def realize_within(problem: Problem, choice: CoverBound | None,
                   resolve: Callable[[int], CoverBound | None], *, tries: int = 6,
                   arena_fit: bool = False, until: float | None = None) -> tuple[Simulation, Schedule] | None:
    """``choice`` realized (:func:`realize`) within the budget and deadline, or None. When
    a realization exceeds the budget (a recompute needs its inputs in RAM), ``resolve``
    gives a new choice at a budget lowered by the overshoot, up to ``tries`` times.
    ``arena_fit``: the static arena must fit too (an arena overshoot lowers the budget
    the same way). ``until``: no new try after this ``work.now()`` instant."""
    budget = problem.activation_budget
    for attempt in range(tries):
        if choice is None or choice.energy_j is None:
            return None
        if attempt and until is not None and work.now() >= until:
            return None
        try:
            schedule = realize(problem, choice)
            sim = simulate_schedule(problem, schedule)
        except UpdateOrderError:  # a cascade recomputes a parameter's reader after its update
            return None
        except ScheduleError as exc:  # realize builds valid schedules: a broken one is a bug
            raise InternalError(f"cover realization: {exc}") from exc
        if problem.deadline_s is not None and sim.runtime_s > problem.deadline_s * (1 + 1e-9):
            return None
        over = sim.peak_bytes - problem.activation_budget
        if over <= 0 and arena_fit:
            over = _arena_overshoot(problem, schedule, None if until is None else until - work.now())
        if over <= 0:
            return sim, schedule
        budget -= over
        if budget <= 0:
            return None
        choice = resolve(budget)
    return None


def cover_schedule(problem: Problem, cover: CoverBound, *, tries: int = 6,
                   time_limit_s: float = 10.0, arena_fit: bool = False,
                   until: float | None = None) -> Schedule | None:
    """The cheapest feasible schedule realized from the cover's choices, or None. Two
    covers are tried (:func:`realize_within` each): the bound's own, and one that
    charges each recompute with the inputs it must rebuild (``closure``).
    ``time_limit_s`` caps each cover solve; ``until`` (a ``work.now()`` instant)
    ends the whole search: no cover solve runs past it, and none starts with less time
    left than ``cover``'s model took to build (2.7 s on gpt2_large, where a second cover
    built with 0.5 s left took a compile at --time-limit 20 1.1 s past its guided stage)."""
    best: tuple[float, Schedule] | None = None

    def limit() -> float:
        return time_limit_s if until is None else max(0.0, min(time_limit_s, until - work.now()))

    def another(budget: int | None, closure: bool) -> CoverBound | None:
        if until is not None and limit() <= cover.build_s:
            return None
        return cover_bound(problem, budget=budget, time_limit_s=limit(), closure=closure)

    for closure in (False, True):
        first = cover if not closure else another(None, True)
        if first is None:
            break
        found = realize_within(problem, first, lambda budget: another(budget, closure),  # noqa: B023
                               tries=tries, arena_fit=arena_fit, until=until)
        if found is not None and (best is None or found[0].energy_j < best[0]):
            best = (found[0].energy_j, found[1])
    return None if best is None else best[1]


def _arena_overshoot(problem: Problem, schedule: Schedule, time_limit_s: float | None = None) -> int:
    """Bytes by which the schedule's static arena exceeds the activation budget (<= 0: fits);
    the arena planned within ``time_limit_s`` when given."""
    res = finalize(problem, schedule, strategy="optimal", arena_time_s=time_limit_s)
    if res.ok or res.arena_bytes is None:
        return 0 if res.ok else 1
    return res.arena_bytes - problem.activation_budget


def half_the_slack(problem: Problem, hint: Schedule | None) -> Problem:
    """``problem`` with half its deadline's slack over the compute-only time, but never
    below ``hint``'s own step time: the guided sub-problem's search space. The hint stays
    a solution, so the sub-problem's optimum is never worse than the hint.

    Why: where a deadline leaves slack, the sub-problem's search stayed at its hint. On
    ResNet-18-CIFAR a72 30 % (static power 2.7 W: half the energy is time) the same
    restriction, from the same hint, gave 45.11 J at 1.5x and 51.54-51.66 J at 2.0x,
    although the 1.5x schedule meets 2.0x. Searched at the hint's own time (1.43x), both
    gave 46.12 J, but the a72 50 % cells, whose hint is at 1.03x, lost 0.2-0.4 %; at half
    the slack (never below the hint's time) 2.0x gives 45.11 J and the 50 % cells are within
    0.2 % of before either way (BENCHMARKS.md, "Optimizer grid"). The full model that follows
    searches at the real deadline, from the schedule found."""
    if hint is None or problem.deadline_s is None:
        return problem
    try:
        runtime = simulate_schedule(problem, hint).runtime_s
    except ScheduleError:
        return problem
    half_slack = (problem.costs.compute_only_s + problem.deadline_s) / 2
    tight = max(runtime * (1 + _HINT_TIME_TOL), half_slack)
    return dataclasses.replace(problem, deadline_s=tight) if tight < problem.deadline_s else problem


@dataclasses.dataclass
class GuidedOutcome:
    """What the cover-guided stage found: the best schedule (or None), its simulated
    energy, and where it came from ("cover" realization or the "guided" sub-problem)."""

    schedule: Schedule | None
    energy_j: float | None
    source: str
    solve_s: float = 0.0


def guided_search(problem: Problem, cover: CoverBound, warm: Schedule | None, *, solver: str,
                  time_limit_s: float, threads: int, relative_gap: float,
                  progress: bool = False, clock: Clock | None = None, warm_source: str = "warm start",
                  widen: bool = True) -> GuidedOutcome:
    """The cover's realization, then the guided sub-problem seeded with the better of it
    and ``warm``; stops as soon as a schedule is within ``relative_gap`` of the cover bound.

    ``warm_source`` names where ``warm`` came from (a heuristic, or the presence model).

    ``time_limit_s`` is the stage's share; with a ``clock`` (the solve's deadline) the
    realization's cover solves end at the deadline too, and the sub-problem's CP-SAT limit
    is what is left of the share when it starts, such that its child's wall cap ends
    within it (:meth:`Clock.solver_limit`)."""
    started = work.now()
    until = started + time_limit_s
    if clock is not None:
        until = min(until, clock.at)
    best = GuidedOutcome(warm, feasible_energy(problem, warm), warm_source)
    # The realization's cover solves get what one cover solve would: uncapped, on MobileNetV2
    # a72 50 % they spent the whole share (16.8 units) and the sub-problem never ran (5.215 J
    # instead of 4.812 J).
    realized = cover_schedule(problem, cover, until=min(until, started + cover_limit(time_limit_s)))
    e = feasible_energy(problem, realized)
    # On a tie with the presence model's schedule the realization wins: that schedule can have the
    # same energy and an arena that needs copies (ResNet-18-CIFAR m4 70 %: 94 MOVEs).
    if e is not None and (best.energy_j is None or e < best.energy_j
                          or (e == best.energy_j and best.source == "presence")):
        best = GuidedOutcome(realized, e, "cover")
    bound = cover.energy_j
    if bound is None or (best.energy_j is not None and within_gap(best.energy_j, bound, relative_gap)):
        return best
    # The sub-problem, then, while one closes (to its own bound) short of the gap and time
    # is left, wider ones from the schedule found. On BERT-base a72 70 % the refined
    # cover's choice alone ended at 109.898 J (its own bound 109.857 J) in 4.5 s of 87 s,
    # 0.17 % above the cover bound; the widest at 109.856 J.
    # ``widen``: only where nothing after this stage would use the time (the caller's say).
    steps = [(cover, CASCADE_DEPTH), *(_widenings(cover) if widen else ())]
    out: BackendResult | None = None
    for k, (restricted, depth) in enumerate(steps):
        if k and (not _closed(out, relative_gap)
                  or (best.energy_j is not None and within_gap(best.energy_j, bound, relative_gap))):
            break
        try:
            # Its rows take seconds per thousand nodes (n^2 pairs): the build stops at the
            # stage's end too, and the stage keeps what it has.
            with step_until(until):
                built = build_guided(half_the_slack(problem, best.schedule), restricted, best.schedule, depth=depth)
        except BuildDeadline:
            break
        built.model.objective_floor = bound
        large = is_large(built.model)
        left = until - work.now()
        limit = left if clock is None else clock.solver_limit(left)
        if limit <= 0.05:
            break
        # The widest searches on until the gap to the cover bound or the time's end.
        out = solve_model(built.model, "cpsat" if solver in ("auto", "cpsat") else solver,
                          BackendOptions(time_limit_s=limit, threads=threads, progress=progress,
                                         relative_gap=relative_gap, large=large,
                                         floor_only=k > 0 and k == len(steps) - 1,
                                         full_subsolvers=GUIDED_SUBSOLVERS))
        best = _better(problem, best, built, out.values)
        best.solve_s += out.solve_time_s
    return best


def _closed(out: BackendResult | None, relative_gap: float) -> bool:
    """The sub-problem's search ended at its own optimum (within the gap of its own bound)."""
    if out is None:
        return False
    return out.status == "optimal" or (out.objective is not None and out.bound is not None
                                       and within_gap(out.objective, out.bound, relative_gap))


def _widenings(cover: CoverBound) -> Iterator[tuple[CoverBound, int]]:
    """Ever wider sub-problems after the first: the other cover model's restores added to
    the cover's own, then recomputes that rebuild deeper chains of inputs."""
    own = set(cover.restores)
    extra = tuple(r for r in cover.other_restores if r not in own)
    wide = dataclasses.replace(cover, restores=cover.restores + extra) if extra else cover
    if extra:
        yield wide, CASCADE_DEPTH
    for depth in range(CASCADE_DEPTH + 1, CASCADE_DEPTH + 1 + WIDER_CASCADES):
        yield wide, depth


def _better(problem: Problem, best: GuidedOutcome, built: Built, values: list[float] | None) -> GuidedOutcome:
    """``best``, or the sub-problem's solution ``values`` when it is a cheaper schedule."""
    if values is None:
        return best
    s = built.schedule(values)
    e = feasible_energy(problem, s)
    if e is not None and (best.energy_j is None or e < best.energy_j):
        return GuidedOutcome(s, e, "guided", solve_s=best.solve_s)
    return best
