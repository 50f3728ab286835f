"""What a stage of ``strategy="optimal"`` answers with, and how answers are judged.

An :class:`Answer` is a frozen value: a status, a finalized plan (or none), the bound it
is judged against and its gap, a message of typed :class:`Clause` s and the report fields
(:class:`~poet_compiler.solve.result.Notes`) the stages gave it. Every change makes a new
one (``dataclasses.replace``); the driver turns the last into the Result, once
(:mod:`.report`). Judging (pure functions): :func:`with_bound` against the full-budget
bound, :func:`keep_gap_claim_true`, :func:`union` of two program families,
:func:`count_rescues`.

Nothing branches on a message's text: a stage's claim "stopped within the relative gap
limit" is a :class:`Clause` that knows it is one, a plan that missed its arena says so in
its typed verdict (:mod:`poet_compiler.solve.finalize`), and a proof of infeasibility is
:attr:`Answer.proven`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import NamedTuple

from poet_compiler.schedule.program import Program
from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.finalize import ArenaOvershoot, Fenced, Finalized, Verdict
from poet_compiler.solve.result import NO_NOTES, Notes, Status

# A gap this small is closed: CP-SAT solves integer-scaled costs (2^-32 of the total per
# coefficient) and the reported bound subtracts that rounding, so a proven optimum shows
# a relative gap of ~1e-8 against the simulator's energy.
OPTIMALITY_TOL = 1e-6

# Relative float noise between a proven optimum's bound and its simulated energy.
BOUND_NOISE = 1e-7


class Clause(NamedTuple):
    """One clause of a message (the message is its clauses joined by ``"; "``).
    ``gap_claim``: a stage's "stopped within the relative gap limit ..." (it starts the
    clause); ``cites_claim``: such a claim is in the text, also inside a longer clause."""

    text: str
    gap_claim: bool = False
    cites_claim: bool = False


Message = tuple[Clause, ...]


def says(text: str) -> Message:
    """``text`` as a message: its clauses (``""``: none)."""
    return tuple(Clause(t) for t in text.split("; ")) if text else ()


def gap_claim(gap: float, of: str = "") -> Message:
    """The claim a stage makes when its schedule is within the gap limit ``gap`` of a
    bound (``of``: "the presence bound", ...)."""
    text = f"stopped within the relative gap limit {gap:g}" + (f" of {of}" if of else "")
    return (Clause(text, gap_claim=True, cites_claim=True),)


def text(message: Message) -> str:
    return "; ".join(c.text for c in message)


def then(message: Message, more: Message) -> Message:
    """``more`` after ``message`` (just ``more`` when ``message`` is empty)."""
    return message + more if message else more


def after(message: Message, more: Message) -> Message:
    """``more`` after ``message`` even when that is empty (its text then starts with ``"; "``)."""
    return (message or (Clause(""),)) + more


def wrap(prefix: str, message: Message, suffix: str = "") -> Message:
    """The text ``prefix + text(message) + suffix`` as clauses, keeping which of them
    are (or cite) a gap claim: a claim with text before it in its clause no longer is one."""
    body = list(message) or [Clause("")]
    head, tail = says(prefix), says(suffix)
    if head:
        first = body[0]
        body[0] = Clause(head[-1].text + first.text, first.gap_claim and not head[-1].text, first.cites_claim)
        body = [*head[:-1], *body]
    if tail:
        last = body[-1]
        body[-1] = Clause(last.text + tail[0].text, last.gap_claim, last.cites_claim)
        body += tail[1:]
    return tuple(body)


@dataclass(frozen=True)
class Answer:
    """A stage's answer (module docstring).

    ``miss``: why a finalized plan is not the answer (status ``infeasible``): its arena did
    not fit (:class:`ArenaOvershoot`), it fitted only with FENCEs that cost more than a
    schedule in hand (:class:`Fenced`), or it is over budget. ``proven``: infeasibility is
    proven (the eviction cover or the solver; :func:`union` reads it). ``retries``: the
    fragmentation re-solves behind it. ``finalize_s``: the work one finalize of the
    attempt's guided schedule took (what a fallback expects one to take).
    ``over_memory``: the answer is the guided stage's because the full model's forecast
    memory was over its share of ``--memory-limit`` (the report's ``stopped_by`` is then
    ``memory``: more effort or time would not search further)."""

    status: Status
    message: Message = ()
    plan: Finalized | None = None
    lower_bound_j: float | None = None
    gap: float | None = None
    notes: Notes = field(default_factory=Notes)
    proven: bool = False
    miss: Verdict | None = None
    retries: int = 0
    finalize_s: float = 0.0
    over_memory: bool = False

    @property
    def ok(self) -> bool:
        return self.status in ("optimal", "feasible")

    @property
    def energy_j(self) -> float | None:
        return None if self.plan is None else self.plan.energy_j

    @property
    def peak_ram_bytes(self) -> int | None:
        return None if self.plan is None else self.plan.peak_bytes

    @property
    def arena_bytes(self) -> int | None:
        return None if self.plan is None else self.plan.arena_bytes

    @property
    def schedule(self) -> Schedule | None:
        return None if self.plan is None else self.plan.schedule

    @property
    def program(self) -> Program | None:
        return None if self.plan is None else self.plan.program

    @property
    def arena_miss(self) -> bool:
        """A schedule whose live bytes fit but whose arena did not (or only with FENCEs
        that cost more than the schedule kept): a re-solve below the arena may do better."""
        return self.status == "infeasible" and isinstance(self.miss, (ArenaOvershoot, Fenced)) \
            and bool(self.arena_bytes) and self.schedule is not None

    def noted(self, *others: Notes, **values: object) -> Answer:
        """With ``others``' report fields merged in, then ``values`` set."""
        notes = self.notes
        for other in others:
            notes = notes.merge(other)
        return dataclasses.replace(self, notes=notes.set(**values))

    def saying(self, message: Message) -> Answer:
        return dataclasses.replace(self, message=message)


def no_schedule(status: Status, message: Message | str, notes: Notes = NO_NOTES, *, proven: bool = False) -> Answer:
    """An answer without a schedule (a timeout, or infeasible)."""
    return Answer(status, says(message) if isinstance(message, str) else message, notes=notes, proven=proven)


def finalized(done: Finalized, *, status: Status = "feasible", lower_bound_j: float | None = None,
              message: Message = ()) -> Answer:
    """``done`` as an answer: ``status`` when it fits (with its gap to ``lower_bound_j``),
    else ``infeasible`` with its problems before ``message``."""
    if done.ok:
        return Answer(status, message, done, lower_bound_j, done.gap_to(lower_bound_j), done.notes)
    problems = tuple(c for p in done.problems for c in says(p))
    return Answer("infeasible", problems + message, done, lower_bound_j, None, done.notes, miss=done.verdict)


def better(a: Answer | None, b: Answer) -> Answer:
    """The one with less energy: ``b`` when it is cheaper or ``a`` is None, else ``a``."""
    if a is None or (b.energy_j is not None and a.energy_j is not None and b.energy_j < a.energy_j):
        return b
    return a


def with_bound(res: Answer, bound: float | None) -> Answer:
    """``res`` judged against the full-budget bound: every schedule the user could get
    (arena included) costs at least that much. ``optimal`` only for a closed gap."""
    energy = res.energy_j
    if energy is None:
        return res
    if bound is None:
        status = "feasible" if res.status == "optimal" and res.retries else res.status
        return dataclasses.replace(res, lower_bound_j=None, gap=None, status=status)
    if bound > energy * (1 + BOUND_NOISE) + 1e-300:
        # A lower bound above what the schedule really costs means the model and the
        # device disagree: a defect to report, never to clamp away into "optimal".
        note = (f"defect: the lower bound {bound:.6g} J exceeds the simulated energy {energy:.6g} J; "
                "no optimality is claimed (please report this with the input)")
        return dataclasses.replace(res, lower_bound_j=bound, gap=None, status="feasible",
                                   message=then(res.message, says(note)))
    bound = min(bound, energy)     # a proven optimum's bound can exceed it by float noise
    gap = max(0.0, (energy - bound) / energy) if energy > 0 else 0.0
    if gap <= OPTIMALITY_TOL:
        return dataclasses.replace(res, lower_bound_j=bound, gap=0.0, status="optimal")
    return dataclasses.replace(res, lower_bound_j=bound, gap=gap,
                               status="feasible" if res.status == "optimal" else res.status)


def keep_gap_claim_true(res: Answer, gap_limit: float) -> Answer:
    """Without a stage's "stopped within the relative gap limit" clause when the final
    gap is above ``gap_limit``: the claim was made against a stage's own figures, and
    finalizing (an arena's copies) or a re-solve at a lower budget (whose bound does not
    hold for the user's) can move the answer past it. Say so instead."""
    if res.gap is None or res.gap <= gap_limit * (1 + 1e-9) + 1e-12 \
            or not any(c.cites_claim for c in res.message):
        return res
    note = (f"{res.gap:.3%} above the bound, over the gap limit {gap_limit:g}: a stage reached the limit "
            "against its own figures, and the arena's copies or a re-solve at a lower budget cost the rest")
    return res.saying((Clause(note), *(c for c in res.message if not c.gap_claim)))


def union(stage: Answer, sync: Answer) -> Answer:
    """The better of two program families' answers, judged by the union's bound: the
    smallest bound of the families that may hold a schedule (a family proven empty
    contributes none; one with no bound leaves the union without one)."""
    families = (stage, sync)
    empty = [r.status == "infeasible" and r.proven for r in families]
    solved = [r for r in families if r.ok and r.energy_j is not None]
    if not solved:
        out = stage if empty[0] or not empty[1] else sync
        if not all(empty):
            out = dataclasses.replace(out, proven=False)   # only one family is proven empty
        from_stage = empty[0] or not empty[1]
    else:
        best = min(solved, key=lambda r: r.energy_j or 0.0)
        from_stage = best is stage
        bounds = [r.lower_bound_j for r, e in zip(families, empty, strict=True) if not e]
        union_bound = None if any(b is None for b in bounds) else min(b for b in bounds if b is not None)
        out = with_bound(dataclasses.replace(best, status="feasible"), union_bound)
    return out.noted(transfers="stage" if from_stage else "sync",
                     family_energy_j={"stage": stage.energy_j, "sync": sync.energy_j})


def count_rescues(res: Answer, arena_failures: int) -> Answer:
    """``arena_rescue`` of the answer: did compaction keep its schedule (``compacted``:
    its arena laid out with MOVEs, or re-placed online without any), a re-solve against
    the arena (``resolved``), and how many schedules whose live bytes fit were given up
    for their arena (``lost``)."""
    program = res.program
    compacted = int(bool(program is not None and program.meta.get("arena_order") == "compacted"))
    resolved = int(bool(res.notes.get("fragmentation_retries")) and res.notes.get("fallback_schedule") is None)
    lost = max(0, arena_failures - resolved) + (res.notes.get("arena_rescue") or {}).get("lost", 0)
    if not (compacted or resolved or lost):
        return res
    rescue = {"resolved": resolved, "lost": lost}
    if compacted:
        rescue["compacted"] = compacted
    return res.noted(arena_rescue=rescue)
