"""schedule_from_program inverts linearize, and turns DTR's programs into warm starts."""

from __future__ import annotations

import pytest

from poet_compiler.schedule.from_program import schedule_from_program
from poet_compiler.schedule.linearize import linearize
from poet_compiler.schedule.program import Instruction, Op, Program
from poet_compiler.schedule.simulate import simulate
from poet_compiler.solve.baselines import BASELINES
from tests.support.graphs import chain_graph, cost_table_from_graph, random_dag, random_problem
from tests.support.schedules import random_schedule


@pytest.mark.parametrize("mode", ["poet", "remat", "paging", "none"])
@pytest.mark.parametrize("seed", range(8))
def test_linearized_schedules_come_back_with_the_same_work(seed: int, mode: str) -> None:
    """Random schedules are wasteful (tensors kept into a stage that frees them at its
    start, a tensor paged out twice in one stage); reading the program back drops that
    waste and keeps all the computes and page-ins."""
    graph = random_dag(seed, 7)
    costs = cost_table_from_graph(graph)
    program = linearize(graph, random_schedule(graph, seed, mode), mode=mode)
    back = schedule_from_program(graph, program, mode)
    assert back is not None
    again = linearize(graph, back, mode=mode)
    a, b = simulate(graph, costs, program), simulate(graph, costs, again)
    assert b.energy_j <= a.energy_j * (1 + 1e-12)
    assert b.runtime_s <= a.runtime_s * (1 + 1e-12)
    assert b.peak_bytes <= a.peak_bytes
    work = (Op.COMPUTE, Op.PAGE_IN)  # frees and fences may move, repeated page-outs merge
    assert [i for i in again if i.op in work] == [i for i in program if i.op in work]
    # Every page-in still has its page-out; page-outs of a tensor never paged back in
    # may go (the simulator above checked that the program is valid without them).
    assert {i.node for i in again if i.op is Op.PAGE_OUT} <= {i.node for i in program if i.op is Op.PAGE_OUT}


@pytest.mark.parametrize("mode", ["poet", "paging"])
@pytest.mark.parametrize("seed", range(8))
def test_dma_programs_come_back_exactly(seed: int, mode: str) -> None:
    """With DMA (stage-long transfers) the inverse keeps every instruction of the work."""
    graph = random_dag(seed, 7)
    costs = cost_table_from_graph(graph, dma=True)
    program = linearize(graph, random_schedule(graph, seed, mode), mode=mode, dma=True)
    back = schedule_from_program(graph, program, mode, dma=True)
    assert back is not None
    again = linearize(graph, back, mode=mode, dma=True)
    a, b = simulate(graph, costs, program), simulate(graph, costs, again)
    assert b.energy_j == pytest.approx(a.energy_j, rel=1e-12)
    assert b.runtime_s == pytest.approx(a.runtime_s, rel=1e-12)
    assert b.peak_bytes <= a.peak_bytes
    work = (Op.COMPUTE, Op.PAGE_OUT, Op.PAGE_IN)
    assert [i for i in again if i.op in work] == [i for i in program if i.op in work]


@pytest.mark.parametrize("strategy", ["chen_greedy", "capuchin", "checkpoint_all"])
@pytest.mark.parametrize("seed", range(4))
def test_exact_inverse_on_heuristic_schedules(seed: int, strategy: str) -> None:
    problem = random_problem(seed, 8, "poet")
    res = BASELINES[strategy](problem)
    if res.schedule is None:
        pytest.skip(f"{strategy} has no schedule at this budget")
    dma = problem.costs.dma
    program = linearize(problem.graph, res.schedule, dma=dma)
    back = schedule_from_program(problem.graph, program, dma=dma)
    assert back is not None
    again = linearize(problem.graph, back, dma=dma)
    if dma:
        assert again == program
        return
    # Without DMA the heuristics' stage-long prefetches are read back as the synchronous
    # page-ins right before their reader: the same work, never more RAM, time or energy.
    a, b = (simulate(problem.graph, problem.costs, p) for p in (program, again))
    assert [i for i in again if i.op is Op.COMPUTE] == [i for i in program if i.op is Op.COMPUTE]
    assert b.energy_j <= a.energy_j * (1 + 1e-12)
    assert b.runtime_s <= a.runtime_s * (1 + 1e-12)
    assert b.peak_bytes <= a.peak_bytes


@pytest.mark.parametrize("seed", range(6))
def test_dtr_programs_become_schedules_of_no_more_energy(seed: int) -> None:
    problem = random_problem(seed, 10, "remat")
    res = BASELINES["dtr"](problem)
    if res.program is None:
        pytest.skip("dtr found no program at this budget")
    schedule = schedule_from_program(problem.graph, res.program, "remat")
    assert schedule is not None
    sim = simulate(problem.graph, problem.costs, linearize(problem.graph, schedule, mode="remat"))
    assert sim.energy_j <= res.energy_j * (1 + 1e-9)


def test_out_of_order_first_compute_has_no_schedule() -> None:
    graph = chain_graph(3)
    in_order = Program(3, (Instruction(Op.COMPUTE, 0), Instruction(Op.COMPUTE, 1), Instruction(Op.COMPUTE, 2)))
    # The control: the same computes in graph order do have a schedule, so the None
    # below is about the order and nothing else.
    back = schedule_from_program(graph, in_order)
    assert back is not None
    assert [i.node for i in linearize(graph, back) if i.op is Op.COMPUTE] == [0, 1, 2]
    program = Program(3, (Instruction(Op.COMPUTE, 0), Instruction(Op.COMPUTE, 2), Instruction(Op.COMPUTE, 1)))
    assert schedule_from_program(graph, program) is None
