"""Cover-guided search: a good schedule from a small sub-problem the cover bound points at
(docs/optimizer.md, "Schedules from the bound").

First :func:`cover_schedule` realizes the cover's choices as a schedule (on most zoo cells
within 0.1 % of the bound). Otherwise the guided sub-problem, the fast formulation with
only these decisions open (:class:`~.formulation.fast.Restriction`), is solved on CP-SAT
from the better of that and the warm start:

- recompute a cover-chosen node in the stage of any of its consumers, with its inputs
  ``Tuning.cascade_depth`` levels deep in the same stage;
- page a cover-chosen node in any stage;
- every restore of the presence model's solution, where it ran (``CoverBound.staged``;
  on ResNet-18-CIFAR m4 0.5 % cheaper than the cover's alone);
- every restore of the warm start, so that it stays a solution;
- every other tensor stays in RAM from its compute to its last consumer.

Its schedule is one of the full problem, and the full solve's warm start.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from poet_compiler import work
from poet_compiler.errors import InternalError, ScheduleError, UpdateOrderError
from poet_compiler.schedule.build import assemble
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.schedule.simulate import Simulation
from poet_compiler.solve.clock import step_until
from poet_compiler.solve.cover import PAGE, RECOMPUTE, CoverBound, cover_bound
from poet_compiler.solve.finalize import Finalized, finalize_plan
from poet_compiler.solve.formulation.common import BuildDeadline, Built
from poet_compiler.solve.formulation.fast import Restriction, build_fast, canonical
from poet_compiler.solve.problem import Problem, feasible_energy, simulate_schedule
from poet_compiler.solvers import BackendOptions
from poet_compiler.solvers.base import BackendResult, within_gap

if TYPE_CHECKING:
    from poet_compiler.solve.pipeline.context import Context

# CP-SAT's full-problem subsolvers beside its LNS ones in the sub-problems. In the
# interleaved search a batch waits for its slowest task, and each of the eight default
# full-problem subsolvers' first LP takes seconds on ResNet-18 (the LNS workers, which find
# the schedules, started after 10.9 s); max_lp's LP bound is the one that closes the
# sub-problems. First sub-problem, 40 s, same hint: ResNet-18-CIFAR a72 30 % 1.5x 45.43 ->
# 44.68 J; m4 50 % 2.0x closed in 1.1 s instead of 4.1 s; a72 50 % 1.5x the same schedule
# in 9.5 s instead of 5.1 s. (LNS alone stalled at 44.94 J and never closed one.)
GUIDED_SUBSOLVERS = ("max_lp",)
# The hint's step time is the sub-problem's deadline up to this (the model's time rows are
# sums of the same costs in another order).
_HINT_TIME_TOL = 1e-6


def restriction_for(problem: Problem, cover: CoverBound, warm: Schedule | None = None, *,
                    depth: int) -> Restriction:
    """The decisions the module docstring lists, a chosen recompute's inputs ``depth`` deep."""
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
    # chains are in the choice already), and the warm start's (below the diagonal: a
    # node's own stage computes it once), so that it stays a solution.
    recompute |= cover.staged.recompute
    paging |= cover.staged.paging
    if warm is not None:
        stage, node = np.nonzero(np.tril(warm.R, -1))
        recompute |= frozenset(zip(stage.tolist(), node.tolist(), strict=True))
        paging |= frozenset(np.nonzero(np.tril(warm.M_out | warm.M_in, -1).any(axis=0))[0].tolist())
    touched = paging | {i for _, i in recompute}
    keep = frozenset(i for i in range(n) if i not in touched and g.consumers[i])
    return Restriction(frozenset(recompute), frozenset(paging), keep)


def build_guided(problem: Problem, cover: CoverBound, warm: Schedule | None, *, depth: int,
                 floor: float | None = None) -> Built:
    """The guided sub-problem, hinted with ``warm`` (made canonical) when given, with the
    objective floor ``floor``."""
    return build_fast(problem, restriction=restriction_for(problem, cover, warm, depth=depth),
                      hint=None if warm is None else canonical(problem, warm), floor=floor)


def realize(problem: Problem, cover: CoverBound) -> Schedule:
    """The cover's choices as a schedule (memory not checked): a restored tensor is freed
    or paged out after its previous use and recomputed or paged in for its next consumer;
    the rest is kept from its compute to its last use. A recompute's input nobody reads
    any more is recomputed with it (recursively); an input the cover also evicts there is
    recomputed with it *instead of* at its own next use, and kept until then."""
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
                span = absent_span(j, t)
                if span is None and any(c >= t for c in cons[j]):
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
                   arena_fit: bool = False, until: float | None = None,
                   finalize: Callable[..., Finalized] = finalize_plan,
                   realization: Callable[[Problem, CoverBound], Schedule] | None = None,
                   ) -> tuple[Simulation, Schedule] | None:
    """``choice`` realized (``realization``, by default :func:`realize`) within the budget
    and deadline, or None. Over the budget (or, with ``arena_fit``, its static arena, laid
    out by ``finalize``, over it), ``resolve`` gives a new choice at the budget lowered by
    the overshoot, up to ``tries`` times, none after the ``work.now()`` instant ``until``."""
    realization = realization or realize
    budget = problem.activation_budget
    for attempt in range(tries):
        if choice is None or choice.energy_j is None or (attempt and until is not None and work.now() >= until):
            return None
        try:
            schedule = realization(problem, choice)
            sim = simulate_schedule(problem, schedule)
        except UpdateOrderError:  # a cascade recomputes a parameter's reader after its update
            return None
        except ScheduleError as exc:  # realize builds valid schedules: a broken one is a bug
            raise InternalError(f"cover realization: {exc}") from exc
        if problem.deadline_s is not None and sim.runtime_s > problem.deadline_s * (1 + 1e-9):
            return None
        over = sim.peak_bytes - problem.activation_budget
        if over <= 0 and arena_fit:   # the static arena's overshoot, planned within the time left
            arena_s = None if until is None else until - work.now()
            done = finalize(problem, schedule, strategy="optimal", arena_time_s=arena_s)
            if done.ok:
                over = 0
            else:   # no arena at all: over by an unknown amount, at least a byte
                over = 1 if done.arena_bytes is None else done.arena_bytes - problem.activation_budget
        if over <= 0:
            return sim, schedule
        budget -= over
        if budget <= 0:
            return None
        choice = resolve(budget)
    return None


def cover_schedule(problem: Problem, cover: CoverBound, *, time_limit_s: float,
                   arena_fit: bool = False, until: float | None = None,
                   solve_cover: Callable[..., CoverBound] = cover_bound,
                   finalize: Callable[..., Finalized] = finalize_plan) -> Schedule | None:
    """The cheapest feasible schedule realized (:func:`realize_within`) from the bound's
    own cover or one that charges each recompute with its inputs (``closure``), or None.
    ``time_limit_s`` caps each cover solve (``solve_cover``; ``finalize`` lays out an
    ``arena_fit`` realization's arena); none runs past the
    ``work.now()`` instant ``until``, and none starts with less left than ``cover``'s build
    took (2.7 s on gpt2_large, where one built with 0.5 s left overran a compile's guided
    stage 1.1 s)."""
    best: tuple[float, Schedule] | None = None

    def limit() -> float:
        return time_limit_s if until is None else max(0.0, min(time_limit_s, until - work.now()))

    def another(budget: int | None, closure: bool) -> CoverBound | None:
        if until is not None and limit() <= cover.build_s:
            return None
        return solve_cover(problem, budget=budget, time_limit_s=limit(), closure=closure)

    for closure in (False, True):
        first = cover if not closure else another(None, True)
        if first is None:
            break
        found = realize_within(problem, first, lambda budget: another(budget, closure),  # noqa: B023
                               arena_fit=arena_fit, until=until, finalize=finalize)
        if found is not None and (best is None or found[0].energy_j < best[0]):
            best = (found[0].energy_j, found[1])
    return None if best is None else best[1]


def half_the_slack(problem: Problem, hint: Schedule | None) -> Problem:
    """``problem`` with half its deadline's slack over the compute-only time, never below
    ``hint``'s step time (so the hint stays a solution): the guided sub-problem's space.

    With the whole slack the search stayed at its hint: on ResNet-18-CIFAR a72 30 % the
    same restriction and hint gave 45.11 J at 1.5x and 51.54-51.66 J at 2.0x, though the
    1.5x schedule meets 2.0x. At the hint's own time the a72 50 % cells lost 0.2-0.4 %; at
    half the slack 2.0x gives 45.11 J and those cells stay within 0.2 %. The full model
    that follows searches at the real deadline."""
    if hint is None or problem.deadline_s is None:
        return problem
    try:
        runtime = simulate_schedule(problem, hint).runtime_s
    except ScheduleError:
        return problem
    half_slack = (problem.costs.compute_only_s + problem.deadline_s) / 2
    tight = max(runtime * (1 + _HINT_TIME_TOL), half_slack)
    return dataclasses.replace(problem, deadline_s=tight) if tight < problem.deadline_s else problem


@dataclasses.dataclass(frozen=True)
class GuidedOutcome:
    """The guided stage's best schedule (or None), its simulated energy, and its source
    ("cover" realization, "guided" sub-problem, or the warm start's)."""

    schedule: Schedule | None
    energy_j: float | None
    source: str
    solve_s: float = 0.0


def guided_search(ctx: Context, problem: Problem, cover: CoverBound, warm: Schedule | None, *,
                  time_limit_s: float, relative_gap: float, warm_source: str = "warm start",
                  widen: bool = True) -> GuidedOutcome:
    """The cover's realization, then the guided sub-problem seeded with the better of it
    and ``warm`` (from ``warm_source``), until a schedule is within ``relative_gap`` of the
    cover bound. ``time_limit_s`` is the stage's share, ended by ``ctx``'s clock too (the
    sub-problem's limit: :meth:`Clock.solver_limit`); the sub-problems are solved by
    ``ctx.steps.solve_guided`` with the options' threads and progress."""
    tuning, clock, options = ctx.tuning, ctx.clock, ctx.options
    started = work.now()
    until = min(started + time_limit_s, clock.at)
    best = GuidedOutcome(warm, feasible_energy(problem, warm), warm_source)
    # The realization's cover solves get what one cover solve would: uncapped, on MobileNetV2
    # a72 50 % they spent the whole share (16.8 units) and the sub-problem never ran (5.215 J
    # instead of 4.812 J).
    realized = ctx.steps.realize_cover(problem, cover, time_limit_s=tuning.cover_limit_s,
                                       until=min(until, started + tuning.cover_limit(time_limit_s)),
                                       solve_cover=ctx.steps.cover_bound)
    e = feasible_energy(problem, realized)
    # On a tie with the presence model's schedule the realization wins: that one can need
    # arena copies (ResNet-18-CIFAR m4 70 %: 94 MOVEs).
    if e is not None and (best.energy_j is None or e < best.energy_j
                          or (e == best.energy_j and best.source == "presence")):
        best = GuidedOutcome(realized, e, "cover")
    bound = cover.energy_j
    if bound is None or (best.energy_j is not None and within_gap(best.energy_j, bound, relative_gap)):
        return best
    # The sub-problem, then wider ones while one closes short of the gap (with ``widen``,
    # the caller's say: where nothing after would use the time). BERT-base a72 70 %: the
    # first ended at 109.898 J in 4.5 s of 87 s, the widest at 109.856 J.
    steps = [(cover, tuning.cascade_depth), *(_widenings(cover, tuning.cascade_depth, tuning.wider_cascades)
                                              if widen else ())]
    out: BackendResult | None = None
    for k, (restricted, depth) in enumerate(steps):
        if k and (not _closed(out, relative_gap)
                  or (best.energy_j is not None and within_gap(best.energy_j, bound, relative_gap))):
            break
        try:   # the build (seconds per thousand nodes) stops at the stage's end too
            with step_until(until):
                built = build_guided(half_the_slack(problem, best.schedule), restricted, best.schedule, depth=depth,
                                     floor=bound)
        except BuildDeadline:
            break
        limit = clock.solver_limit(until - work.now())
        if limit <= 0.05:
            break
        # The widest searches on until the gap to the cover bound or the time's end.
        out = ctx.steps.solve_guided(built.model, "cpsat" if options.solver in ("auto", "cpsat") else options.solver,
                                     BackendOptions(time_limit_s=limit, threads=options.threads,
                                                    progress=options.progress, relative_gap=relative_gap,
                                                    large=tuning.large_model(built.model),
                                                    floor_only=k > 0 and k == len(steps) - 1,
                                                    full_subsolvers=GUIDED_SUBSOLVERS))
        if out.values is not None:
            s = built.schedule(out.values)
            e = feasible_energy(problem, s)
            if e is not None and (best.energy_j is None or e < best.energy_j):
                best = GuidedOutcome(s, e, "guided", solve_s=best.solve_s)
        best = dataclasses.replace(best, solve_s=best.solve_s + out.solve_time_s)
    return best


def _closed(out: BackendResult | None, relative_gap: float) -> bool:
    """The sub-problem's search ended at its own optimum (within the gap of its own bound)."""
    return out is not None and (out.status == "optimal" or (out.objective is not None and out.bound is not None
                                                            and within_gap(out.objective, out.bound, relative_gap)))


def _widenings(cover: CoverBound, depth: int, wider: int) -> Iterator[tuple[CoverBound, int]]:
    """Wider sub-problems: the other cover model's restores added, then ``wider`` deeper
    cascades than ``depth``."""
    own = set(cover.restores)
    extra = tuple(r for r in cover.other_restores if r not in own)
    wide = dataclasses.replace(cover, restores=cover.restores + extra) if extra else cover
    if extra:
        yield wide, depth
    for deeper in range(depth + 1, depth + 1 + wider):
        yield wide, deeper

