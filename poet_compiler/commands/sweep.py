"""``poetc sweep MODEL --ram 30%,50%,70% --deadline 1x,1.5x --strategies a,b -o sweep.csv``.

Solves the grid (models x devices x RAM budgets x deadlines x strategies) on a local
process pool (``--jobs``) or a Ray cluster (``--ray ADDRESS``, ``--ray local``), with
every finished cell cached (``--cache DIR``) and the CSV rewritten atomically after each
one, so Ctrl-C loses nothing that finished.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, overload

import typer

from poet_compiler.errors import PoetError
from poet_compiler.training_options import OPTIMIZER_HELP, TRAIN_HELP


@overload
def split_list(text: str | None, what: str, allow_none: Literal[False] = False) -> list[str]: ...
@overload
def split_list(text: str | None, what: str, allow_none: bool) -> list[str | None]: ...


def split_list(text: str | None, what: str, allow_none: bool = False) -> list[str] | list[str | None]:
    """``"30%,50%"`` -> ``["30%", "50%"]``; an option not given -> ``[None]`` when allowed."""
    if text is None:
        if allow_none:
            not_given: list[str | None] = [None]
            return not_given
        raise PoetError(f"empty grid: no {what} given")
    items = [s.strip() for s in text.split(",") if s.strip()]
    if not items:
        raise PoetError(f"empty grid: --{what} {text!r} lists nothing")
    return items


def register(app: typer.Typer) -> None:
    @app.command("sweep")
    def sweep_cmd(
        models: list[str] = typer.Argument(..., help="zoo model names or graph files (one or more)"),
        device: str = typer.Option(
            None,
            "--device",
            "-d",
            help="device profile(s), comma-separated (default: m4, or none for graphs with explicit costs)",
        ),
        ram: str = typer.Option(
            None, "--ram",
            help="RAM budgets as compile's --ram, comma-separated: 30%,50%,256k (default: the device RAM)"
        ),
        deadline: str = typer.Option(
            None, "--deadline", help="deadlines, comma-separated: 1x,1.5x,120ms (default: none)"
        ),
        strategies: str = typer.Option(
            "optimal",
            "--strategies",
            "-s",
            help="strategies, comma-separated: optimal, optimal:remat, checkmate, dtr, ... or a mode name",
        ),
        output: Path = typer.Option(
            Path("sweep.csv"), "-o", "--output", help="CSV, one row per cell, rewritten after every finished cell"
        ),
        jobs: int = typer.Option(None, "--jobs", "-j", help="worker processes (default: the CPUs; 1 = in process)"),
        ray: str = typer.Option(None, "--ray", help="run on a Ray cluster: ADDRESS (host:port, ray://...) or 'local'"),
        cache: Path = typer.Option(Path(".poetc-cache"), "--cache", help="cache directory (one file per cell)"),
        no_cache: bool = typer.Option(False, "--no-cache", help="solve every cell, store nothing"),
        mode: str = typer.Option("poet", "--mode", help="mode for strategies given without one"),
        solver: str = typer.Option("auto", "--solver", help="auto | cpsat | highs | gurobi"),
        formulation: str = typer.Option("fast", "--formulation", help="fast | dense"),
        time_limit: float = typer.Option(
            None, "--time-limit",
            help="per-cell solver time limit, seconds: without --effort it sets the effort, 0.3 deterministic s "
                 "per second (default: the 'default' effort under a 600 s cap)",
        ),
        effort: str = typer.Option(
            None, "--effort", help="per-cell work: quick | default | thorough, or deterministic seconds"
        ),
        threads: int = typer.Option(1, "--threads", help="solver threads per cell"),
        activations_only: bool = typer.Option(
            False, "--activations-only",
            help="--ram covers the arena alone (POET's convention, to compare with the paper and its peers)"
        ),
        granularity: str = typer.Option("op", "--granularity", help="op | module"),
        batch: int = typer.Option(None, "--batch", help="batch size for zoo models"),
        optimizer: str = typer.Option(None, "--optimizer", help=OPTIMIZER_HELP),
        train: str = typer.Option(None, "--train", help=TRAIN_HELP),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress display"),
    ) -> None:
        """Solve a grid of budgets x deadlines x strategies and write one CSV row per cell."""
        from poet_compiler.comparison import sweep

        if jobs is not None and jobs < 1:
            raise PoetError(f"--jobs must be at least 1, got {jobs}")
        devices = split_list(device, "device", allow_none=True)
        if devices == [None] and not all(m.endswith(".json") for m in models):
            devices = ["m4"]
        df = sweep(
            models, devices, split_list(ram, "ram", allow_none=True), split_list(deadline, "deadline", allow_none=True),
            split_list(strategies, "strategies"), jobs=jobs, ray=ray, cache_dir=None if no_cache else cache,
            output=output, progress=not quiet, mode=mode, solver=solver, formulation=formulation,
            time_limit_s=time_limit, effort=effort, threads=threads, activations_only=activations_only,
            granularity=granularity, batch=batch, optimizer=optimizer, train=train,
        )
        ok = int(df["status"].isin(["optimal", "feasible"]).sum())
        typer.echo(f"wrote {output}: {df.attrs['cells']} cells ({df.attrs['solved']} solved, "
                   f"{df.attrs['cached']} from cache), {ok} with a schedule", err=True)
