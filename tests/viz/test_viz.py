"""Plots: grid cells agree with the matrices, PNGs are real and byte-stable, lines match data."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from poet_compiler.devices.cost_model import costs_for
from poet_compiler.errors import PoetError
from poet_compiler.schedule.linearize import linearize
from poet_compiler.schedule.program import Instruction, Op, Program
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.schedule.simulate import simulate
from poet_compiler import viz
from tests.viz.graphs import chain, remat_and_paging_schedule

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def case():
    g = chain(4)
    s = remat_and_paging_schedule(g)
    # The DMA form: every transfer in the stage the matrices give it.
    return g, s, linearize(g, s, dma=True), costs_for(g, None)


def test_synchronous_program_draws_the_page_in_at_its_reader() -> None:
    """Without DMA the schedule's prefetch (stage 4, kept into 5) is made right before
    its reader in stage 5; the grid of the Program shows where it really happens."""
    g = chain(4)
    s = remat_and_paging_schedule(g)
    cells = viz.program_cells(linearize(g, s))
    assert cells[3, 1] == viz.PAGE_OUT and cells[4, 1] == viz.FLASH and cells[5, 1] == viz.PAGE_IN
    assert viz.schedule_cells(s)[4, 1] == viz.PAGE_IN


def test_program_cells_equal_schedule_cells(case):
    g, s, p, _ = case
    cells = viz.program_cells(p)
    assert np.array_equal(cells, viz.schedule_cells(s))
    assert cells[3, 1] == viz.PAGE_OUT and cells[4, 1] == viz.PAGE_IN
    assert cells[5, 2] == viz.RECOMPUTE and cells[7, 1] == viz.FLASH
    assert all(cells[t, t] == viz.COMPUTE for t in range(g.n))
    assert cells[4, 2] == viz.EMPTY  # dropped after stage 3


def test_stage_starts_follow_the_linearizer(case):
    _, _, p, _ = case
    starts = viz.stage_starts(p)
    assert len(starts) == p.n_nodes and starts == sorted(starts)
    # each stage's first COMPUTE of its own node lies inside the stage
    bounds = [*starts, len(p)]
    for t in range(p.n_nodes):
        ops = p.instructions[bounds[t]:bounds[t + 1]]
        assert Instruction(Op.COMPUTE, t) in ops


def test_stage_starts_from_meta_take_precedence(case):
    _, _, p, _ = case
    meta = Program(p.n_nodes, p.instructions, meta={"stage_starts": list(range(p.n_nodes))})
    assert viz.stage_starts(meta) == list(range(p.n_nodes))


def test_program_out_of_node_order_is_refused():
    p = Program(2, (Instruction(Op.COMPUTE, 1), Instruction(Op.COMPUTE, 0)))
    with pytest.raises(PoetError, match="node 1"):
        viz.stage_starts(p)
    with pytest.raises(PoetError, match="computes 1 of its 2"):
        viz.stage_starts(Program(2, (Instruction(Op.COMPUTE, 0),)))


def test_checkpoint_all_grid_is_lower_triangle():
    g = chain(3)
    cells = viz.schedule_cells(Schedule.checkpoint_all(g.n))
    assert np.array_equal(cells == viz.RESIDENT, np.tril(np.ones((g.n, g.n), bool), -1))


@pytest.mark.parametrize("use_program", [True, False])
def test_plot_grid_has_one_row_per_stage(case, use_program):
    g, s, p, _ = case
    fig = viz.plot_grid(g, p if use_program else s)
    (image,) = fig.axes[0].images
    assert image.get_array().shape == (g.n, g.n)
    labels = {t.get_text() for t in fig.axes[0].get_legend().get_texts()}
    assert {"compute", "recompute", "page-in", "page-out", "resident", "on flash"} <= labels
    png = viz.png_bytes(fig)
    assert png.startswith(PNG_MAGIC) and len(png) > 5000
    assert png == viz.png_bytes(viz.plot_grid(g, p if use_program else s))  # deterministic


def test_plot_grid_rejects_wrong_graph(case):
    _, _, p, _ = case
    with pytest.raises(PoetError, match="nodes"):
        viz.plot_grid(chain(3), p)
    with pytest.raises(PoetError):
        viz.plot_grid(None, "not a schedule")  # type: ignore[arg-type]


def test_plot_memory_draws_the_simulator_timeline(case, tmp_path):
    g, _, p, costs = case
    sim = simulate(g, costs, p)
    fig = viz.plot_memory(g, costs, p, budget=5000, arena_bytes=5500)
    ax = fig.axes[0]
    step = [ln for ln in ax.get_lines() if ln.get_label().startswith("live bytes")][0]
    assert list(step.get_ydata()) == list(sim.timeline)
    hlines = {float(ln.get_ydata()[0]) for ln in ax.get_lines() if len(ln.get_ydata()) == 2}
    assert {5000.0, 5500.0} <= hlines
    out = viz.save_png(fig, tmp_path / "m.png")
    assert out.read_bytes().startswith(PNG_MAGIC)


def _frame() -> pd.DataFrame:
    rows = []
    for strat, scale in (("optimal", 1.0), ("checkmate", 1.2), ("paging_only", 1.1)):
        for ram, dl in ((1000, 0.1), (2000, 0.2), (3000, 0.3)):
            e = None if (strat == "paging_only" and ram == 1000) else scale / ram
            rows.append({"model": "m", "device": "d", "ram": f"{ram}", "deadline": "1x", "strategy": strat,
                         "ram_budget_bytes": ram, "deadline_s": dl, "energy_j": e})
    return pd.DataFrame(rows)


def test_energy_curves_one_line_per_strategy():
    df = _frame()
    fig = viz.plot_energy_vs_ram(df)
    ax = fig.axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines() if not ln.get_label().startswith("_")}
    assert set(lines) == {"optimal", "checkmate", "paging_only"}
    assert len(lines["paging_only"].get_xdata()) == 2  # the infeasible point is not on the line
    assert list(lines["optimal"].get_xdata()) == pytest.approx([1000 / 1024, 2000 / 1024, 3000 / 1024])
    fig2 = viz.plot_energy_vs_deadline(df.assign(ram="50%"))
    assert len([ln for ln in fig2.axes[0].get_lines() if not ln.get_label().startswith("_")]) == 3
    fig3 = viz.plot_energy_vs_deadline(df)  # three RAM budgets: one line per (strategy, budget)
    assert len([ln for ln in fig3.axes[0].get_lines() if not ln.get_label().startswith("_")]) == 9


def test_energy_curves_split_by_the_other_budget():
    df = pd.concat([_frame(), _frame().assign(deadline="2x")])
    labels = {ln.get_label() for ln in viz.plot_energy_vs_ram(df).axes[0].get_lines()
              if not ln.get_label().startswith("_")}
    assert "optimal @ 1x" in labels and "optimal @ 2x" in labels


def test_energy_curves_need_their_columns():
    with pytest.raises(PoetError, match="energy_j"):
        viz.plot_energy_vs_ram(pd.DataFrame({"strategy": ["a"], "ram_budget_bytes": [1]}))


def test_graph_from_bytecode_replays_the_same_memory(case):
    from poet_compiler.codegen.bytecode import decode, encode

    g, _, p, costs = case
    decoded = decode(encode(p, g))
    rebuilt = viz.graph_from_decoded(decoded)
    assert [n.name for n in rebuilt.nodes] == [n.name for n in g.nodes]
    assert [n.inputs for n in rebuilt.nodes] == [n.inputs for n in g.nodes]
    trace = viz.memory_trace(rebuilt, viz.zero_costs(g.n), decoded.program)
    assert list(trace.live_bytes) == list(simulate(g, costs, p).timeline)
