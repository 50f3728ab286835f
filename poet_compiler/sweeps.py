"""Sweep runner: solve a grid of cells on a local process pool or a Ray cluster, cached.

A *cell* is one solve: (graph, costs, RAM bytes, deadline seconds, strategy, mode,
options). :func:`run_cell` maps a :class:`CellTask` to a row dict; it is the only code
that runs remotely, so the in-process, process-pool and Ray paths give the same rows.

Cache: one JSON file per cell in ``cache_dir``, named by the SHA-256 of the canonical JSON
of (graph as poet-graph/1, CostTable, budgets, strategy, mode, options) and of what
computes the result: a digest of poetc's own source files and the versions of the
solver libraries. The package version alone would not do — it is the same for every
commit, so a cache filled by older solver code would be served after an upgrade.
A second identical sweep reads every row back and solves nothing. Files are written
atomically as each cell finishes, so an interrupted sweep keeps every finished cell.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import math
import multiprocessing
import os
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poet_compiler.devices.costs import CostTable
from poet_compiler.errors import PoetError
from poet_compiler.fileio import atomic_write_text
from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schemas import is_sweep_row
from poet_compiler.solve.ram import FixedRam
from poet_compiler.solve.strategies import SolveOptions

Row = dict[str, Any]

# Columns every row has, in CSV order; report extras follow, sorted by name.
LEAD_COLUMNS = ("model", "device", "ram", "deadline", "strategy", "mode")
FIGURE_COLUMNS = (
    "status", "energy_j", "runtime_s", "peak_ram_bytes", "arena_bytes", "ram_budget_bytes",
    "deadline_s", "lower_bound_j", "gap", "solve_time_s", "n_nodes", "n_compute", "n_page_in",
    "n_page_out", "solver", "formulation", "checkpoint_all_peak_bytes", "checkpoint_all_runtime_s",
    "checkpoint_all_energy_j", "activations_only", "ram_split", "device_ram_bytes", "message",
)


@dataclass(frozen=True)
class SolveSpec(SolveOptions):
    """Options that change a cell's result (all of them go into the cache key): the
    solver options plus whether the budget covers the arena alone (solve/ram.py)."""

    activations_only: bool = False


@dataclass(frozen=True)
class CellTask:
    """Everything a worker needs to solve one cell; picklable, no file access needed."""

    index: int                 # position in the grid: the row order of the output
    labels: dict[str, Any]     # model, device, ram, deadline, strategy (as the user wrote them)
    strategy: str              # registry name
    mode: str
    graph: TrainingGraph
    costs: CostTable
    ram_budget_bytes: int
    deadline_s: float | None
    spec: SolveSpec
    reference: dict[str, Any] = field(default_factory=dict)
    key: str = ""
    ram: FixedRam = field(default_factory=FixedRam)   # beside the arena on the device (solve/ram.py)

    def describe(self) -> str:
        lab = self.labels
        return f"{lab['model']} {lab['device']} ram={lab['ram']} deadline={lab['deadline']} {lab['strategy']}"


def _canonical(value: Any) -> Any:
    """JSON-able, order-stable form of dataclasses/tuples/floats for hashing."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, float):
        return repr(value)  # exact round-trip text, no JSON float formatting drift
    return value


def graph_digest(graph: TrainingGraph) -> str:
    """SHA-256 of the graph's poet-graph/1 JSON (computed once per graph per sweep)."""
    from poet_compiler.graph.io import graph_to_dict

    text = json.dumps(_canonical(graph_to_dict(graph)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


PACKAGE_DIR = Path(__file__).resolve().parent
# Third-party code that computes a cell's result: the solvers and the arrays they are fed.
RESULT_LIBRARIES = ("ortools", "highspy", "gurobipy", "numpy")


def source_digest(root: Path) -> str:
    """SHA-256 over every ``.py`` file under ``root`` (relative path and bytes, in sorted
    order): any change to the code gives a new digest."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


@functools.cache
def code_digest() -> str:
    """:func:`source_digest` of this poetc package (read once per process)."""
    return source_digest(PACKAGE_DIR)


@functools.cache
def library_versions() -> dict[str, str | None]:
    """Installed versions of :data:`RESULT_LIBRARIES` (None where not installed)."""
    out: dict[str, str | None] = {}
    for name in RESULT_LIBRARIES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def cell_key(graph_sha: str, costs: CostTable, ram_budget_bytes: int, deadline_s: float | None,
             strategy: str, mode: str, spec: SolveSpec) -> str:
    """Content hash of one cell: same inputs, same code and libraries, same key."""
    payload = {
        "code": code_digest(),
        "libraries": library_versions(),
        "graph": graph_sha,
        "costs": _canonical(costs),
        "ram_budget_bytes": ram_budget_bytes,
        "deadline_s": _canonical(deadline_s),
        "strategy": strategy,
        "mode": mode,
        "options": _canonical(spec),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _scalar(value: Any) -> Any:
    """CSV-friendly: scalars as is, anything else as compact JSON text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    try:
        return json.dumps(_canonical(value), sort_keys=True, separators=(",", ":"))
    except TypeError:
        return str(value)


def run_cell(task: CellTask) -> Row:
    """Solve one cell; the row holds every report figure (simulator numbers) and the labels.

    Bad input to the strategy (a PoetError) becomes a row with status ``error`` rather
    than aborting the sweep: one impossible cell must not lose hundreds of others.
    """
    from poet_compiler.solve.problem import Problem
    from poet_compiler.solve.strategies import run_strategy

    problem = Problem(graph=task.graph, costs=task.costs, ram_budget_bytes=task.ram_budget_bytes,
                      deadline_s=task.deadline_s, mode=task.mode,  # type: ignore[arg-type]
                      fixed=FixedRam() if task.spec.activations_only else task.ram)
    opts = dataclasses.replace(task.spec, progress=False)  # workers never draw progress lines
    started = time.perf_counter()
    try:
        report = run_strategy(task.strategy, problem, opts).report()
    except PoetError as exc:
        report = {"status": "error", "message": str(exc), "mode": task.mode,
                  "ram_budget_bytes": task.ram_budget_bytes, "deadline_s": task.deadline_s,
                  "solve_time_s": time.perf_counter() - started}
    row: Row = {k: _scalar(v) for k, v in report.items()}
    row.update(task.reference)
    row["activations_only"] = task.spec.activations_only
    arena = report.get("arena_bytes")
    row["ram_split"] = _scalar(task.ram.split(arena if isinstance(arena, int) else None))
    row["device_ram_bytes"] = task.costs.ram_bytes
    row.update(task.labels)  # the user's spellings win over the solver's names
    row["mode"] = report.get("mode") or task.mode  # a baseline reports the mode it really solved
    return row


# ---------------------------------------------------------------------------------------
# Cache
# ---------------------------------------------------------------------------------------
class Cache:
    """One JSON file per cell, ``<dir>/<key[:2]>/<key>.json``, written atomically."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)

    def _path(self, key: str) -> Path:
        return self.dir / key[:2] / f"{key}.json"

    def get(self, key: str) -> Row | None:
        path = self._path(key)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return None  # a damaged entry is a miss; it is rewritten by the solve
        row = data.get("row") if isinstance(data, dict) and data.get("key") == key else None
        # A row that does not match the sweep-row schema is damaged too: a miss.
        return row if isinstance(row, dict) and is_sweep_row(row) else None

    def put(self, key: str, row: Row) -> None:
        atomic_write_text(self._path(key), json.dumps({"key": key, "row": row}, sort_keys=True) + "\n")


# ---------------------------------------------------------------------------------------
# Executors
# ---------------------------------------------------------------------------------------
def check_reachable(address: str, timeout_s: float = 3.0) -> None:
    """Fail fast (one line) when a Ray head is not listening, instead of Ray's long retries."""
    target = address.split("://", 1)[-1]
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise PoetError(f"Ray address {address!r} is not HOST:PORT (or 'local', or ray://HOST:PORT)")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise PoetError(f"Ray cluster at {address} is unreachable: {exc.strerror or exc}") from None


def _ray_start(address: str, jobs: int) -> tuple[Any, bool]:
    """Import and connect Ray; returns (ray module, whether we started it and must stop it)."""
    try:
        import ray
    except ImportError:
        raise PoetError("--ray needs the Ray extra: pip install 'poet-compiler[ray]'") from None
    if ray.is_initialized():
        return ray, False
    if address == "local":
        ray.init(num_cpus=max(1, jobs), include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    else:
        check_reachable(address)
        try:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        except Exception as exc:  # Ray raises ConnectionError/RuntimeError/... here
            raise PoetError(f"cannot connect to Ray cluster at {address}: {str(exc).splitlines()[0]}") from None
    return ray, True


def execute(tasks: Sequence[CellTask], on_row: Callable[[CellTask, Row], None], *,
            jobs: int = 1, ray: str | None = None) -> None:
    """Run every task and call ``on_row`` in the caller's process as each one finishes.

    In-process when ``jobs == 1`` and no Ray; a spawn-context process pool otherwise; Ray
    tasks with ``ray`` ('local' or an address). All three call :func:`run_cell`.
    """
    if not tasks:
        return
    if ray:
        _execute_ray(tasks, on_row, jobs, ray)
    elif jobs <= 1:
        for task in tasks:
            on_row(task, run_cell(task))
    else:
        ctx = multiprocessing.get_context("spawn")  # fork is unsafe with solver threads
        with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=ctx) as pool:
            pending: dict[Future, CellTask] = {pool.submit(run_cell, t): t for t in tasks}
            try:
                while pending:
                    done, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for fut in sorted(done, key=lambda f: pending[f].index):
                        on_row(pending.pop(fut), fut.result())
            except BaseException:
                pool.shutdown(wait=False, cancel_futures=True)
                raise


def _execute_ray(tasks: Sequence[CellTask], on_row: Callable[[CellTask, Row], None], jobs: int, address: str) -> None:
    ray, started = _ray_start(address, jobs)
    try:
        remote = ray.remote(num_cpus=1)(run_cell)
        refs = {remote.remote(t): t for t in tasks}
        try:
            while refs:
                done, _ = ray.wait(list(refs), num_returns=1)
                for ref in done:
                    on_row(refs.pop(ref), ray.get(ref))
        except BaseException:
            for ref in refs:
                ray.cancel(ref, force=True)
            raise
    finally:
        if started:
            ray.shutdown()


# ---------------------------------------------------------------------------------------
# Progress
# ---------------------------------------------------------------------------------------
class Progress:
    """done/total, the cell that just finished and an ETA, live on stderr (rich)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total = total
        self.done = 0
        self.cached = 0
        self._bar = None
        if enabled and total:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("sweep"), BarColumn(bar_width=20), MofNCompleteColumn(), TimeElapsedColumn(),
                TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.description}"),
                console=Console(stderr=True), transient=False,
            )
            self._task = self._bar.add_task("", total=total)
            self._bar.start()

    def advance(self, what: str, cached: bool) -> None:
        self.done += 1
        self.cached += cached
        if self._bar is not None:
            self._bar.update(self._task, advance=1, description=f"{'cached' if cached else 'solved'}: {what}")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


# ---------------------------------------------------------------------------------------
# Rows -> CSV
# ---------------------------------------------------------------------------------------
def columns_of(rows: Iterable[Row]) -> list[str]:
    """Lead columns, figure columns, then any other report keys in name order."""
    keys: set[str] = set()
    for row in rows:
        keys.update(row)
    fixed = [*LEAD_COLUMNS, *FIGURE_COLUMNS]
    return [*fixed, *sorted(keys - set(fixed))]


def _csv_cell(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def write_csv(path: str | Path, rows: Sequence[Row]) -> None:
    """Rows (already in grid order) as CSV, atomically; missing values are empty cells."""
    import csv
    import io

    buf = io.StringIO()
    cols = columns_of(rows)
    writer = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({c: _csv_cell(row.get(c)) for c in cols})
    atomic_write_text(path, buf.getvalue())


def default_jobs() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))
