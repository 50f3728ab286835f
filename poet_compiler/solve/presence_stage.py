"""The presence stage of :func:`~.milp.solve_milp`: the presence bound (:mod:`.presence`)
between the cover bound and the guided stage."""

from __future__ import annotations

import dataclasses

from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.backends.base import within_gap
from poet_compiler.solve.baselines._common import to_program
from poet_compiler.solve.clock import MIN_STAGE_S, Clock
from poet_compiler.solve.cover import CoverBound
from poet_compiler.solve.presence import MAX_PAIRS as PRESENCE_MAX_PAIRS
from poet_compiler.solve.presence import pairs as presence_pairs
from poet_compiler.solve.presence import presence_bound
from poet_compiler.solve.problem import Problem, feasible_energy
from poet_compiler.solve.result import ResultExtra

# Of the work left after the cover, what the presence bound may take. The README demo
# closes its bound in 10.5 deterministic s (0.4 of the default effort left is 12). Against
# 0.6 on the ablation's cells (docs/optimizer.md): DAG 100 at 80 % -12.2 %, ResNet-18-CIFAR
# m4 30 % 1.5x -0.78 %, DAG 250 at 90 % -0.76 %, ResNet-18-CIFAR m4 50 % 1.5x +0.50 %, the
# rest the same. At 0.25 the demo is no longer proven.
PRESENCE_SHARE = 0.4


def presence_stage(tight: Problem, cover: CoverBound, hint: Schedule | None, extra: ResultExtra, *,
                   clock: Clock, gap: float) -> tuple[CoverBound, Schedule | None, str]:
    """The presence bound when ``hint`` (the heuristics' best) is not within ``gap`` of the
    cover bound and the model is small enough. Returns ``cover`` with the better bound and
    the presence model's restores (``CoverBound.staged``), and the guided stage's hint with
    its source: the presence solution's schedule when feasible and cheaper. Before the
    guided stage, so that it stops at the better bound: on the README demo the cover leaves
    11 % of the restores' energy open, the full model 9 % after 50 s; this proves it."""
    upper = feasible_energy(tight, hint)
    if cover.energy_j is None or (upper is not None and within_gap(upper, cover.energy_j, gap)):
        return cover, hint, "warm start"
    if not tight.synchronous or (size := presence_pairs(tight)) > PRESENCE_MAX_PAIRS:
        # Stage-long transfers: the model's schedules are synchronous, and its time cost the
        # guided stage its schedules (ResNet-18 a72 30 % 2.0x: 45.66 -> 51.72 J).
        why = f"{size} (tensor, point) pairs > {PRESENCE_MAX_PAIRS}" if tight.synchronous else "stage-long transfers"
        extra.set(presence={"skipped": why})
        return cover, hint, "warm start"
    limit = clock.solver_limit(PRESENCE_SHARE * clock.left())
    if limit < MIN_STAGE_S:
        return cover, hint, "warm start"
    with clock.stage("presence"):   # to its optimum (no gap): where tight, that is the proof
        found = presence_bound(tight, time_limit_s=limit, hint=None if hint is None else to_program(tight, hint))
    extra.set(presence=found.summary(), presence_solve_s=round(found.solve_s, 3))
    source = "warm start"
    energy = feasible_energy(tight, found.schedule)
    if energy is not None and (upper is None or energy < upper):
        hint, source = found.schedule, "presence"
    if found.energy_j is not None and found.energy_j > cover.energy_j:
        cover = dataclasses.replace(cover, energy_j=found.energy_j)
    return dataclasses.replace(cover, staged=found.choice), hint, source
