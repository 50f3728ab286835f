"""Turn any strategy's plan (Schedule or Program) into a Result with simulator figures.

Every strategy — MILP, heuristic, baseline — ends here, so every Result is produced the
same way: linearize (if given matrices), remove pointless work, plan the arena, replay in
the independent simulator with the budget and deadline, and copy the simulator's numbers
into the Result. A plan that breaks a rule of the execution model raises
:class:`~poet_compiler.errors.InternalError` (a bug in the strategy that built it, never
"infeasible"); a plan that misses the budget or the deadline comes back with status
``infeasible`` and the reason. A plan whose live bytes fit but whose static arena does
not (fragmentation) is compacted (:mod:`poet_compiler.schedule.compact`: MOVEs join the
holes), so it is not lost; only when buffers in flight block every move does it come
back ``infeasible`` with a message giving arena vs budget, so a solver can retry with a
smaller budget.

:func:`finalize_plan` gives the plan with its typed :data:`Verdict` (:class:`Fits`,
:class:`Fenced`, :class:`ArenaOvershoot`, :class:`OverBudget`), which a caller branches on;
:func:`finalize` makes a Result of it at once (the heuristics; ``strategy="optimal"``
builds its Result at the end, :mod:`poet_compiler.solve.pipeline.report`). Either way the
Result is made by :func:`build_result`, once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from poet_compiler import work
from poet_compiler.errors import InternalError, OverBudgetError, ScheduleError
from poet_compiler.schedule.arena import exact_packing_applies, plan_arena
from poet_compiler.schedule.cleanup import remove_pointless_work
from poet_compiler.schedule.compact import compact_arena, without_moves
from poet_compiler.schedule.linearize import linearize
from poet_compiler.schedule.program import Program
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.schedule.simulate import Simulation, simulate
from poet_compiler.solve.problem import Problem
from poet_compiler.solve.result import NO_NOTES, Judged, Notes, Result, Run, Status
from poet_compiler.solve.tuning import TUNING, Tuning


@dataclass(frozen=True)
class Fits:
    """The plan runs within the budget and the deadline, its arena laid out."""


@dataclass(frozen=True)
class Fenced:
    """It fits, but only with ``fences`` FENCEs finalize added (the last resort,
    ``fence_last``): waits for the channel that cost time and static energy."""

    fences: int


@dataclass(frozen=True)
class ArenaOvershoot:
    """The live bytes fit, no static layout does: the arena is ``bytes`` over the budget
    (fragmentation), even compacted. A solver may retry with a smaller budget."""

    bytes: int


@dataclass(frozen=True)
class OverBudget:
    """The live bytes exceed the budget, or the step misses the deadline."""


#: What finalize found: the plan fits (with or without added FENCEs) or why it does not.
Verdict = Fits | Fenced | ArenaOvershoot | OverBudget


@dataclass(frozen=True)
class Layout:
    """How finalize lays a program out in its arena: the static planner
    (:func:`~poet_compiler.schedule.arena.plan_arena`) and the compactor
    (:func:`~poet_compiler.schedule.compact.compact_arena`). A test of what happens when a
    layout fragments passes its own (a planner that wastes bytes on purpose)."""

    plan_arena: Callable[..., Program] = plan_arena
    compact_arena: Callable[..., Program | None] = compact_arena


LAYOUT = Layout()


@dataclass(frozen=True)
class Finalized:
    """A plan linearized, cleaned up, laid out in its arena and replayed by the simulator.

    ``sim`` is the replay of ``program`` (its figures go into every Result); ``verdict``
    says whether it fits; ``problems`` are the reasons when it does not, in the words a
    message gives them; ``notes`` the report figures finalize sets (fragmentation, the
    energy split, the copies of a compacted arena, ...)."""

    program: Program
    schedule: Schedule | None
    sim: Simulation
    verdict: Verdict
    problems: tuple[str, ...]
    notes: Notes

    @property
    def ok(self) -> bool:
        return isinstance(self.verdict, (Fits, Fenced))

    @property
    def energy_j(self) -> float:
        return self.sim.energy_j

    @property
    def peak_bytes(self) -> int:
        return self.sim.peak_bytes

    @property
    def arena_bytes(self) -> int | None:
        return self.program.arena_bytes

    def gap_to(self, lower_bound_j: float | None) -> float | None:
        """The relative gap to ``lower_bound_j`` as a Result reports it (None: no bound)."""
        if lower_bound_j is not None and self.sim.energy_j > 0:
            return max(0.0, (self.sim.energy_j - lower_bound_j) / self.sim.energy_j)
        return 0.0 if lower_bound_j is not None else None


def build_result(problem: Problem, plan: Finalized | None, judged: Judged, run: Run, notes: Notes = NO_NOTES) -> Result:
    """The one way a Result is made of a finalized plan (or of none): the plan's program
    and schedule with the simulator's figures of its replay, the problem's budgets, what
    the caller ``judged`` it to be, the ``run`` that made it, and its report notes."""
    sim = None if plan is None else plan.sim
    return Result(
        status=judged.status, strategy=run.strategy, mode=problem.mode, ram_budget_bytes=problem.ram_budget_bytes,
        deadline_s=problem.deadline_s,
        program=None if plan is None else plan.program, schedule=None if plan is None else plan.schedule,
        energy_j=None if sim is None else sim.energy_j, runtime_s=None if sim is None else sim.runtime_s,
        peak_ram_bytes=None if sim is None else sim.peak_bytes,
        arena_bytes=None if plan is None else plan.program.arena_bytes,
        lower_bound_j=judged.lower_bound_j, gap=judged.gap, solve_time_s=run.solve_time_s, n_nodes=problem.n,
        n_compute=0 if sim is None else sim.n_compute, n_page_in=0 if sim is None else sim.n_page_in,
        n_page_out=0 if sim is None else sim.n_page_out, solver=run.solver, formulation=run.formulation,
        message=judged.message, notes=notes,
    )


def result_of(problem: Problem, done: Finalized, *, strategy: str, status: Status = "feasible",
              lower_bound_j: float | None = None, message: str = "") -> Result:
    """``done`` as a Result, judged by its verdict alone: ``status`` and ``message`` (and
    the gap to ``lower_bound_j``) when it fits, else ``infeasible`` with its problems
    before ``message`` (``strategy="optimal"`` judges its answer by more, and builds its
    Result in :mod:`poet_compiler.solve.pipeline.report`)."""
    if done.ok:
        judged = Judged(status, message, lower_bound_j, done.gap_to(lower_bound_j))
    else:
        judged = Judged("infeasible", "; ".join([*done.problems, *([message] if message else [])]), lower_bound_j)
    return build_result(problem, done, judged, Run(strategy), done.notes)


def finalize(problem: Problem, plan: Schedule | Program, *, strategy: str, status: Status = "feasible",
             lower_bound_j: float | None = None, message: str = "", arena_time_s: float | None = None,
             fence_last: bool = False) -> Result:
    """Linearize, clean up, plan the arena, simulate, and make a :class:`Result` of it
    (:func:`finalize_plan`, then :func:`result_of`). Its ``solve_time_s``, ``solver`` and
    ``formulation`` are the caller's to add.

    Raises :class:`InternalError` when the plan (or the arena planned for it) breaks a
    rule of the execution model: poetc built it, so that is a bug, not an outcome."""
    done = finalize_plan(problem, plan, strategy=strategy, arena_time_s=arena_time_s, fence_last=fence_last)
    return result_of(problem, done, strategy=strategy, status=status, lower_bound_j=lower_bound_j, message=message)


def finalize_plan(problem: Problem, plan: Schedule | Program, *, strategy: str, arena_time_s: float | None = None,
                  fence_last: bool = False, tuning: Tuning = TUNING, layout: Layout = LAYOUT) -> Finalized:
    """Linearize, clean up, plan the arena and replay ``plan``: a :class:`Finalized`.

    ``arena_time_s``: effort for the arena plans (None: no limit; 0: the greedy layouts
    only). When the live bytes fit and the two arena plans do not, the arena is compacted
    (MOVEs). ``fence_last``: when compaction finds no room (buffers in flight), compact
    once more with FENCEs that free the buffers in flight (``program.meta["added_fences"]``,
    the verdict :class:`Fenced`): for a caller that compares the result with another
    schedule it holds. ``strategy`` names the plan's maker in an :class:`InternalError`;
    ``layout``: the arena planner and compactor (:class:`Layout`)."""
    try:
        return _finalize(problem, plan, arena_time_s=arena_time_s, fence_last=fence_last, tuning=tuning,
                         layout=layout)
    except ScheduleError as exc:
        raise InternalError(f"{strategy}: the plan breaks a rule of the execution model: {exc}") from exc


def _finalize(problem: Problem, plan: Schedule | Program, *, arena_time_s: float | None, fence_last: bool,
              tuning: Tuning, layout: Layout) -> Finalized:
    graph, costs = problem.graph, problem.costs
    until = None if arena_time_s is None else work.now() + max(0.0, arena_time_s)

    def left() -> float | None:
        return None if until is None else max(0.0, until - work.now())

    budget = problem.activation_budget
    schedule = plan if isinstance(plan, Schedule) else None
    # A given Program's MOVEs belong to its old layout: the arena is planned afresh.
    program = (
        linearize(graph, plan, mode=problem.mode, dma=not problem.synchronous) if isinstance(plan, Schedule)
        else without_moves(plan)
    )
    raw = simulate(graph, costs, program)          # rule check before any rewriting
    program = remove_pointless_work(graph, program)
    # Budget and deadline are judged on the cleaned program (cleanup never makes it worse).
    sim = simulate(graph, costs, program)
    program = layout.plan_arena(graph, program, budget_bytes=budget, time_limit_s=left())
    if program.arena_bytes is not None and program.arena_bytes > budget >= sim.peak_bytes and left() != 0.0 \
            and exact_packing_applies(program):
        # A fresh plan, not one hinted with the first layout (CP-SAT from a different
        # start packs differently; on a ResNet-18-CIFAR guided schedule, hinted: 1.021 x
        # the peak, over budget; fresh: 1.0067, within): keep the smaller. Only where the
        # exact packing runs: beyond it the harder plan is perturbed greedy orders, and on
        # gpt2_large_mini's guided schedule (3,564 instructions) it took 103 s for the
        # same arena as the first plan, where compaction fitted it in 0.15 s.
        again = layout.plan_arena(graph, program, effort=tuning.arena_retry_effort, budget_bytes=budget,
                                  time_limit_s=left())
        if again.arena_bytes is not None and again.arena_bytes < program.arena_bytes:
            program = again
    if program.arena_bytes is not None and program.arena_bytes > budget >= sim.peak_bytes:
        # The live bytes fit: MOVEs join the holes that no static layout could close
        # (milliseconds, and a copy costs far less than a re-solve's worse schedule).
        limit = None if until is None else max(tuning.last_step_min_s, left() or 0.0)
        compacted = layout.compact_arena(graph, program, budget, time_limit_s=limit, cost=_copies_cost(problem))
        if compacted is not None:
            compacted.meta["static_arena_bytes"] = program.arena_bytes
            program = compacted
    if fence_last and program.arena_bytes is not None and program.arena_bytes > budget >= sim.peak_bytes:
        # The last resort: where buffers in flight block the room, wait for the channel.
        limit = None if until is None else max(tuning.last_step_min_s, left() or 0.0)
        fenced = layout.compact_arena(graph, program, budget, time_limit_s=limit, fences=True,
                                      cost=_copies_cost(problem))
        if fenced is not None:
            fenced.meta["static_arena_bytes"] = program.arena_bytes
            program = fenced

    # Arena check (no overlap, no overflow) — a failure here is a planner bug, so it raises.
    unlaid = sim
    sim = simulate(graph, costs, program)
    fragmentation = float(program.meta.get("fragmentation", 1.0))
    notes = _figures(sim, program, fragmentation)
    if "static_arena_bytes" in program.meta:
        notes = notes.set(compaction_j=sim.energy_j - unlaid.energy_j,
                          static_arena_bytes=int(program.meta["static_arena_bytes"]))
    notes = notes.set(cleanup_removed_instructions=len(raw.timeline) - len(sim.timeline))
    problems = []
    verdict: Verdict = Fits()
    if sim.peak_bytes > budget:
        problems.append(f"peak live bytes {sim.peak_bytes} exceed the activation budget {budget}")
        verdict = OverBudget()
    elif program.arena_bytes is not None and program.arena_bytes > budget:
        problems.append(
            f"arena {program.arena_bytes} bytes (fragmentation {fragmentation:.3f}) exceeds the "
            f"activation budget {budget} although peak live bytes are {sim.peak_bytes}"
        )
        verdict = ArenaOvershoot(program.arena_bytes - budget)
    if problem.deadline_s is not None:
        try:
            simulate(graph, costs, program, deadline_s=problem.deadline_s)
        except OverBudgetError as exc:
            problems.append(str(exc))
            verdict = verdict if isinstance(verdict, ArenaOvershoot) else OverBudget()
    if isinstance(verdict, Fits) and program.meta.get("added_fences"):
        verdict = Fenced(int(program.meta["added_fences"]))
    return Finalized(program, schedule, sim, verdict, tuple(problems), notes)


def _copies_cost(problem: Problem) -> Callable[[Program], float]:
    """How compaction weighs its layouts: the simulated energy (copies, and with FENCEs
    the waits, included), infinite past the deadline, which compaction never takes (a
    static re-plan may still fit)."""
    def cost(program: Program) -> float:
        try:
            return simulate(problem.graph, problem.costs, program, deadline_s=problem.deadline_s).energy_j
        except OverBudgetError:
            return math.inf
    return cost


def _figures(sim: Simulation, program: Program, fragmentation: float) -> Notes:
    """The report figures of a replay beyond the Result's own."""
    notes = Notes(dict(
        fragmentation=fragmentation,
        n_recompute=sim.n_recompute,
        page_in_bytes=sim.page_in_bytes,
        page_out_bytes=sim.page_out_bytes,
        compute_j=sim.compute_j,
        page_in_j=sim.page_in_j,
        page_out_j=sim.page_out_j,
        static_j=sim.static_j,
        n_instructions=len(program.instructions),
    ))
    if sim.n_move:
        notes = notes.set(n_move=sim.n_move, move_bytes=sim.move_bytes, move_j=sim.move_j)
    return notes
