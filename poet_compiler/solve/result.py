"""Result: what every strategy returns — solver or heuristic — with simulator figures.

All figures (energy, time, peak RAM, counts) come from replaying the Program in the
independent simulator, never from a solver's objective value. A Result is frozen: a
caller that adds to it (the wall cap that stopped a heuristic, the memory its solvers
took, the compile's own seconds) makes a new one (``dataclasses.replace``).

:class:`Notes` hold the report's figures beyond its fixed keys: a frozen mapping whose
names are the fields of :class:`NoteFields` (one typed, documented declaration per key,
grouped by the stage that reports it; ``poet_compiler/schemas.py`` makes the JSON Schema
of them). A field is in the report once a stage has set it — also to ``None``, which the
report then shows as ``null`` — so the sidecar JSON and the sweep CSV keep exactly the
keys they had as a dict. An unknown name is a ``TypeError``, not a new column.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from poet_compiler.schedule.program import Program
from poet_compiler.schedule.schedule import Schedule

Status = Literal["optimal", "feasible", "infeasible", "timeout"]

# The integer statistics of a LinearModel / backend run that a Result reports, as
# ``model_<name>`` (LinearModel.stats(); backends add non-integers only).
MODEL_STATS = ("variables", "binaries", "constraints", "nonzeros")


# Field metadata of a measured wall time: it differs from run to run, so comparisons of
# results (the sweep's pool/Ray/in-process equality test) leave it out (MEASURED_KEYS).
MEASURED = {"measured": True}


@dataclass(frozen=True)
class NoteFields:
    """The report's figures beyond :attr:`Result.REPORT_KEYS`, declared: the name, type and
    meaning of every key :class:`Notes` may hold. Never instantiated: the values are Notes."""

    # -- finalize (solve/finalize.py): simulator figures of every schedule ------------
    fragmentation: float | None = None
    """Arena bytes / peak live bytes of the planned arena (1.0: no fragmentation)."""
    n_recompute: int | None = None
    """Computes beyond the first of each node."""
    page_in_bytes: int | None = None
    page_out_bytes: int | None = None
    """Bytes paged in from and out to flash."""
    compute_j: float | None = None
    page_in_j: float | None = None
    page_out_j: float | None = None
    static_j: float | None = None
    """Energy split of ``energy_j``: compute, paging in/out, static power over the runtime."""
    n_instructions: int | None = None
    """Instructions of the final Program."""
    n_move: int | None = None
    move_bytes: int | None = None
    move_j: float | None = None
    """MOVEs of a compacted arena (schedule/compact.py), the bytes they copy and their
    energy (part of ``energy_j``); set only when the arena was compacted."""
    compaction_j: float | None = None
    static_arena_bytes: int | None = None
    """What compaction cost: ``energy_j`` less the energy of the same schedule without its
    MOVEs (the copies and the static power over the time they take), and the arena of the
    best static layout, which did not fit; set only when the arena was compacted."""
    cleanup_removed_instructions: int | None = None
    """Instructions the cleanup removed from the linearized Program."""
    stage_s: dict[str, float] | None = field(default=None, metadata=MEASURED)
    """Wall seconds per stage of the compile (time accounting)."""
    stage_effort: dict[str, float] | None = None
    """Work per stage of the solve, in deterministic seconds (poet_compiler.work)."""
    effort: float | None = None
    effort_used: float | None = None
    """The solve's effort (--effort, in deterministic seconds) and what it spent of it."""
    time_limit_s: float | None = None
    time_limit_given: bool | None = None
    """The wall cap of the whole compile (--time-limit, or its 600 s default) and whether the
    user gave it: an explicit limit without --effort sets the effort (0.3 units per second)."""
    effort_note: str | None = field(default=None, metadata=MEASURED)
    """Set where effort ended the solve well inside the time limit: how long it took of the
    limit, and what searches further (solve/options.py, effort_note)."""
    stopped_by: str | None = None
    """What ended the optimal solve: ``proof``, ``gap``, ``effort``, ``memory`` (the full
    model was not built under --memory-limit, so more effort would not search further) or
    ``time``; a heuristic strategy's only when the wall cap stopped it (``time``). Only
    ``time`` (the --time-limit wall cap decided) may make two runs' output differ."""
    startup_s: float | None = field(default=None, metadata=MEASURED)
    trace_s: float | None = field(default=None, metadata=MEASURED)
    costing_s: float | None = field(default=None, metadata=MEASURED)
    compile_s: float | None = field(default=None, metadata=MEASURED)
    """The compile's wall seconds outside the solve (api.compile): the command's start
    (the interpreter and its imports, when the time limit counts from it), tracing or
    loading the model, costing it (and the checkpoint-all reference), and the whole
    compile from the instant its time limit counts from."""
    peak_rss_mb: dict[str, int] | None = field(default=None, metadata=MEASURED)
    """The kernel's peak resident MiB of the compile (``poetc_mb``: the process itself,
    tracing included) and of its largest solver child (``solver_mb``, with the pages it
    shares with poetc), after the compile (api.compile)."""
    memory_peak_mb: int | None = field(default=None, metadata=MEASURED)
    """The most of poetc's memory the watches measured while solver processes ran (MiB:
    poetc's resident bytes plus its solvers' private bytes, sampled every 0.2 s)."""
    memory_limit_mb: int | None = None
    memory_stops: int | None = None
    """The ``--memory-limit`` the solver processes were held to, and how many it stopped
    (solvers/memory.py; set only when it stopped one)."""
    arena_rescue: dict[str, int] | None = None
    """Schedules whose live bytes fit but whose first arenas did not: whether compaction kept
    the answer (``compacted``), a re-solve against the arena kept it (``resolved``), and
    how many were given up (``lost``)."""

    # -- the MILP driver (solve/milp.py) -----------------------------------------------
    solver_used: str | None = None
    """Which search produced the schedule (backend, guided search, cover, warm start)."""
    gap_limit: float | None = None
    """The relative gap the solve stopped at."""
    cover_bound_j: float | None = None
    """The eviction-cover lower bound at the (possibly reduced) budget."""
    cover_one_level_j: float | None = None
    """The cover's bound before :func:`~poet_compiler.solve.cover.deeper_cover` raised it
    (set only when it did)."""
    cover_restores: int | None = None
    """The restores (recomputes and page-ins) the cover chose."""
    guided_source: str | None = None
    """Where the guided stage's schedule came from: the cover's realization, the guided
    sub-problem, the presence model or the warm start."""
    guided_solve_s: float | None = field(default=None, metadata=MEASURED)
    guided_finalize_s: float | None = field(default=None, metadata=MEASURED)
    """The guided stage's solver time, and what finalizing its schedule took (work units)."""
    presence: dict[str, Any] | None = None
    """The presence bound (solve/presence.py): ``bound_j`` (valid at this budget),
    ``closed`` (solved to optimality or within the gap of its best solution), ``pairs``
    (its size: (tensor, point) pairs), ``message``; or ``skipped`` and why."""
    presence_solve_s: float | None = field(default=None, metadata=MEASURED)
    """The presence model's solver time."""
    full_model_skipped: bool | None = None
    """The full model was not solved (too little time left after the guided stage)."""
    row_generation: dict[str, int] | None = None
    """The full fast model by rounds (solve/row_generation.py): ``rounds`` solved,
    ``full_stages`` that got all their memory rows, of ``stages``."""
    model_variables: int | None = None
    model_binaries: int | None = None
    model_constraints: int | None = None
    model_nonzeros: int | None = None
    """The full model's size (LinearModel.stats())."""
    model_build_s: float | None = field(default=None, metadata=MEASURED)
    backend_solve_s: float | None = field(default=None, metadata=MEASURED)
    """Building the full model, and its solver time."""
    backend_bound_j: float | None = None
    """A valid lower bound at this budget (the backend's, else the cover's), even without a schedule."""
    warm_start_found: bool | None = None
    """The full model (or the guided stage) started from a schedule."""
    solver_objective: float | None = None
    """The full model's objective (the report's energy is the simulator's)."""
    lower_bound_reduced_budget_j: float | None = None
    """The bound of a fragmentation re-solve: valid for its reduced budget only."""
    fragmentation_retries: int | None = None
    fragmentation_reserve_bytes: int | None = None
    fragmentation_overhead_bytes: int | None = None
    """Re-solves with the budget lowered by the arena's overshoot, the bytes held back, arena - peak."""
    fallback_schedule: str | None = None
    """The heuristic whose schedule was kept (the solver did not beat it)."""
    transfers: str | None = None
    """The program family of the schedule: ``stage`` (overlapped DMA) or ``sync``."""
    family_energy_j: dict[str, float | None] | None = None
    """Energy of each family's schedule when both were searched."""
    infeasible_proof: str | None = None
    """What proved the budget infeasible: the eviction-cover bound or the solver."""

    # -- the infeasibility explanation (solve/feasibility.py) ---------------------------
    min_ram_bytes: int | None = None
    """The smallest RAM that works, when exact (None: only the lower bound is known)."""
    min_ram_lower_bytes: int | None = None
    """A proven lower bound of the RAM that works (also where a solve found no schedule:
    one node's working set)."""
    min_deadline_s: float | None = None
    """The smallest deadline that works at this RAM, when exact."""
    min_deadline_lower_s: float | None = None
    """A proven lower bound of the deadline that works at this RAM."""

    # -- heuristics (solve/baselines/_common.py) -----------------------------------------
    attempt: dict[str, Any] | None = None
    """An infeasible heuristic's best attempt (its simulator figures)."""


FIELDS = tuple(dataclasses.fields(NoteFields))
FIELD_NAMES = frozenset(f.name for f in FIELDS)
_ORDER = {f.name: k for k, f in enumerate(FIELDS)}


class Notes(Mapping[str, Any]):
    """Report fields (the names of :class:`NoteFields`), frozen: every change is a new
    value. A stage hands them on in its outcome; a Result carries the last. An unknown name
    is a ``TypeError``; a field set to None is set (the report shows ``null``). A field
    reads as an attribute too (``notes.stopped_by``: None when unset)."""

    __slots__ = ("_fields",)
    _fields: MappingProxyType[str, Any]

    def __init__(self, fields: Mapping[str, Any] | None = None, **values: Any) -> None:
        items = {**(fields or {}), **values}
        unknown = sorted(set(items) - FIELD_NAMES)
        if unknown:
            raise TypeError(f"Notes have no field {', '.join(unknown)}")
        object.__setattr__(self, "_fields", MappingProxyType(items))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Notes are frozen: use set() or merge(), which return new Notes")

    def __getattr__(self, name: str) -> Any:
        if name in FIELD_NAMES:
            return self._fields.get(name)
        raise AttributeError(f"Notes have no field {name}")

    def __reduce__(self) -> tuple[type[Notes], tuple[dict[str, Any]]]:
        # A mapping proxy does not pickle; Results cross process boundaries (sweeps).
        return Notes, (dict(self._fields),)

    def __getitem__(self, name: str) -> Any:
        return self._fields[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __repr__(self) -> str:
        return f"Notes({dict(self._fields)!r})"

    def set(self, **values: Any) -> Notes:
        """These notes with ``values`` set."""
        return Notes({**self._fields, **values})

    def merge(self, other: Mapping[str, Any], *, overwrite: bool = True, **values: Any) -> Notes:
        """These notes with ``other``'s fields (``overwrite=False``: only those not set
        here), then ``values`` set (as ``dict.update(other, **values)``)."""
        merged = {**self._fields, **other} if overwrite else {**other, **self._fields}
        return Notes({**merged, **values})

    def without(self, name: str) -> Notes:
        return Notes({k: v for k, v in self._fields.items() if k != name})

    def names(self) -> list[str]:
        """The set fields, in declaration order."""
        return sorted(self._fields, key=_ORDER.__getitem__)

    def to_dict(self) -> dict[str, Any]:
        """The set fields as report keys, in declaration order (JSON values: containers copied)."""
        return {name: dict(v) if isinstance(v := self._fields[name], dict) else v for name in self.names()}


NO_NOTES = Notes()
@dataclass(frozen=True)
class Judged:
    """What a plan was judged to be: its status, the bound it was judged by and its gap to
    it, and why (the message)."""

    status: Status
    message: str = ""
    lower_bound_j: float | None = None
    gap: float | None = None


@dataclass(frozen=True)
class Run:
    """What made a plan: the strategy, its wall seconds, and the solver and formulation
    (``none`` for a heuristic)."""

    strategy: str
    solve_time_s: float = 0.0
    solver: str = "none"
    formulation: str = "none"


# Report keys that are measured wall times, not results: Result.solve_time_s and the
# NoteFields declared with ``metadata=MEASURED``.
MEASURED_KEYS = frozenset({"solve_time_s", *(f.name for f in FIELDS if f.metadata.get("measured"))})


@dataclass(frozen=True)
class Result:
    status: Status
    strategy: str
    mode: str
    ram_budget_bytes: int
    deadline_s: float | None
    program: Program | None = None
    schedule: Schedule | None = None
    energy_j: float | None = None
    runtime_s: float | None = None
    peak_ram_bytes: int | None = None
    arena_bytes: int | None = None
    lower_bound_j: float | None = None
    gap: float | None = None
    solve_time_s: float = 0.0
    n_nodes: int = 0
    n_compute: int = 0
    n_page_in: int = 0
    n_page_out: int = 0
    solver: str = "none"
    formulation: str = "none"
    message: str = ""
    notes: Notes = field(default_factory=Notes)

    @property
    def ok(self) -> bool:
        return self.status in ("optimal", "feasible")

    REPORT_KEYS = (
        "status", "energy_j", "runtime_s", "peak_ram_bytes", "ram_budget_bytes", "deadline_s",
        "lower_bound_j", "gap", "solve_time_s", "n_nodes", "n_compute", "n_page_in",
        "n_page_out", "solver", "formulation", "mode", "strategy",
    )

    def report(self) -> dict[str, Any]:
        """The report object (sidecar JSON, --json): the fixed report keys plus the set notes."""
        out = {k: getattr(self, k) for k in self.REPORT_KEYS}
        out["arena_bytes"] = self.arena_bytes
        out["message"] = self.message
        out.update(self.notes.to_dict())
        return out
