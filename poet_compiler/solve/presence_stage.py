"""The presence stage: the presence bound (:mod:`.presence`) before the guided stage.

Part of :func:`poet_compiler.solve.milp.solve_milp`'s pipeline: cover bound, presence
stage, guided stage, full model. Its bound is the better of the two relaxations whenever
the presence model is small enough to build (:data:`~.presence.MAX_PAIRS`), and its
solution, realized as a schedule, is the guided stage's hint when the simulator finds it
feasible and cheaper than the heuristics' best.
"""

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

# Of the work left after the cover, what the presence bound may take before the guided
# stage starts from its bound. The README demo closes its bound in 10.5 deterministic s
# (0.4 of the default effort left is 12). Against 0.6, on the ablation's cells
# (docs/optimizer.md, "Ablation"): DAG 100 at 80 % -12.2 %, ResNet-18-CIFAR m4 30 % 1.5x
# -0.78 %, DAG 250 at 90 % -0.76 %, ResNet-18-CIFAR m4 50 % 1.5x +0.50 % (its hint was
# better after the longer search), the demo and VGG16-CIFAR m4 30 % 1.5x the same. At 0.25
# the demo is no longer proven.
PRESENCE_SHARE = 0.4


def presence_stage(tight: Problem, cover: CoverBound, hint: Schedule | None, extra: ResultExtra, *,
                   clock: Clock, gap: float) -> tuple[CoverBound, Schedule | None, str]:
    """The presence bound (:mod:`.presence`) when the best schedule known (``hint``, the
    heuristics' best) is not within ``gap`` of the cover bound and the model is small
    enough. Returns ``cover`` with the better of the two bounds (its restores still
    guide, and the presence model's join them: ``CoverBound.staged``), and the hint for
    the guided stage with its source: the presence model's solution as a schedule when
    the simulator finds it feasible and cheaper.

    It runs before the guided stage so that the guided search stops at the better bound;
    on the README demo its schedule is the optimum and its bound proves it (4 s), where
    the cover leaves 11 % of the restores' energy open and the full model's bound still
    9 % after 50 s. It gets PRESENCE_SHARE of the work left."""
    upper = feasible_energy(tight, hint) if hint is not None else None
    if cover.energy_j is None or (upper is not None and within_gap(upper, cover.energy_j, gap)):
        return cover, hint, "warm start"
    if not tight.synchronous:
        # Stage-long transfers (DMA with a deadline or static power): the search is
        # restricted to that family, whose full-model bound was the higher one (VGG16
        # a72 30 % 2.0x: 25.79 J against 24.81 J), the model's schedules are synchronous,
        # and its 30 % of the time cost the guided stage its schedules (ResNet-18 a72
        # 30 % 2.0x: 45.66 -> 51.72 J; a72 70 % 1.0x: no schedule).
        extra.set(presence={"skipped": "stage-long transfers"})
        return cover, hint, "warm start"
    size = presence_pairs(tight)
    if size > PRESENCE_MAX_PAIRS:
        extra.set(presence={"skipped": f"{size} (tensor, point) pairs > {PRESENCE_MAX_PAIRS}"})
        return cover, hint, "warm start"
    limit = clock.solver_limit(PRESENCE_SHARE * clock.left())
    if limit < MIN_STAGE_S:
        return cover, hint, "warm start"
    program = to_program(tight, hint) if hint is not None else None
    with clock.stage("presence"):
        # To its own optimum (no gap): where the relaxation is tight that proves the
        # schedule optimal, and the last stretch of the core search is short.
        found = presence_bound(tight, time_limit_s=limit, hint=program)
    extra.set(presence=found.summary(), presence_solve_s=round(found.solve_s, 3))
    source = "warm start"
    if found.schedule is not None:
        energy = feasible_energy(tight, found.schedule)
        if energy is not None and (upper is None or energy < upper):
            hint, source = found.schedule, "presence"
    if found.energy_j is not None and found.energy_j > cover.energy_j:
        cover = dataclasses.replace(cover, energy_j=found.energy_j)
    # The guided stage opens the model's restores beside the cover's (presence._choice).
    return dataclasses.replace(cover, staged=found.choice), hint, source
