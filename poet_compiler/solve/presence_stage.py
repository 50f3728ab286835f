"""The presence stage: the presence bound (:mod:`.presence`) before the guided stage, and
the search it may leave running beside the stages after it (:class:`LateBound`).

Part of :func:`poet_compiler.solve.milp.solve_milp`'s pipeline: cover bound, presence
stage, guided stage, full model. Its bound is the better of the two relaxations whenever
the presence model is small enough to build (:data:`~.presence.MAX_PAIRS`), and its
solution, realized as a schedule, is the guided stage's hint when the simulator finds it
feasible and cheaper than the heuristics' best.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass

from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.backends.base import within_gap
from poet_compiler.solve.baselines._common import to_program
from poet_compiler.solve.clock import MIN_STAGE_S, Clock
from poet_compiler.solve.cover import CoverBound
from poet_compiler.solve.presence import MAX_PAIRS as PRESENCE_MAX_PAIRS
from poet_compiler.solve.presence import PresenceBound, PresenceRun, start_presence
from poet_compiler.solve.presence import pairs as presence_pairs
from poet_compiler.solve.problem import Problem, feasible_energy
from poet_compiler.solve.result import ResultExtra

# Of the time left after the cover, what the presence bound may take before the guided
# stage starts from its bound (a search not closed by then goes on beside it: LateBound).
PRESENCE_SHARE = 0.3
# A search that is near its own optimum when its share ends (its best solution within
# NEAR_GAP of its bound) waits on for up to NEAR_SHARE of the time left at the stage's
# start, while it stays near and until it closes: closed, its bound is the proof and its
# solution the guided stage's best guide. Measured on ResNet-18-CIFAR m4 (BENCHMARKS.md,
# session 22): at 50 % the search is 0.09 % from its optimum when the 0.3 share ends and
# closes some 10 s later; a fixed 0.45 share took 50 % 1.5x from 0.20 % to 0.09 % (the
# guided stage closed in 5 s from the closed model's choice), but at 30 %, where the search
# is still 0.5 % from its own optimum after its share and does not close in 60 s, it took
# the guided stage's time (1.5x 0.99 -> 1.45 %, 2.0x 0.52 -> 1.13 %).
NEAR_GAP = 0.0025
NEAR_SHARE = 0.5
# How often a search waited on past its share is asked how near it is.
NEAR_POLL_S = 0.25
# A search left running may be held for as long as it runs: its own limit is this many
# times the time left (LateBound ends it at the family's end).
HELD_ROOM = 2.0
# How often a search given the solve's idle time is asked for its bound (LateBound.use_idle_time).
IDLE_POLL_S = 0.2


def presence_stage(tight: Problem, cover: CoverBound, hint: Schedule | None, extra: ResultExtra, *,
                   clock: Clock, gap: float, late: LateBound | None = None) -> tuple[CoverBound, Schedule | None, str]:
    """The presence bound (:mod:`.presence`) when the best schedule known (``hint``, the
    heuristics' best) is not within ``gap`` of the cover bound and the model is small
    enough. Returns ``cover`` with the better of the two bounds (its restores still
    guide, and the presence model's join them: ``CoverBound.staged``), and the hint for
    the guided stage with its source: the presence model's solution as a schedule when
    the simulator finds it feasible and cheaper.

    It runs before the guided stage so that the guided search stops at the better bound;
    on the README demo its schedule is the optimum and its bound proves it (4 s), where
    the cover leaves 11 % of the restores' energy open and the full model's bound still
    9 % after 50 s. It gets PRESENCE_SHARE of the time left, and up to NEAR_SHARE while
    its best solution is within NEAR_GAP of its bound; with ``late``, a search not
    closed by then goes on in the background until the solve's end (:class:`LateBound`),
    where it goes at once in recompute-only mode with no schedule in hand."""
    upper = feasible_energy(tight, hint) if hint is not None else None
    if cover.energy_j is None or (upper is not None and within_gap(upper, cover.energy_j, gap)):
        return cover, hint, "warm start"
    if not tight.synchronous:
        # Stage-long transfers (DMA with a deadline or static power): the search is
        # restricted to that family, whose full-model bound was the higher one (VGG16
        # a72 30 % 2.0x: 25.79 J against 24.81 J), the model's schedules are synchronous,
        # and its 30 % of the time cost the guided stage its schedules (ResNet-18 a72
        # 30 % 2.0x: 45.66 -> 51.72 J; a72 70 % 1.0x: no schedule). BENCHMARKS.md, session 9.
        extra.set(presence={"skipped": "stage-long transfers"})
        return cover, hint, "warm start"
    size = presence_pairs(tight)
    if size > PRESENCE_MAX_PAIRS:
        extra.set(presence={"skipped": f"{size} (tensor, point) pairs > {PRESENCE_MAX_PAIRS}"})
        return cover, hint, "warm start"
    # No schedule in hand in recompute-only mode: finding one comes first (the guided
    # stage's interval search), and the search goes to the background at once. On DAG 250
    # at 80 % its 88 s share ended at 611-615 J with no schedule, below what the full model
    # proved in 40 s (626-630 J), while the guided stage ran out of time for a schedule.
    at_once = late is not None and upper is None and not tight.allows_paging
    left = clock.left()
    limit = 0.0 if at_once else clock.solver_limit(PRESENCE_SHARE * left)
    if limit < MIN_STAGE_S and not at_once:
        return cover, hint, "warm start"
    program = to_program(tight, hint) if hint is not None else None
    with clock.stage("presence"):
        # To its own optimum (no gap): where the relaxation is tight that proves the
        # schedule optimal, and the last stretch of the core search is short (README demo:
        # 4.4 s either way).
        # Left running, the search is held (SIGSTOP) while the guided stage runs, and its
        # own wall limit runs on meanwhile: it gets room for that (the time left, twice),
        # and LateBound.stop ends it at the family's end in any case. With the time left
        # only, it had ended by itself before the idle time after the guided stage.
        run = start_presence(tight, time_limit_s=HELD_ROOM * clock.left() if late is not None else limit,
                             hint=program)
        run.wait(limit - (time.perf_counter() - run.started), realize=False)
        near = not at_once and _wait_while_near(run, clock.solver_limit(NEAR_SHARE * left) - limit)
        found = run.bound(realize=True)     # realized once, at the end of the wait
        if late is not None and run.running:
            run.in_background()
            late.run = run
        else:
            run.stop()
    extra.set(presence={**found.summary(), "waited_near": near}, presence_solve_s=round(found.solve_s, 3))
    source = "warm start"
    if found.schedule is not None:
        energy = feasible_energy(tight, found.schedule)
        if energy is not None and (upper is None or energy < upper):
            hint, source = found.schedule, "presence"
    if found.energy_j is not None and found.energy_j > cover.energy_j:
        cover = dataclasses.replace(cover, energy_j=found.energy_j)
    # The guided stage opens the model's restores beside the cover's (presence._choice).
    return dataclasses.replace(cover, staged=found.choice), hint, source


def _wait_while_near(run: PresenceRun, more_s: float) -> bool:
    """Wait on for at most ``more_s`` while the search's best solution is within NEAR_GAP
    of its bound and it has not ended; whether it waited at all."""
    until = time.perf_counter() + more_s
    waited = False
    while run.running and time.perf_counter() < until and run.near(NEAR_GAP):
        run.wait(min(NEAR_POLL_S, until - time.perf_counter()), realize=False)
        waited = True
    return waited


@dataclass
class LateBound:
    """The presence search left running after its share of the time (:func:`presence_stage`).

    Its core search runs on one worker, and on the layered DAGs it proves its bound only
    after minutes (DAG 100 at 80 %: 261.87 J after its 87 s share, 267.43 J closed after
    about 300 s). The stages after it do not need its proof to search, so it goes on in
    its child while they run: the guided stage with every thread (with one fewer, the
    interval search's schedule on that DAG was 0.2-0.4 % dearer), the full model with one
    fewer (:meth:`spare`). The family's result is judged by the better bound when it is
    stopped, at the family's end (:meth:`raise_bound`)."""

    run: PresenceRun | None = None

    @property
    def running(self) -> bool:
        return self.run is not None and self.run.running

    def spare(self, threads: int) -> int:
        """The solver threads the other stages may use while it runs."""
        return max(1, threads - 1) if self.running else threads

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """The search paused for the block: the guided stage's searches (CP-SAT's
        interleaved search stops on deterministic time, and a third process on two cores
        let the wall cap stop it first: DAG 100 at 80 % in 60 s, 270.08 -> 284.83 J)."""
        run = self.run if self.running else None
        if run is not None:
            run.pause(True)
        try:
            yield
        finally:
            if run is not None:
                run.pause(False)

    def use_idle_time(self, until: float, upper: float | None, gap: float) -> None:
        """Let the search go on alone until ``until`` (time no later stage uses), its own
        end, or a bound within ``gap`` of ``upper`` (the schedule kept). Where the full
        model is skipped for want of time, that time was idle: ResNet-18-CIFAR m4 50 %
        2.0x stopped at 47.4 s of its 60 s with the search at 106.660 J, whose optimum is
        106.729 J (closed alone in 40-60 s)."""
        run = self.run if self.running else None
        while run is not None and run.running and upper is not None and time.perf_counter() < until:
            found = run.bound()
            if found.energy_j is not None and within_gap(upper, found.energy_j, gap):
                return
            time.sleep(min(IDLE_POLL_S, max(0.0, until - time.perf_counter())))

    def stop(self) -> PresenceBound | None:
        run, self.run = self.run, None
        return run.stop() if run is not None else None

    def raise_bound(self, bound: float | None, extra: ResultExtra) -> float | None:
        """Stop the search; the better of ``bound`` and its bound, recorded in ``extra``."""
        found = self.stop()
        if found is None or found.energy_j is None:
            return bound
        extra.set(presence={**(extra.presence or {}), **found.summary(), "background": True},
                  presence_solve_s=round(found.solve_s, 3))
        return found.energy_j if bound is None else max(bound, found.energy_j)
