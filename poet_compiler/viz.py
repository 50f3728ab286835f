"""Plots of schedules and comparisons (matplotlib, Agg backend, deterministic).

- :func:`plot_grid` — the schedule as a timestep x node grid (Fig. 2 of the POET paper):
  each cell says what happens to node ``i`` in stage ``t`` (computed, recomputed, paged
  in or out) or where it lives when the stage starts (RAM, flash).
- :func:`plot_memory` — live bytes at every instruction of a Program, replayed by the
  simulator, against the RAM budget and the arena size.
- :func:`plot_energy_vs_ram` / :func:`plot_energy_vs_deadline` — sweep DataFrames
  (:mod:`poet_compiler.comparison`) as Figs. 3 and 4 of the paper.

Every function returns the :class:`~matplotlib.figure.Figure` (drawing into ``ax`` when
given); :func:`save_png` writes one atomically with no timestamp metadata, so the same
inputs give the same bytes.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")  # headless and deterministic; must precede pyplot's import

import numpy as np  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from poet_compiler.codegen.bytecode.to_graph import graph_from_decoded, zero_costs  # noqa: E402,F401 - re-exported
from poet_compiler.errors import PoetError  # noqa: E402
from poet_compiler.fileio import atomic_write_bytes  # noqa: E402
from poet_compiler.schedule.interpreter import ProgramInterpreter  # noqa: E402
from poet_compiler.schedule.program import Instruction, Op, Program  # noqa: E402
from poet_compiler.schedule.schedule import Schedule  # noqa: E402

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

    from poet_compiler.devices.costs import CostTable
    from poet_compiler.graph.ir import TrainingGraph

# Cell states of the grid, in drawing precedence (an action in a stage hides the state).
EMPTY, FLASH, RESIDENT, PAGE_OUT, PAGE_IN, RECOMPUTE, COMPUTE = range(7)
CELL_LABELS = ("-", "on flash", "resident", "page-out", "page-in", "recompute", "compute")
CELL_COLORS = ("#ffffff", "#b8e0b0", "#c6d8ef", "#e4572e", "#2e9e4f", "#f0a202", "#1f3f8f")

# One line style per strategy in the comparison plots; cycled in sorted-label order so
# a strategy keeps its colour from one plot to the next.
_LINE_COLORS = ("#1f3f8f", "#e4572e", "#2e9e4f", "#f0a202", "#7b3fa0", "#17becf", "#8c564b", "#7f7f7f")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


# ---------------------------------------------------------------------------------------
# Schedule grid
# ---------------------------------------------------------------------------------------
def schedule_cells(schedule: Schedule) -> np.ndarray:
    """``n x n`` int8 matrix of cell states (constants above) from the decision matrices."""
    R = np.asarray(schedule.R, dtype=bool)
    n = R.shape[0]
    cells = np.full((n, n), EMPTY, dtype=np.int8)
    layers = (
        (np.asarray(schedule.S_AUX, dtype=bool), FLASH),
        (np.asarray(schedule.S_RAM, dtype=bool), RESIDENT),
        (np.asarray(schedule.M_out, dtype=bool), PAGE_OUT),
        (np.asarray(schedule.M_in, dtype=bool), PAGE_IN),
        (R & ~np.eye(n, dtype=bool), RECOMPUTE),
        (R & np.eye(n, dtype=bool), COMPUTE),
    )
    for mask, state in layers:  # later layers win: actions over states
        cells[mask] = state
    return cells


def stage_starts(program: Program) -> list[int]:
    """Index of the first instruction of every stage of a linearized Program.

    Stage ``t`` ends with ``COMPUTE t`` (its first computation), the frees that follow
    it and — when the stage had transfers — a ``FENCE`` and the frees after it
    (docs/model.md, "Program"); whatever comes next starts stage ``t+1``. A tensor that
    is kept into ``t+1`` but freed before ``t+1`` does anything is indistinguishable in
    the Program from one freed at the end of ``t``: it is drawn as freed (its memory is
    gone before the next stage allocates anything). A ``program.meta["stage_starts"]``
    list from the linearizer, when present, is used as is.
    """
    meta = program.meta.get("stage_starts") if program.meta else None
    if isinstance(meta, (list, tuple)) and len(meta) == program.n_nodes:
        return [int(x) for x in meta]
    ins = program.instructions
    starts = [0]
    computed: set[int] = set()
    transfers = False
    j = 0
    while j < len(ins):
        op, node = ins[j].op, ins[j].node
        j += 1
        transfers |= op in (Op.PAGE_IN, Op.PAGE_OUT)
        if op is not Op.COMPUTE or node in computed:
            continue
        computed.add(node)
        if node != len(starts) - 1:
            raise PoetError(
                f"program instruction {j - 1}: node {node} is computed for the first time in stage "
                f"{len(starts) - 1}; stages must follow the node order"
            )
        while j < len(ins) and ins[j].op is Op.FREE:
            j += 1
        if transfers and j < len(ins) and ins[j].op is Op.FENCE:
            j += 1
            while j < len(ins) and ins[j].op is Op.FREE:
                j += 1
        if len(starts) < program.n_nodes:
            starts.append(j)
        transfers = False
    if len(computed) != program.n_nodes:
        raise PoetError(
            f"program computes {len(computed)} of its {program.n_nodes} nodes; cannot draw its stages"
        )
    return starts


class _CellPainter(ProgramInterpreter):
    """What each instruction draws in row ``t`` (the stage being replayed), and the RAM and
    flash contents that the next stage starts from."""

    # A MOVE changes where a buffer lies in the arena, not what RAM holds: nothing to draw.
    ignores = frozenset({Op.MOVE})

    def __init__(self, program: Program, cells: np.ndarray) -> None:
        super().__init__(program)
        self.cells = cells
        self.t = 0
        self.ram: set[int] = set()
        self.flash: set[int] = set()
        self.pending_out: set[int] = set()

    def compute(self, ins: Instruction) -> None:
        self.ram.add(ins.node)
        self.cells[self.t, ins.node] = COMPUTE if ins.node == self.t else RECOMPUTE

    def page_in(self, ins: Instruction) -> None:
        self.ram.add(ins.node)
        self.cells[self.t, ins.node] = PAGE_IN

    def page_out(self, ins: Instruction) -> None:
        self.pending_out.add(ins.node)
        self.cells[self.t, ins.node] = PAGE_OUT

    def free(self, ins: Instruction) -> None:
        self.ram.discard(ins.node)

    def fence(self, ins: Instruction) -> None:
        self.flash |= self.pending_out
        self.pending_out.clear()


def program_cells(program: Program) -> np.ndarray:
    """Cell states of a Program: replay it, snapshot RAM and flash at each stage start."""
    n = program.n_nodes
    starts = stage_starts(program)
    bounds = [*starts, len(program.instructions)]
    cells = np.full((n, n), EMPTY, dtype=np.int8)
    painter = _CellPainter(program, cells)
    for t in range(n):
        painter.t = t
        for i in painter.flash:
            cells[t, i] = FLASH
        for i in painter.ram:
            cells[t, i] = RESIDENT
        for idx, ins in enumerate(program.instructions[bounds[t]: bounds[t + 1]], start=bounds[t]):
            painter.run_instruction(idx, ins)
    return cells


def grid_cells(graph: TrainingGraph | None, program_or_schedule: Program | Schedule) -> np.ndarray:
    if isinstance(program_or_schedule, Schedule):
        return schedule_cells(program_or_schedule)
    if isinstance(program_or_schedule, Program):
        if graph is not None and graph.n != program_or_schedule.n_nodes:
            raise PoetError(f"program has {program_or_schedule.n_nodes} nodes but graph {graph.name!r} has {graph.n}")
        return program_cells(program_or_schedule)
    raise PoetError(f"plot_grid needs a Program or a Schedule, got {type(program_or_schedule).__name__}")


def _figure(ax: Axes | None, size: tuple[float, float]) -> tuple[Figure, Axes]:
    if ax is not None:
        fig = ax.figure
        assert isinstance(fig, Figure), "plots go on the axes of a top-level Figure (tight_layout)"
        return fig, ax
    fig = Figure(figsize=size, dpi=100)  # no pyplot: no global state, no GUI
    return fig, fig.add_subplot(1, 1, 1)


def plot_grid(
    graph: TrainingGraph | None,
    program_or_schedule: Program | Schedule,
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """Timestep x node grid of a schedule: one row per stage, one column per node."""
    cells = grid_cells(graph, program_or_schedule)
    n = cells.shape[0]
    side = float(min(14.0, max(5.0, 0.12 * n + 3)))
    fig, ax = _figure(ax, (side + 2.2, side))
    ax.imshow(cells, cmap=ListedColormap(CELL_COLORS), vmin=0, vmax=len(CELL_COLORS) - 1,
              interpolation="nearest", aspect="auto")
    ax.set_xlabel("node (tensor)")
    ax.set_ylabel("stage (timestep)")
    if n <= 40 and graph is not None:
        ax.set_xticks(range(n), [nd.name for nd in graph.nodes], rotation=90, fontsize=7)
    if n > 1:  # thin lines between cells when they are large enough to see
        ax.set_xticks(np.arange(-0.5, n, 1), minor=True)
        ax.set_yticks(np.arange(-0.5, n, 1), minor=True)
        if n <= 80:
            ax.grid(which="minor", color="#dddddd", linewidth=0.3)
        ax.tick_params(which="minor", length=0)
    present = sorted({int(v) for v in np.unique(cells)} - {EMPTY})
    ax.legend(handles=[Patch(facecolor=CELL_COLORS[s], edgecolor="#888888", label=CELL_LABELS[s]) for s in present],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    counts = {CELL_LABELS[s]: int((cells == s).sum()) for s in (RECOMPUTE, PAGE_IN, PAGE_OUT)}
    ax.set_title(title or (f"{graph.name if graph is not None else 'schedule'}: "
                           + ", ".join(f"{v} {k}" for k, v in counts.items())), fontsize=10)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------
# Memory over the program
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MemoryTrace:
    """Live bytes at every instruction (including the running node's workspace)."""

    live_bytes: np.ndarray
    peak_bytes: int


def memory_trace(graph: TrainingGraph, costs: CostTable, program: Program) -> MemoryTrace:
    """Replay ``program`` in the simulator and return its per-instruction live bytes."""
    from poet_compiler.schedule.simulate import simulate

    sim = simulate(graph, costs, program)
    live = np.asarray([_live(p) for p in sim.timeline], dtype=np.int64)
    return MemoryTrace(live_bytes=live, peak_bytes=int(sim.peak_bytes))


def _live(point: Any) -> int:
    """A timeline entry as bytes: a number, or a record with a ``live_bytes`` field."""
    if isinstance(point, (int, float, np.integer, np.floating)):
        return int(point)
    for key in ("live_bytes", "bytes", "allocated_bytes"):
        if hasattr(point, key):
            return int(getattr(point, key))
        if isinstance(point, dict) and key in point:
            return int(point[key])
    raise TypeError(f"unexpected simulator timeline entry {point!r}")


def plot_memory(
    graph: TrainingGraph,
    costs: CostTable,
    program: Program,
    budget: int | None,
    arena_bytes: int | None = None,
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """Live bytes over the instructions of ``program`` against the budget and the arena."""
    from poet_compiler.units import format_bytes

    trace = memory_trace(graph, costs, program)
    fig, ax = _figure(ax, (11.0, 4.0))
    x = np.arange(len(trace.live_bytes))
    ax.fill_between(x, trace.live_bytes, step="post", color="#c6d8ef", linewidth=0)
    ax.step(x, trace.live_bytes, where="post", color="#1f3f8f", linewidth=1.0,
            label=f"live bytes (peak {format_bytes(trace.peak_bytes)})")
    if budget is not None:
        ax.axhline(budget, color="#e4572e", linestyle="--", linewidth=1.2, label=f"RAM budget {format_bytes(budget)}")
    if arena_bytes is not None:
        ax.axhline(
            arena_bytes, color="#f0a202", linestyle=":", linewidth=1.4, label=f"arena {format_bytes(arena_bytes)}"
        )
    # Mark page traffic under the curve so paging is visible on the memory plot too.
    pages = [k for k, ins in enumerate(program.instructions) if ins.op in (Op.PAGE_IN, Op.PAGE_OUT)]
    if pages:
        ax.plot(pages, np.zeros(len(pages)), "|", color="#2e9e4f", markersize=8, label="page in/out")
    ax.set_xlim(0, max(1, len(x)))
    ax.set_ylim(0, 1.1 * max([trace.peak_bytes, budget or 0, arena_bytes or 0, 1]))
    ax.set_xlabel("instruction")
    ax.set_ylabel("live bytes")
    from matplotlib.ticker import FuncFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: format_bytes(v)))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.set_title(title or f"{graph.name}: memory over the program", fontsize=10)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------
# Comparison curves (sweep DataFrames)
# ---------------------------------------------------------------------------------------
def _series_label(df: pd.DataFrame, other: str) -> pd.Series:
    """Label per row: the strategy, plus model/device/the other budget where they vary.

    A frame with several deadlines drawn against RAM gets one line per (strategy,
    deadline), not one zig-zag line through every point of a strategy.
    """
    label = df["strategy"].astype(str)
    if other in df.columns and df[other].nunique(dropna=False) > 1:
        label = label + " @ " + df[other].astype(str)
    for col in ("device", "model"):
        if col in df.columns and df[col].nunique() > 1:
            label = df[col].astype(str) + " " + label
    return label


def _plot_lines(df: pd.DataFrame, x: str, other: str, xlabel: str, ax: Axes | None, title: str,
                xscale: float = 1.0) -> Figure:
    need = {x, "energy_j", "strategy"}
    missing = need - set(df.columns)
    if missing:
        raise PoetError(f"comparison frame lacks column(s) {', '.join(sorted(missing))}")
    fig, ax = _figure(ax, (7.0, 4.5))
    data = df.assign(_label=_series_label(df, other))
    labels = sorted(data["_label"].unique())
    for k, lab in enumerate(labels):
        part = data[data["_label"] == lab].sort_values(x, kind="mergesort")
        ok = part["energy_j"].notna() & part[x].notna()
        ax.plot(part.loc[ok, x].astype(float) * xscale, part.loc[ok, "energy_j"].astype(float),
                marker=_MARKERS[k % len(_MARKERS)], color=_LINE_COLORS[k % len(_LINE_COLORS)],
                linewidth=1.4, markersize=5, label=str(lab))
        bad = part[~part["energy_j"].notna() & part[x].notna()]
        if len(bad):  # infeasible/timeouts: crosses on the axis so the gap is visible
            ax.plot(bad[x].astype(float) * xscale, np.zeros(len(bad)), "x",
                    color=_LINE_COLORS[k % len(_LINE_COLORS)], markersize=7)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("energy per step (J)")
    ax.set_ylim(bottom=0)
    ax.grid(True, color="#eeeeee")
    if labels:
        ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_energy_vs_ram(df: pd.DataFrame, ax: Axes | None = None, title: str | None = None) -> Figure:
    """Energy against the RAM budget, one line per strategy (Fig. 3); x marks: no schedule."""
    x = "ram_budget_bytes"
    return _plot_lines(df, x, "deadline", "RAM budget (KiB)", ax, title or "energy vs RAM budget", xscale=1 / 1024)


def plot_energy_vs_deadline(df: pd.DataFrame, ax: Axes | None = None, title: str | None = None) -> Figure:
    """Energy against the deadline, one line per strategy/mode (Fig. 4: remat, paging, poet)."""
    return _plot_lines(df, "deadline_s", "ram", "deadline (s)", ax, title or "energy vs deadline")


# ---------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------
def png_bytes(fig: Figure, dpi: int = 110) -> bytes:
    """The figure as PNG bytes, without the Software/time metadata (byte-stable)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    return buf.getvalue()


def save_png(fig: Figure, path: str | Path, dpi: int = 110) -> Path:
    out = Path(path)
    atomic_write_bytes(out, png_bytes(fig, dpi))
    return out
