"""Arena reserves: a planned arena's overflow read back as events of the interval model."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from poet_compiler.schedule.arena import buffers_of
from poet_compiler.schedule.program import Op, Program
from poet_compiler.solve import finalize as finalize_mod
from poet_compiler.solve.arena_reserve import as_reserves, instruction_events, overflow_by_event
from poet_compiler.solve.backends.native import NativeLimits, solve_native
from poet_compiler.solve.finalize import finalize
from poet_compiler.solve.formulation.interval import Reserve, build_interval, event
from poet_compiler.solve.problem import feasible_energy
from tests.support.graphs import training_problem


def _program(seed: int = 3, n_fwd: int = 4):
    """A problem and the interval model's optimal schedule for it, linearized and laid out."""
    problem = training_problem(seed, n_fwd, "remat", slack=0.3)
    im = build_interval(problem)
    out = solve_native(im.model, NativeLimits(time_limit_s=20, workers=1))
    assert out.status == "optimal"
    res = finalize(problem, im.schedule(out.value), strategy="interval")
    assert res.program is not None and res.program.n_recompute > 0
    return problem, res.program


def _shifted(program: Program, by: int) -> Program:
    """The same Program with every buffer placed ``by`` bytes higher."""
    ins = tuple(x if x.offset is None else dataclasses.replace(x, offset=x.offset + by) for x in program.instructions)
    return Program(program.n_nodes, ins, (program.arena_bytes or 0) + by, dict(program.meta))


def test_allocations_map_to_their_stage_and_slot() -> None:
    problem, program = _program()
    events = instruction_events(program)
    assert events == sorted(events)                     # the Program runs in event order
    first: set[int] = set()
    for ins, e in zip(program.instructions, events):
        if ins.op is Op.COMPUTE and ins.node not in first:
            assert e == event(ins.node, ins.node, problem.n)   # node t first computed in stage t
            first.add(ins.node)
        elif ins.op in (Op.COMPUTE, Op.PAGE_IN):
            assert e % problem.n == ins.node and e // problem.n > ins.node


def test_a_layout_within_the_budget_reserves_nothing() -> None:
    problem, program = _program()
    assert program.arena_bytes is not None
    assert not overflow_by_event(problem.graph, program, program.arena_bytes).any()
    assert as_reserves(overflow_by_event(problem.graph, program, program.arena_bytes)) == []


def test_an_overflowing_layout_reserves_its_overflow_where_its_buffers_live() -> None:
    """Every buffer placed 100 bytes above the budget's top is reserved over its own
    events, with at least its overflow (more where its workspace also overflows)."""
    problem, program = _program()
    budget = problem.activation_budget
    high = _shifted(program, budget)        # every buffer now starts at or above the budget
    profile = overflow_by_event(problem.graph, high, budget)
    events = instruction_events(high)
    offsets = {k: x.offset for k, x in enumerate(high.instructions)}
    for b in buffers_of(problem.graph, high):
        span = profile[events[b.start]:events[max(b.start, b.end - 1)] + 1]
        over = (offsets[b.start] or 0) + b.size - budget
        assert (span >= over).all()
    reserves = as_reserves(profile)
    assert reserves and all(r.bytes > 0 and r.end > r.start for r in reserves)
    rebuilt = np.zeros_like(profile)
    for r in reserves:
        rebuilt[r.start:r.end] = r.bytes
    assert (rebuilt == profile).all()


def test_a_reserve_is_kept_free_by_the_interval_model() -> None:
    """Reserving the whole budget at the loss's slot leaves no room for it: no solution;
    a reserve of a few bytes where nothing is tight changes nothing."""
    problem = training_problem(3, 4, "remat", slack=0.3)
    loss = problem.n // 2
    at = event(loss, loss, problem.n)
    full = build_interval(problem, reserves=[Reserve(at, at + 1, problem.activation_budget)])
    assert solve_native(full.model, NativeLimits(time_limit_s=20, workers=1)).status == "infeasible"
    free = build_interval(problem)
    small = build_interval(problem, reserves=[Reserve(0, 1, 1)])
    a = solve_native(free.model, NativeLimits(time_limit_s=20, workers=1))
    b = solve_native(small.model, NativeLimits(time_limit_s=20, workers=1))
    assert a.status == b.status == "optimal"
    ea = feasible_energy(problem, free.schedule(a.value))
    eb = feasible_energy(problem, small.schedule(b.value))
    assert ea is not None and eb == pytest.approx(ea)


def test_finalize_keeps_a_layout_of_the_same_plan(monkeypatch) -> None:
    """A layout that fits is used as is (no arena planned again); one of another plan, or
    one that does not fit, is planned again."""
    problem, program = _program(seed=2)       # its first layout fits
    planned: list[int] = []
    real = finalize_mod.plan_arena

    def spy(*a, **k):
        planned.append(1)
        return real(*a, **k)

    monkeypatch.setattr(finalize_mod, "plan_arena", spy)
    bare = Program(program.n_nodes, tuple(dataclasses.replace(x, offset=None) for x in program.instructions))
    kept = finalize(problem, bare, strategy="oracle", layout=program)
    assert kept.ok and not planned and kept.arena_bytes == program.arena_bytes
    too_high = _shifted(program, problem.activation_budget)
    again = finalize(problem, bare, strategy="oracle", layout=too_high)
    assert again.ok and planned
