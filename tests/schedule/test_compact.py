"""Arena compaction: MOVEs make room wherever the live bytes fit; the simulator judges."""

from __future__ import annotations

import pytest

from poet_compiler.errors import ScheduleError
from poet_compiler.schedule import compact
from poet_compiler.schedule.arena import plan_arena
from poet_compiler.schedule.cleanup import remove_pointless_work
from poet_compiler.schedule.compact import compact_arena, without_moves
from poet_compiler.schedule.linearize import linearize
from poet_compiler.schedule.program import Instruction, Op, Program
from poet_compiler.schedule.simulate import simulate
from poet_compiler.solve.baselines.capuchin import capuchin
from poet_compiler.solve.baselines.dtr import dtr
from poet_compiler.solve.finalize import finalize, result_of
from tests.support.graphs import training_problem


def _fragmenting():
    """A 9-node problem whose optimum (25.175 J) has live bytes within the budget (24,576
    of 25,292 B) and no static arena that fits (25,600 B)."""
    from poet_compiler.solve.milp import solve_milp
    from poet_compiler.solve.options import SolveOptions

    problem = training_problem(3, 4, "remat", slack=0.3)
    schedule = solve_milp(problem, SolveOptions(time_limit_s=60)).schedule
    assert schedule is not None
    program = remove_pointless_work(problem.graph, linearize(problem.graph, schedule, mode=problem.mode))
    return problem, schedule, program


def test_a_fragmented_program_is_compacted_within_the_budget() -> None:
    problem, _, program = _fragmenting()
    budget = problem.activation_budget
    static = plan_arena(problem.graph, program, budget_bytes=budget)
    assert static.arena_bytes is not None and static.arena_bytes > budget   # the case the compactor is for
    compacted = compact_arena(problem.graph, static, budget)
    assert compacted is not None and compacted.arena_bytes is not None and compacted.arena_bytes <= budget
    assert compacted.n_move >= 1 and compacted.meta["moved_bytes"] > 0
    assert without_moves(compacted).instructions == tuple(
        Instruction(x.op, x.node) for x in program.instructions)
    sim = simulate(problem.graph, problem.costs, compacted, ram_budget_bytes=budget)
    assert sim.n_move == compacted.n_move and sim.move_bytes == compacted.meta["moved_bytes"]
    # Explicit costs give no memory rates: the moves are free.
    assert sim.energy_j == pytest.approx(simulate(problem.graph, problem.costs, program).energy_j)
    again = compact_arena(problem.graph, static, budget)
    assert again == compacted   # deterministic


def test_finalize_compacts_instead_of_losing_the_schedule() -> None:
    from poet_compiler.solve.finalize import ArenaOvershoot, Layout, finalize_plan

    problem, schedule, _ = _fragmenting()
    kept = finalize(problem, schedule, strategy="t")
    assert kept.ok and kept.arena_bytes is not None and kept.arena_bytes <= problem.activation_budget
    assert kept.notes.n_move and kept.notes.move_bytes and kept.notes.move_j == 0.0
    no_room = Layout(compact_arena=lambda *a, **kw: None)   # no room to compact
    lost = finalize_plan(problem, schedule, strategy="t", layout=no_room)
    assert isinstance(lost.verdict, ArenaOvershoot) and lost.verdict.bytes > 0
    assert "fragmentation" in result_of(problem, lost, strategy="t").message


def test_a_static_layout_that_fits_is_kept_without_moves() -> None:
    problem = training_problem(1, 5, "remat", slack=0.3)
    res = dtr(problem)
    assert res.program is not None
    program = without_moves(res.program)
    planned = plan_arena(problem.graph, program)
    compacted = compact_arena(problem.graph, planned, planned.arena_bytes)
    assert compacted is not None and compacted.n_move == 0
    assert compacted.instructions == planned.instructions


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("strategy", [dtr, capuchin])
def test_any_program_compacts_at_its_live_peak(seed: int, strategy) -> None:
    """With the budget set to the program's own peak of live bytes (so static layouts
    fragment), the compacted program passes the simulator within that budget: moves only
    of resident buffers out of flight, no overlap, nothing outside the arena. With DMA
    (capuchin's transfers in flight) the compactor may find no room and says so."""
    dma = strategy is capuchin
    problem = training_problem(seed, 6, "poet" if dma else "remat", dma=dma, slack=0.2)
    res = strategy(problem)
    if res.program is None:
        pytest.skip(f"{strategy.__name__} found no schedule: {res.message}")
    program = without_moves(res.program)
    peak = simulate(problem.graph, problem.costs, program).peak_bytes
    compacted = compact_arena(problem.graph, program, peak)
    if compacted is None:
        assert dma
    else:
        assert compacted.arena_bytes is not None and compacted.arena_bytes <= peak
        sim = simulate(problem.graph, problem.costs, compacted, ram_budget_bytes=peak)
        assert sim.peak_bytes == peak and sim.n_move == compacted.n_move
        assert "added_fences" not in compacted.meta
    # With FENCEs allowed it always finds room, and adds FENCEs only where DMA needs them.
    fenced = compact_arena(problem.graph, program, peak, fences=True)
    assert fenced is not None and fenced.arena_bytes is not None and fenced.arena_bytes <= peak
    sim = simulate(problem.graph, problem.costs, fenced, ram_budget_bytes=peak)
    assert sim.peak_bytes == peak and sim.n_move == fenced.n_move
    added = fenced.meta.get("added_fences", 0)
    assert sum(x.op is Op.FENCE for x in fenced) == sum(x.op is Op.FENCE for x in program) + added
    assert len(without_moves(fenced)) == len(program) + added
    assert (compacted is None) == (added > 0)


G_TEXT = "COMPUTE 0 @0", "COMPUTE 1 @10", "FREE 0 @0"


def _chain_program(*extra: str, arena: int = 20) -> tuple[object, Program]:
    from tests.schedule.test_simulate import G, prog

    return G, prog(*G_TEXT, *extra, arena=arena)


def test_simulator_moves_a_buffer_and_prices_the_copy() -> None:
    """Checkpoint-all on the 5-node chain, with node 0 moved to the arena's spare top
    right after it is computed: same live bytes, one copy of its 10 bytes priced."""
    from dataclasses import replace

    from poet_compiler.schedule.schedule import Schedule
    from tests.schedule.test_simulate import G
    from tests.support.graphs import cost_table_from_graph

    planned = plan_arena(G, linearize(G, Schedule.checkpoint_all(G.n)))
    assert planned.arena_bytes is not None
    top = planned.arena_bytes
    moved = []
    for x in planned.instructions:
        moved.append(replace(x, offset=top) if x.node == 0 and x.op is not Op.COMPUTE else x)
        if x.op is Op.COMPUTE and x.node == 0:
            moved.append(Instruction(Op.MOVE, 0, top))
    program = Program(G.n, tuple(moved), top + 10)
    costs = replace(cost_table_from_graph(G), move_s_per_byte=0.01, move_j_per_byte=0.02)
    plain = simulate(G, costs, planned)
    sim = simulate(G, costs, program)
    assert (sim.n_move, sim.move_bytes, sim.peak_bytes) == (1, 10, plain.peak_bytes)
    assert sim.move_j == pytest.approx(0.2) and sim.energy_j == pytest.approx(plain.energy_j + 0.2)
    assert sim.runtime_s == pytest.approx(plain.runtime_s + 0.1)


@pytest.mark.parametrize("extra, rule", [
    (("MOVE 0 @0",), "not in RAM"),
    (("COMPUTE 2 @0", "MOVE 1 @5"), "overlaps live"),
    (("MOVE 1 @15",), "outside the arena"),
])
def test_simulator_refuses_a_bad_move(extra, rule) -> None:
    from tests.support.graphs import cost_table_from_graph

    graph, program = _chain_program(*extra)
    with pytest.raises(ScheduleError, match=rule):
        simulate(graph, cost_table_from_graph(graph), program)   # the rule breaks before the end


def test_simulator_refuses_a_move_in_flight_or_without_arena() -> None:
    from tests.schedule.test_simulate import G, prog
    from tests.support.graphs import cost_table_from_graph

    costs = cost_table_from_graph(G, dma=True)
    with pytest.raises(ScheduleError, match="in flight"):
        simulate(G, costs, prog("COMPUTE 0 @0", "PAGE_OUT 0 @0", "MOVE 0 @10", arena=20))
    with pytest.raises(ScheduleError, match="without an arena"):
        simulate(G, costs, prog("COMPUTE 0", "MOVE 0"))


def test_a_profile_prices_a_move_as_a_copy() -> None:
    from poet_compiler.devices.cost_model import costs_for
    from poet_compiler.devices.profile import load_profile

    m4 = load_profile("m4")
    problem = training_problem(0, 3, "remat")
    costs = costs_for(problem.graph, m4)
    assert costs.move_j(1000) == pytest.approx(2000 * m4.memory.energy_j_per_byte)
    assert costs.move_s(1000) == pytest.approx(2000 / m4.memory.bandwidth_bps)


def test_a_compacted_layout_that_misses_the_deadline_is_not_taken() -> None:
    """Moves take time: where their copies push the step past the deadline, finalize
    keeps the static layout (and its verdict) instead."""
    import dataclasses

    problem, schedule, program = _fragmenting()
    runtime = simulate(problem.graph, problem.costs, program).runtime_s
    slow = dataclasses.replace(problem.costs, move_s_per_byte=1.0)   # a second per byte copied
    tight = dataclasses.replace(problem, costs=slow, deadline_s=runtime)
    res = finalize(tight, schedule, strategy="t")
    assert not res.notes.n_move and res.status == "infeasible" and "fragmentation" in res.message
    roomy = dataclasses.replace(problem, costs=slow, deadline_s=runtime * 1e6)
    assert finalize(roomy, schedule, strategy="t").notes.n_move


def test_compaction_stops_at_its_time_limit() -> None:
    problem, _, program = _fragmenting()
    budget = problem.activation_budget
    static = plan_arena(problem.graph, program, budget_bytes=budget)
    assert compact_arena(problem.graph, static, budget, time_limit_s=0.0) is None   # room needed, no time
    assert compact_arena(problem.graph, static, budget, time_limit_s=60.0) is not None


def _in_flight_blocks_the_room():
    """f0 is being paged out at 15..25 of a 40-byte arena when the loss needs 20
    contiguous bytes (its output and workspace): no room without moving f0."""
    import dataclasses

    from poet_compiler.graph.ir import TrainingGraph
    from tests.schedule.test_simulate import prog
    from tests.support.graphs import cost_table_from_graph, forward_backward_chain

    nodes = list(forward_backward_chain(2).nodes)
    nodes[2] = dataclasses.replace(nodes[2], workspace_bytes=10)
    graph = TrainingGraph(name="loss_workspace", nodes=tuple(nodes))
    costs = cost_table_from_graph(graph, dma=True)
    program = prog("COMPUTE 0 @15", "COMPUTE 1 @0", "PAGE_OUT 0 @15", "COMPUTE 2", "FENCE", "FREE 1",
                   "COMPUTE 3", "FREE 2", "FREE 0", "COMPUTE 4", "FREE 3")
    return graph, costs, program


def _layout_leaving_no_room():
    """A static layout of that program that leaves the loss no room (45 > 40 bytes)."""
    import dataclasses

    from tests.schedule.test_simulate import prog

    return dataclasses.replace(prog("COMPUTE 0 @15", "COMPUTE 1 @0", "PAGE_OUT 0 @15", "COMPUTE 2 @25", "FENCE",
                                    "FREE 1 @0", "COMPUTE 3 @0", "FREE 2 @25", "FREE 0 @15", "COMPUTE 4 @10",
                                    "FREE 3 @0"), arena_bytes=45)


def test_a_buffer_in_flight_moves_after_a_fence_only_when_asked(monkeypatch) -> None:
    """Where the static plan's offsets are kept (the first placement alone), without
    ``fences`` the compactor finds no room; with it, it waits for the channel (FENCE) and
    moves f0; the simulator accepts the program and charges the wait (the page-out no
    longer overlaps the loss)."""
    graph, costs, program = _in_flight_blocks_the_room()
    monkeypatch.setattr(compact, "PLACEMENTS", compact.PLACEMENTS[:1])
    assert compact_arena(graph, program, 40) is None
    compacted = compact_arena(graph, program, 40, fences=True)
    assert compacted is not None and compacted.arena_bytes == 40 and compacted.meta["added_fences"] == 1
    assert [str(x) for x in compacted][2:6] == ["PAGE_OUT 0 @15", "FENCE", "MOVE 0 @30", "COMPUTE 2 @10"]
    sim = simulate(graph, costs, compacted, ram_budget_bytes=40)
    plain = simulate(graph, costs, program)
    assert sim.peak_bytes == plain.peak_bytes == 40 and sim.runtime_s > plain.runtime_s


def test_finalize_adds_fences_only_as_the_last_resort(monkeypatch) -> None:
    """finalize keeps such a program only with ``fence_last`` (the full model's, which
    the solve compares with the schedule it holds); otherwise it reports the arena. The
    static planner is made to give the layout that leaves no room (45 > 40 bytes)."""
    from poet_compiler.solve.finalize import ArenaOvershoot, Fenced, Layout, finalize_plan
    from poet_compiler.solve.problem import Problem

    graph, costs, program = _in_flight_blocks_the_room()
    static = Layout(plan_arena=lambda *a, **k: _layout_leaving_no_room())
    monkeypatch.setattr(compact, "PLACEMENTS", compact.PLACEMENTS[:1])     # the static offsets kept
    problem = Problem(graph=graph, costs=costs, ram_budget_bytes=40, mode="poet")
    plain = finalize_plan(problem, program, strategy="t", arena_time_s=5.0, layout=static)
    assert isinstance(plain.verdict, ArenaOvershoot) and "arena" in result_of(problem, plain, strategy="t").message
    last = finalize_plan(problem, program, strategy="t", arena_time_s=5.0, fence_last=True, layout=static)
    assert last.verdict == Fenced(1) and last.program.meta["added_fences"] == 1
    assert last.energy_j >= plain.energy_j


def test_another_placement_needs_no_fence_where_the_static_offsets_do() -> None:
    """The same program with every placement: one that does not keep f0 at its static
    offset leaves the loss its room, with neither a MOVE nor a FENCE."""
    graph, costs, program = _in_flight_blocks_the_room()
    laid = compact_arena(graph, program, 40)
    assert laid is not None and laid.n_move == 0 and "added_fences" not in laid.meta
    sim = simulate(graph, costs, laid, ram_budget_bytes=40)
    assert sim.runtime_s == simulate(graph, costs, program).runtime_s


def test_compaction_keeps_the_cheapest_placement(monkeypatch) -> None:
    """Each placement alone, then all of them: the layout kept moves no more bytes than
    any placement's (and exactly the least), and with a cost the caller gives (here the
    negated bytes moved, to see that it is the cost that decides) the dearest by bytes."""
    problem, _, program = _fragmenting()
    budget = problem.activation_budget
    static = plan_arena(problem.graph, program, budget_bytes=budget)
    every = compact.PLACEMENTS
    moved = []
    for placement in every:
        monkeypatch.setattr(compact, "PLACEMENTS", (placement,))
        alone = compact_arena(problem.graph, static, budget)
        if alone is not None:
            simulate(problem.graph, problem.costs, alone, ram_budget_bytes=budget)   # a valid layout
            moved.append(alone.meta["moved_bytes"])
    monkeypatch.setattr(compact, "PLACEMENTS", every)
    assert len(set(moved)) > 1     # the placements differ on this program
    kept = compact_arena(problem.graph, static, budget)
    assert kept is not None and kept.meta["moved_bytes"] == min(moved)
    dearest = compact_arena(problem.graph, static, budget, cost=lambda p: -float(p.meta["moved_bytes"]))
    assert dearest is not None and dearest.meta["moved_bytes"] == max(moved)


def test_past_the_meters_wall_cap_the_first_layout_found_is_the_answer(monkeypatch) -> None:
    """A compile stopped by --time-limit still gets a compacted layout, but not every
    placement's (each walk replays the program: 0.5 s on gpt2_large): the first that lays
    the program out, as if it were the only one."""
    import time

    from poet_compiler import work

    problem, _, program = _fragmenting()
    budget = problem.activation_budget
    static = plan_arena(problem.graph, program, budget_bytes=budget)
    walks: list[object] = []
    real = compact._walk

    def counted(walk, prog):  # noqa: ANN001, ANN202
        walks.append(walk.placement)
        return real(walk, prog)

    monkeypatch.setattr(compact, "_walk", counted)
    with work.metered(work.Meter(wall_at=time.perf_counter() - 1.0)):
        capped = compact_arena(problem.graph, static, budget)
    assert capped is not None and capped.arena_bytes is not None and capped.arena_bytes <= budget
    assert walks == [compact.PLACEMENTS[0]]
    walks.clear()
    monkeypatch.setattr(compact, "PLACEMENTS", compact.PLACEMENTS[:1])
    assert compact_arena(problem.graph, static, budget) == capped
