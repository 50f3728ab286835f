"""The notebook API for comparisons: ``poet_compiler.compare`` / ``sweep`` / ``plot``.

``compare(model, device, ram=[...], deadline=[...], strategies=[...])`` returns a pandas
DataFrame with one row per solve and every report figure (the simulator's numbers);
``sweep`` does the same over several models and devices, on a process pool or a Ray
cluster, with a content-hash cache (:mod:`poet_compiler.sweeps`); ``plot(df)`` draws
the right curves for whatever the frame varies.

Strategies are registry names (``optimal``, ``checkmate``, ``dtr``, ...) optionally with
a mode, ``optimal:remat``; a bare mode name (``poet``, ``remat``, ``paging``, ``none``)
means ``optimal`` in that mode — the three lines of Fig. 4 are ``remat,paging,poet``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from poet_compiler.errors import PoetError
from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schemas import read_sweep_csv
from poet_compiler.sweeps import (
    Cache,
    CellTask,
    Progress,
    Row,
    SolveSpec,
    cell_key,
    check_reachable,
    columns_of,
    default_jobs,
    execute,
    graph_digest,
    write_csv,
)

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from poet_compiler.api import TraceOptions

DEFAULT_CACHE = ".poetc-cache"
_Model = str | TrainingGraph
_Budget = str | int | float | None


def parse_strategy(spec: str, default_mode: str) -> tuple[str, str]:
    """``name`` / ``name:mode`` / bare mode -> (registry name, mode); PoetError if unknown."""
    from poet_compiler.solve.problem import MODES
    from poet_compiler.solve.strategies import strategy_names

    text = str(spec).strip()
    name, _, mode = text.partition(":")
    if not mode and name in MODES:
        name, mode = "optimal", name
    mode = mode or default_mode
    known = strategy_names()
    if name not in known:
        raise PoetError(
            f"unknown strategy {text!r}; known: {', '.join(known)} (or optimal:MODE, or a mode: {', '.join(MODES)})"
        )
    if mode not in MODES:
        raise PoetError(f"unknown mode {mode!r} in strategy {text!r}; known: {', '.join(MODES)}")
    return name, mode


def _as_list(value: Any, what: str) -> list[Any]:
    if isinstance(value, (str, int, float, TrainingGraph)) or value is None:
        return [value]
    items = list(value)
    if not items:
        raise PoetError(f"empty grid: no {what} given")
    return items


def _label(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, TrainingGraph):
        return value.name
    return str(value)


def build_tasks(
    models: Sequence[_Model],
    devices: Sequence[str | None],
    ram: Sequence[_Budget],
    deadline: Sequence[_Budget],
    strategies: Sequence[str],
    *,
    mode: str,
    spec: SolveSpec,
    trace: TraceOptions | None = None,
) -> list[CellTask]:
    """The grid, in row order (model, device, ram, deadline, strategy), budgets resolved;
    every model traced by ``trace`` (its optimizer parsed).

    Graphs, costs and the checkpoint-all reference are computed once per (model,
    device) here in the caller, so workers only solve and cache keys need no tracing.
    """
    from poet_compiler.api import TraceOptions, load_costs, resolve_graph
    from poet_compiler.solve.budgets import reference, resolve_deadline, resolve_ram
    from poet_compiler.solve.ram import fixed_ram

    trace = trace or TraceOptions()
    parsed = [(s, *parse_strategy(s, mode)) for s in strategies]  # all checked before any work
    tasks: list[CellTask] = []
    for model in models:
        graph = resolve_graph(model, trace.granularity, trace.batch, optimizer=trace.optimizer, train=trace.train)
        sha = graph_digest(graph)
        for device in devices:
            costs = load_costs(graph, device)
            ref = reference(graph, costs)
            ref_row = {"checkpoint_all_peak_bytes": ref.peak_bytes,
                       "checkpoint_all_runtime_s": ref.runtime_s,
                       "checkpoint_all_energy_j": ref.energy_j}
            ram_split = fixed_ram(graph, costs)
            for r in ram:
                ram_bytes = resolve_ram(r, ref, costs, 0 if spec.activations_only else ram_split.total)
                for d in deadline:
                    deadline_s = resolve_deadline(d, ref, costs)
                    for label, name, cell_mode in parsed:
                        labels = {"model": _label(model), "device": costs.device if device is None else str(device),
                                  "ram": _label(r), "deadline": _label(d), "strategy": label}
                        tasks.append(CellTask(
                            index=len(tasks), labels=labels, strategy=name, mode=cell_mode,
                            graph=graph, costs=costs, ram_budget_bytes=ram_bytes, deadline_s=deadline_s,
                            spec=spec, reference=ref_row, ram=ram_split,
                            key=cell_key(sha, costs, ram_bytes, deadline_s, name, cell_mode, spec),
                        ))
    return tasks


def sweep(
    models: _Model | Sequence[_Model],
    devices: str | None | Sequence[str | None] = "m4",
    ram: _Budget | Sequence[_Budget] = None,
    deadline: _Budget | Sequence[_Budget] = None,
    strategies: str | Sequence[str] = ("optimal",),
    *,
    jobs: int | None = None,
    ray: str | None = None,
    cache_dir: str | Path | None = DEFAULT_CACHE,
    output: str | Path | None = None,
    progress: bool = False,
    mode: str = "poet",
    solver: str = "auto",
    formulation: str = "fast",
    time_limit_s: float | None = None,
    effort: float | str | None = None,
    threads: int = 2,
    activations_only: bool = False,
    granularity: str = "op",
    batch: int | None = None,
    optimizer: str | None = None,
    train: str | None = None,
) -> pd.DataFrame:
    """Solve every (model, device, ram, deadline, strategy) cell; one row per cell.

    ``jobs``: worker processes (default: the CPUs; 1 = in this process). ``ray``:
    ``"local"`` or a cluster address — Ray instead of the process pool. ``cache_dir``:
    where finished cells are kept (None: no cache). ``output``: a CSV rewritten
    atomically after every finished cell, rows in grid order. ``df.attrs`` holds
    ``cells``, ``solved`` and ``cached`` (how many cells were solved vs read back).
    ``optimizer``/``train``: specs as ``poetc compile --optimizer/--train`` (docs/training.md).
    ``ram``: budgets as :func:`poet_compiler.compile` reads them (what the step gets on the
    device; ``activations_only``: the arena alone).
    """
    import pandas as pd

    if ray is not None and ray != "local":
        check_reachable(ray)  # fail in a second, before any tracing or solving
    from poet_compiler.solve.options import effort_units, time_limit_and_effort

    # The rule of poetc compile: an explicit limit sets the effort (0.3 units per second).
    time_limit_s, effort = time_limit_and_effort(time_limit_s, effort)
    if effort is not None:
        effort_units(effort, time_limit_s)   # a bad effort is refused before any tracing
    spec = SolveSpec(solver=solver, formulation=formulation, time_limit_s=time_limit_s, effort=effort,
                     threads=int(threads), activations_only=bool(activations_only))
    from poet_compiler.api import TraceOptions
    from poet_compiler.frontends import training_options

    grid = (_as_list(models, "models"), _as_list(devices, "devices"), _as_list(ram, "RAM budgets"),
            _as_list(deadline, "deadlines"), _as_list(strategies, "strategies"))
    opt, patterns = training_options(optimizer, train)
    tasks = build_tasks(*grid, mode=mode, spec=spec,
                        trace=TraceOptions(granularity, batch, optimizer=opt, train=patterns))
    rows, solved = _run_cells(tasks, Cache(cache_dir) if cache_dir is not None else None, output,
                              jobs=default_jobs() if jobs is None else int(jobs), ray=ray, progress=progress)
    df = pd.DataFrame(rows, columns=columns_of(rows))
    df.attrs.update(cells=len(tasks), solved=solved, cached=len(tasks) - solved)
    return df


def _run_cells(tasks: list[CellTask], cache: Cache | None, output: str | Path | None, *, jobs: int,
               ray: str | None, progress: bool) -> tuple[list[Row], int]:
    """Every cell's row, in grid order, read from ``cache`` or solved (and then cached);
    ``output`` rewritten after every finished cell. Also: how many were solved."""
    rows: dict[int, Row] = {}
    bar = Progress(len(tasks), progress)

    def finished(task: CellTask, row: Row, cached: bool) -> None:
        rows[task.index] = row
        if cache is not None and not cached:
            cache.put(task.key, row)
        if output is not None:
            write_csv(output, [rows[i] for i in sorted(rows)])
        bar.advance(task.describe(), cached)

    todo: list[CellTask] = []
    try:
        for task in tasks:
            hit = cache.get(task.key) if cache is not None else None
            if hit is not None:
                finished(task, hit, cached=True)
            else:
                todo.append(task)
        execute(todo, lambda t, r: finished(t, r, cached=False), jobs=jobs, ray=ray)
    finally:
        bar.close()
    return [rows[i] for i in sorted(rows)], len(todo)


def compare(
    model: _Model,
    device: str | None = "m4",
    ram: _Budget | Sequence[_Budget] = None,
    deadline: _Budget | Sequence[_Budget] = None,
    strategies: str | Sequence[str] = ("optimal", "checkmate", "paging_only"),
    **compile_kwargs: Any,
) -> pd.DataFrame:
    """One model on one device over budgets and strategies; a DataFrame, one row per solve.

    Runs in this process with no cache unless ``jobs``/``ray``/``cache_dir`` say otherwise;
    other keyword arguments are those of :func:`poet_compiler.compile` (mode, solver,
    formulation, time_limit_s, effort, threads, activations_only, granularity, batch).
    """
    compile_kwargs.setdefault("jobs", 1)
    compile_kwargs.setdefault("cache_dir", None)
    compile_kwargs.pop("progress", None)
    return sweep([model], [device], ram, deadline, strategies, **compile_kwargs)


def plot(df: pd.DataFrame, kind: str = "auto") -> Figure:
    """Energy curves of a comparison frame in one call.

    ``kind``: ``ram`` (Fig. 3), ``deadline`` (Fig. 4), or ``auto`` — whichever budget
    varies; both side by side when both vary.
    """
    from matplotlib.figure import Figure

    from poet_compiler.viz import plot_energy_vs_deadline, plot_energy_vs_ram

    if len(df) == 0:
        raise PoetError("nothing to plot: the comparison frame has no rows")
    if kind == "auto":
        kinds = [k for k, col in (("ram", "ram_budget_bytes"), ("deadline", "deadline_s"))
                 if df[col].nunique(dropna=True) > 1] or ["ram"]
    elif kind in ("ram", "deadline"):
        kinds = [kind]
    else:
        raise PoetError(f"unknown plot kind {kind!r}; expected auto, ram or deadline")
    fig = Figure(figsize=(7.0 * len(kinds), 4.5), dpi=100)
    for k, which in enumerate(kinds):
        ax = fig.add_subplot(1, len(kinds), k + 1)
        (plot_energy_vs_ram if which == "ram" else plot_energy_vs_deadline)(df, ax=ax)
    fig.tight_layout()
    return fig


def read_sweep(path: str | Path) -> pd.DataFrame:
    """A sweep CSV (``poetc sweep -o``, ``compare(output=...)``) as the DataFrame ``plot`` draws.

    Every row is validated against the sweep-row schema first
    (:class:`poet_compiler.schemas.SweepRow`, docs/schemas/sweep-row.schema.json): a
    malformed file is a one-line :class:`PoetError`, not a traceback from a plot."""
    import pandas as pd

    read_sweep_csv(path)
    try:
        return pd.read_csv(path, keep_default_na=True)
    except (OSError, ValueError) as exc:
        raise PoetError(f"cannot read sweep CSV {path}: {exc}") from None
