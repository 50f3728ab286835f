"""The solver settings a user gives (``--solver``, ``--formulation``, ``--time-limit``,
``--effort``, ``--threads``, progress, ``--gap``, ``--memory-limit``), passed explicitly to
the strategies that reach the MILP: ``optimal`` (:mod:`poet_compiler.solve.strategies`) and the solver-backed baselines
``checkmate`` and ``paging_only`` (:mod:`poet_compiler.solve.baselines.optimal`). A
:class:`~poet_compiler.solve.problem.Problem` holds the scheduling question only."""

from __future__ import annotations

import math
from dataclasses import dataclass

from poet_compiler.errors import PoetError

# The default --memory-limit: within the 4 GB target for a 1,500-node graph (4 GB,
# read as 10^9 bytes: 3.6 GiB is 3.87 GB, and the watch stops a solver within 2 % of the
# limit), and what a laptop can give a compile beside everything else. At 4 GiB
# gpt2_large measured 4,068 MiB (4.27 GB). Only the gpt2_large models reach it.
DEFAULT_MEMORY_LIMIT = int(3.6 * 2**30)

# Effort presets, in CP-SAT deterministic seconds shared by every stage (poet_compiler.work).
# "default" is sized so that a default compile takes no more wall time on the project's
# 2-core machines than the former default 60 s limit (bench/reproducibility.py; BENCHMARKS.md,
# "Reproducibility").
EFFORT_PRESETS = {"quick": 5.0, "default": 30.0, "thorough": 120.0}
# An explicit --time-limit without --effort sets the effort at this many units per wall
# second of the limit, up or down, so that a longer limit buys a longer search and a short
# one is not simply a cap that always binds. Measured on the README demo, ResNet-18-CIFAR m4
# 50 % 1.5x and Moccasin's DAGs 100 at 80 % and 250 at 90 % at limits of 10-300 s, idle and
# beside two busy loops (BENCHMARKS.md, "Time limits"): the effort ends before the wall cap.
EFFORT_PER_LIMIT_S = 0.3
# Graphs that are not small (Tuning.small_graph_nodes) stop at this relative gap by default
# (--gap); small ones close it.
DEFAULT_GAP_LIMIT = 1e-3


def effort_units(effort: float | str | None, limit_s: float) -> float:
    """The effort in deterministic seconds: a preset's, a number's, or (None)
    EFFORT_PER_LIMIT_S per second of the user's time limit ``limit_s``. Where the user gave
    no limit the caller passes the ``"default"`` preset (:func:`time_limit_and_effort`)."""
    if effort is None:
        return EFFORT_PER_LIMIT_S * float(limit_s)
    if isinstance(effort, str):
        if effort in EFFORT_PRESETS:
            return EFFORT_PRESETS[effort]
        try:
            effort = float(effort)
        except ValueError:
            raise PoetError(f"effort must be one of {', '.join(EFFORT_PRESETS)} or a positive number "
                            f"(deterministic seconds), got {effort!r}") from None
    if not effort > 0 or effort != effort or effort == float("inf"):
        raise PoetError(f"effort must be a positive number of deterministic seconds, got {effort!r}")
    return float(effort)


#: The wall cap where the user gives no ``--time-limit``. The default effort (EFFORT_PRESETS)
#: ends a compile well before it on an idle machine and on a loaded one
#: (bench/reproducibility.py), so that the cap does not decide what is written.
DEFAULT_TIME_LIMIT_S = 600.0


def time_limit_and_effort(time_limit_s: float | None, effort: float | str | None) -> tuple[float, float | str | None]:
    """The wall cap and the effort of the user's ``--time-limit`` and ``--effort``: no limit
    is DEFAULT_TIME_LIMIT_S with the ``default`` effort; an explicit limit without
    ``--effort`` leaves the effort to it (EFFORT_PER_LIMIT_S, :func:`effort_units`)."""
    if time_limit_s is None:
        return DEFAULT_TIME_LIMIT_S, "default" if effort is None else effort
    if not (time_limit_s > 0 and math.isfinite(time_limit_s)):
        raise PoetError(f"time limit must be a positive number of seconds, got {time_limit_s!r}")
    return float(time_limit_s), effort


#: A solve that effort stopped before this share of its time limit ended "well inside" it:
#: the report then says so, and how to search further (effort_note).
WELL_INSIDE_SHARE = 0.8


def effort_note(stopped_by: str | None, effort: float | None, wall_s: float, limit_s: float,
                limit_given: bool) -> str | None:
    """The line that says effort, not time, ended a solve well inside its limit, and what
    searches further; None where the solve ended otherwise or near its limit."""
    if stopped_by != "effort" or effort is None or wall_s >= WELL_INSIDE_SHARE * limit_s:
        return None
    more = "--effort thorough" if effort < EFFORT_PRESETS["thorough"] else f"--effort {2 * effort:g}"
    longer = "a longer --time-limit" if limit_given else f"--time-limit S ({EFFORT_PER_LIMIT_S:g} units per second)"
    return (f"stopped at effort {effort:g} after {wall_s:.0f} s of the {limit_s:g} s limit; "
            f"{more} (or {longer}) searches further")


@dataclass(frozen=True)
class SolveOptions:
    solver: str = "auto"
    formulation: str = "fast"
    time_limit_s: float = 60.0
    # The user's --time-limit when ``time_limit_s`` is what tracing and costing left of
    # it (messages name the user's limit); None: the same as ``time_limit_s``.
    stated_limit_s: float | None = None
    threads: int = 2
    # --effort: a preset name (quick | default | thorough) or deterministic seconds; None:
    # 0.3 units per second of the stated time limit (EFFORT_PER_LIMIT_S).
    # Where the user gave no limit, the API passes "default" with its 600 s cap.
    effort: float | str | None = None
    progress: bool = False
    # Stop once within this relative gap of the bound (None: 0.1 % on large graphs, 0 on small).
    gap_limit: float | None = None
    # poetc's memory, itself and its solver processes, at which a solver process is
    # stopped (its latest solution kept): solvers/memory.py. None: no limit.
    memory_limit_bytes: int | None = DEFAULT_MEMORY_LIMIT
