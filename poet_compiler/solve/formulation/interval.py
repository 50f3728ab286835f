"""The interval formulation: each tensor's stays in RAM as CP-SAT intervals.

Size O(n·C + |E|·C²) instead of the stage matrices' O(n²): the way to schedules for
graphs of hundreds to thousands of nodes (retention intervals with a cumulative memory
resource, as Moccasin, ICML 2023, here with page-out/page-in events and POET's energy).

**Time axis.** The events of Checkmate's stages, laid end to end: stage ``t`` has one
slot per node ``k <= t``, at ``event(t, k) = t·n + k`` (slots ``k > t`` stay empty, which
changes nothing: the live set only shrinks between computes). Node ``i`` is first computed
at ``event(i, i)``; every later copy of it starts in its own slot ``event(t, i)`` of a
later stage ``t``. So every solution is a schedule of docs/model.md (stage ``t``, node
order inside it), and it is decoded into the stage matrices and judged by the simulator
like any other.

**Copies.** Node ``i`` has copy 0 (its first compute, always present) and up to ``C - 1``
optional copies, each a stay in RAM ``[start, end)``: either a recompute or a page-in
(``pagein[c]``; a page-in needs the tensor's one page-out, made right after its first
compute — with synchronous transfers the time and energy of a page-out do not depend on
when it runs, and the tensor is in RAM then anyway). A copy is available to readers from
``start + 1`` (readers of ``i`` sit in slots ``> i``) until ``end - 1``; copies of one node
are ordered, and the next starts no earlier than its stage's first slot after the
previous ended (at most one stay per stage: docs/model.md, restriction 3).

**Rules.**
- every compute (copy 0 and recompute copies) of ``j`` finds each input in RAM: for each
  input ``i`` some copy ``d`` with ``start_d < start_j < end_d`` (a Boolean per pair);
- memory: a cumulative resource over every stay (``m_i``) and every compute's workspace
  (``w_i`` for one slot) with the activation budget as capacity. Between computes the
  live set only shrinks, so this is the memory at each compute point;
- time: the extra compute and transfer time fits the deadline's slack (synchronous
  transfers: times add up).

**Least RAM** (``least_ram=True``): the cumulative's capacity is a variable from the
budget up, and the objective is that capacity instead of energy. Checkpoint-all (one stay
per tensor, always held) is a solution of it, so the search starts from a schedule and
works the peak down, where the model at the budget gives CP-SAT nothing to start from: on
a 250-node layered DAG at 80 % the energy model found no solution in 280 s, this one
reaches 81 % of the checkpoint-all peak in 140 s (BENCHMARKS.md, "Optimizer grid").

**What it does not search** beyond the stage formulations' restrictions: more than ``C``
stays per tensor, and page-ins allocated before their reader's slot (a page-in sits in
the tensor's own slot of its stage; the Program makes it right before the reader, with
less RAM). Its optimum is therefore an upper bound on the stage formulations' and its
bound is not a bound for them: :mod:`poet_compiler.solve.milp` keeps the cover's and the
stage models' bounds for its claims. Synchronous transfers only (``problem.synchronous``);
for a DMA device with time that matters it searches the synchronous family.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.backends.native import new_model
from poet_compiler.solve.problem import Problem

# Copies per tensor (first compute included). Measured in BENCHMARKS.md ("interval").
DEFAULT_COPIES = 3
# Integer resolution of the objective and of the deadline row.
_OBJ_STEPS = 1 << 24
_TIME_STEPS = 1 << 24


def tri(t: int, n: int) -> int:
    """First event of stage ``t`` (``n`` nodes)."""
    return t * n


def event(t: int, k: int, n: int) -> int:
    return t * n + k


def stage_of(e: int, n: int) -> int:
    """The stage of event ``e``."""
    return e // n


@dataclass
class Copy:
    node: int
    index: int                 # 0: the first compute
    start: Any                 # event of its compute or page-in: int or n*stage + node
    stage: Any                 # IntVar or int
    end: Any
    present: Any               # BoolVar or True
    pagein: Any = None         # BoolVar (None: a compute)
    compute: Any = None        # BoolVar: present and not a page-in (copy 0: True)
    length: Any = None         # IntVar end - start (None: fixed)


@dataclass(frozen=True)
class Reserve:
    """Keep ``bytes`` free over the events ``[start, end)`` (a fixed demand in the
    cumulative; :mod:`poet_compiler.solve.arena_reserve` makes them)."""

    start: int
    end: int
    bytes: int


@dataclass
class IntervalModel:
    """A built CP-SAT model and what decoding it needs."""

    problem: Problem
    model: Any                              # cp_model.CpModel
    copies: list[list[Copy]]
    page_out: dict[int, Any]                # node -> BoolVar
    links: list[tuple[Any, Copy, Copy]]     # (Boolean, input copy, reader copy): "serves"
    obj_unit: float                         # joules per objective unit
    obj_const: float                        # joules of the fixed part (every first compute)
    obj_err: float                          # most the floored costs underestimate, in units
    stats: dict[str, int] = field(default_factory=dict)
    capacity: Any = None                    # least_ram: the capacity variable (units of ``unit`` bytes)
    unit: int = 1                           # bytes per memory unit of the cumulative

    def schedule(self, value: Any) -> Schedule:
        """Decode a solution (``value``: variable -> int, e.g. ``CpSolver.value``)."""
        return decode(self, value)

    def energy_bound(self, units: float) -> float:
        """A valid lower bound, in joules, on this model's optimum from a bound in units."""
        return (max(0, math.ceil(units - 1e-9) - self.obj_err)) * self.obj_unit + self.obj_const


def _slack(problem: Problem) -> float | None:
    if problem.deadline_s is None:
        return None
    return problem.deadline_s * (1 + 1e-9) - problem.costs.compute_only_s


def build_interval(problem: Problem, *, copies: int = DEFAULT_COPIES,
                   reserves: Sequence[Reserve] = (), least_ram: bool = False) -> IntervalModel:
    """The interval model of ``problem`` (synchronous transfers) with at most ``copies``
    stays per tensor; ``reserves`` keep bytes free at some events. With ``least_ram`` the
    capacity is a variable from the budget up and is the objective (module docstring)."""
    b = _Builder(problem, copies)
    for i in range(problem.n):
        b.add_node(i)
    capacity = b.m.new_int_var(b.capacity, max(b.capacity, b.total()), "capacity") if least_ram else None
    b.add_memory(reserves, capacity)
    n_links = b.add_dependencies()
    b.add_deadline()
    obj_unit, err = b.add_objective(capacity)
    c = problem.costs
    const = float(sum(c.compute_j)) + c.static_w * c.compute_only_s
    stats = {"intervals": len(b.intervals), "copies": sum(len(o) for o in b.copies_of), "links": n_links,
             "horizon": b.horizon}
    return IntervalModel(problem, b.m, b.copies_of, b.page_out, b.links, obj_unit, const, math.ceil(err), stats,
                         capacity, b.unit)


class _Builder:
    """The parts of :func:`build_interval`, one rule each (module docstring)."""

    def __init__(self, problem: Problem, copies: int) -> None:
        g, c = problem.graph, problem.costs
        self.problem, self.copies, self.m = problem, copies, new_model()
        self.cons = g.consumers
        self.slack = _slack(problem)
        self.sizes = [node.output_bytes for node in g.nodes]
        self.works = [node.workspace_bytes for node in g.nodes]
        self.unit = math.gcd(*[s for s in self.sizes + self.works if s > 0]) or 1
        self.capacity = max(0, problem.activation_budget // self.unit)
        self.horizon = tri(problem.n, problem.n)
        self.recomputable = [problem.allows_remat and not node.pinned and bool(self.cons[i])
                             and self._fits(c.compute_s[i]) for i, node in enumerate(g.nodes)]
        self.pageable = [problem.allows_paging and not node.pinned and bool(self.cons[i]) and i + 1 < problem.n
                         and self._fits(c.page_out_s[i] + c.page_in_s[i]) for i, node in enumerate(g.nodes)]
        self.copies_of: list[list[Copy]] = []
        self.page_out: dict[int, Any] = {}
        self.links: list[tuple[Any, Copy, Copy]] = []
        self.cost_terms: list[tuple[Any, float]] = []   # (literal, joules)
        self.time_terms: list[tuple[Any, float]] = []   # (literal, seconds)
        self.intervals: list[Any] = []
        self.demands: list[int] = []

    def total(self) -> int:
        """Memory units of every tensor and the largest workspace at once: more than any
        schedule needs."""
        return sum(s // self.unit for s in self.sizes) + max(self.works, default=0) // self.unit

    def _fits(self, extra_s: float) -> bool:
        return self.slack is None or extra_s <= self.slack

    def _charge(self, lit: Any, i: int, joules: float, seconds: float) -> None:
        self.cost_terms.append((lit, joules + self.problem.costs.static_w * seconds))
        self.time_terms.append((lit, seconds))

    def add_node(self, i: int) -> None:
        """Copy 0 (the first compute), the optional copies, and the page-out they need."""
        m, c, n = self.m, self.problem.costs, self.problem.n
        first = event(i, i, n)
        # A sink (loss, gradient) is freed right after its compute.
        end0 = m.new_int_var(first + 1, self.horizon, f"e[{i},0]") if self.cons[i] else first + 1
        length0 = 1 if isinstance(end0, int) else m.new_int_var(1, self.horizon - first, f"l[{i},0]")
        self.intervals.append(m.new_interval_var(first, length0, end0, f"I[{i},0]"))
        self.demands.append(self.sizes[i] // self.unit)
        own = [Copy(i, 0, first, i, end0, True, None, True, None if isinstance(length0, int) else length0)]
        stages = list(range(i + 1, n)) if (self.recomputable[i] or self.pageable[i]) else []
        for k in range(1, self.copies if stages else 1):
            # The stage is the variable; the start an affine expression of it (a domain of
            # the stage events themselves took CP-SAT minutes to load on 1,567 nodes).
            tau = m.new_int_var(stages[0], stages[-1], f"t[{i},{k}]")
            s = n * tau + i
            e = m.new_int_var(event(stages[0], i, n) + 1, self.horizon, f"e[{i},{k}]")
            p = m.new_bool_var(f"p[{i},{k}]")
            length = m.new_int_var(1, self.horizon, f"l[{i},{k}]")
            self.intervals.append(m.new_optional_interval_var(s, length, e, p, f"I[{i},{k}]"))
            self.demands.append(self.sizes[i] // self.unit)
            prev = own[-1]
            if k > 1:
                m.add_implication(p, prev.present)
            # The next stay starts in a later stage than the previous one ended.
            m.add(prev.end <= n * tau).only_enforce_if(p)
            pi = m.new_bool_var(f"pi[{i},{k}]") if self.pageable[i] else None
            comp = m.new_bool_var(f"rc[{i},{k}]") if self.recomputable[i] else None
            m.add(sum(x for x in (pi, comp) if x is not None) == p)
            if pi is not None:
                # A page-in needs the flash copy, written in stage i+1 (M_out[i+1, i]).
                m.add(tau >= i + 2).only_enforce_if(pi)
                self._charge(pi, i, c.page_in_j[i], c.page_in_s[i])
            if comp is not None:
                if self.problem.graph.last_compute_stage[i] < n - 1:
                    # A reader of a parameter is not recomputed after its update (docs/training.md).
                    m.add(tau <= self.problem.graph.last_compute_stage[i]).only_enforce_if(comp)
                self._charge(comp, i, c.compute_j[i], c.compute_s[i])
            own.append(Copy(i, k, s, tau, e, p, pi, comp, length))
        if any(cp_.pagein is not None for cp_ in own):
            po = m.new_bool_var(f"po[{i}]")
            self.page_out[i] = po
            for cp_ in own:
                if cp_.pagein is not None:
                    m.add_implication(cp_.pagein, po)
            # The page-out is made in stage i+1: copy 0 is still resident at its start.
            m.add(end0 >= tri(i + 1, n) + 1).only_enforce_if(po)
            self._charge(po, i, c.page_out_j[i], c.page_out_s[i])
        self.copies_of.append(own)

    def add_memory(self, reserves: Sequence[Reserve], capacity: Any = None) -> None:
        """Every stay, each compute's workspace for its slot, and the reserves, within
        the budget (a reserve's bytes rounded up to the model's unit), or within
        ``capacity`` (a variable) when given."""
        m = self.m
        for r in reserves:
            start, end = max(0, r.start), min(self.horizon, r.end)
            if end > start and r.bytes > 0:
                self.intervals.append(m.new_fixed_size_interval_var(start, end - start, f"reserve[{start}]"))
                self.demands.append(-(-r.bytes // self.unit))
        for i, own in enumerate(self.copies_of):
            if self.works[i] <= 0:
                continue
            for cp_ in own:
                if cp_.compute is True:
                    self.intervals.append(m.new_fixed_size_interval_var(cp_.start, 1, f"W[{i},{cp_.index}]"))
                elif cp_.compute is not None:
                    self.intervals.append(m.new_optional_fixed_size_interval_var(
                        cp_.start, 1, cp_.compute, f"W[{i},{cp_.index}]"))
                else:
                    continue
                self.demands.append(self.works[i] // self.unit)
        m.add_cumulative(self.intervals, self.demands, self.capacity if capacity is None else capacity)

    def add_dependencies(self) -> int:
        """Every compute of ``j`` finds each input in RAM: one Boolean per (input copy,
        reader copy) that picks the serving copy. Returns their number."""
        m, g = self.m, self.problem.graph
        n_links = 0
        for j, readers in enumerate(self.copies_of):
            for reader in readers:
                if reader.compute is None:
                    continue
                for i in sorted(set(g.nodes[j].inputs)):
                    links = []
                    for d in self.copies_of[i]:
                        x = m.new_bool_var(f"x[{i},{d.index}->{j},{reader.index}]")
                        if d.present is not True:
                            m.add_implication(x, d.present)
                        m.add(d.start + 1 <= reader.start).only_enforce_if(x)
                        m.add(d.end >= reader.start + 1).only_enforce_if(x)
                        links.append(x)
                        self.links.append((x, d, reader))
                    n_links += len(links)
                    if reader.compute is True:
                        m.add_bool_or(links)
                    else:
                        m.add_bool_or(links).only_enforce_if(reader.compute)
        return n_links

    def add_deadline(self) -> None:
        """The extra time within the slack (times rounded up: never optimistic)."""
        if self.slack is None or not self.time_terms:
            return
        slack = max(self.slack, 0.0)
        t_unit = max(max(sec for _, sec in self.time_terms), slack) / _TIME_STEPS or 1.0
        self.m.add(sum(math.ceil(sec / t_unit - 1e-12) * lit for lit, sec in self.time_terms)
                   <= math.floor(slack / t_unit))

    def add_objective(self, capacity: Any = None) -> tuple[float, float]:
        """Energy with costs floored to integer units (so the model's bound stays valid;
        the simulator reports the real figures), or ``capacity`` when given (least RAM:
        the energy units are still returned, for decoding). Returns (joules per unit,
        most the floored costs underestimate, in units)."""
        top = max([j for _, j in self.cost_terms], default=0.0)
        obj_unit = top / _OBJ_STEPS if top > 0 else 1.0
        coeffs = [(lit, math.floor(j / obj_unit)) for lit, j in self.cost_terms]
        err = sum(j / obj_unit - k for (_, j), (_, k) in zip(self.cost_terms, coeffs))
        if capacity is not None:
            self.m.minimize(capacity)
        elif coeffs:
            self.m.minimize(sum(k * lit for lit, k in coeffs))
        return obj_unit, err


def decode(im: IntervalModel, value: Any) -> Schedule:
    """The stage matrices of a solution: computes and page-ins where copies start, RAM at
    a stage's start where a stay covers it, the page-out in the first compute's stage."""
    n = im.problem.n
    s = Schedule.empty(n)
    np.fill_diagonal(s.R, True)

    def val(x: Any) -> int:
        return x if isinstance(x, int) else int(value(x))

    for i, own in enumerate(im.copies):
        for cp_ in own:
            if cp_.present is not True and not val(cp_.present):
                continue
            t0, end = val(cp_.stage), val(cp_.end)
            if cp_.index > 0:
                if cp_.pagein is not None and val(cp_.pagein):
                    s.M_in[t0, i] = True
                else:
                    s.R[t0, i] = True
            # Resident at the start of every later stage the stay reaches into.
            for t in range(t0 + 1, n):
                if tri(t, n) >= end:
                    break
                s.S_RAM[t, i] = True
        po = im.page_out.get(i)
        if po is not None and val(po):
            s.M_out[i + 1, i] = True       # copy 0 is resident at stage i+1's start
            s.S_AUX[i + 2:, i] = True
    return s


def hint(im: IntervalModel, schedule: Schedule) -> bool:
    """Suggest ``schedule`` as a starting solution when it has at most the model's copies
    per tensor (its page-outs right after the first compute). Returns whether it did."""
    g, n = im.problem.graph, im.problem.n
    cons = g.consumers
    m = im.model
    plan: list[tuple[list[tuple[int, bool, int]], bool]] = []
    for i in range(n):
        stays: list[tuple[int, bool, int]] = []      # (stage, paged in, end event)
        starts = sorted([(int(t), False) for t in np.flatnonzero(schedule.R[:, i])] +
                        [(int(t), True) for t in np.flatnonzero(schedule.M_in[:, i])])
        for t, paged in starts:
            last = t
            while last + 1 < n and schedule.S_RAM[last + 1, i]:
                last += 1
            readers = [j for j in cons[i] if j <= last and schedule.R[last, j]]
            end = event(last, max(readers) if readers else i, n) + 1
            stays.append((t, paged, end))
        if len(stays) > len(im.copies[i]) or (stays and stays[0][0] != i):
            return False
        plan.append((stays, bool(schedule.M_out[:, i].any())))
    where: dict[tuple[int, int], tuple[int, int]] = {}    # (node, copy) -> (start, end) if present
    for i, (stays, paged_out) in enumerate(plan):
        for k, cp_ in enumerate(im.copies[i]):
            present = k < len(stays)
            if present:
                t, paged, end = stays[k]
                start = event(t, i, n)
                where[(i, k)] = (start, end)
            else:
                # An absent copy: any value in its domain (the first stage after i).
                paged, t, start = False, i + 1, event(i + 1, i, n)
                end = start + 1
            if cp_.present is not True:
                m.add_hint(cp_.present, int(present))
                m.add_hint(cp_.stage, t)
            if cp_.pagein is not None:
                m.add_hint(cp_.pagein, int(present and paged))
            if cp_.compute is not None and cp_.compute is not True:
                m.add_hint(cp_.compute, int(present and not paged))
            if not isinstance(cp_.end, int):
                m.add_hint(cp_.end, end)
            if cp_.length is not None:
                m.add_hint(cp_.length, end - start)
        if i in im.page_out:
            m.add_hint(im.page_out[i], int(paged_out))
    # Each compute is served by the first copy of each input that is in RAM at its slot.
    served: set[tuple[int, int, int]] = set()
    for x, d, reader in im.links:
        sd, rd = where.get((d.node, d.index)), where.get((reader.node, reader.index))
        key = (d.node, reader.node, reader.index)
        ok = sd is not None and rd is not None and sd[0] + 1 <= rd[0] < sd[1] and key not in served
        if ok:
            served.add(key)
        m.add_hint(x, int(ok))
    return True


def stays_needed(schedule: Schedule) -> int:
    """The most stays in RAM (computes and page-ins) any tensor has in ``schedule``: the
    copies the model needs to hold it."""
    counts = schedule.R.sum(axis=0) + schedule.M_in.sum(axis=0)
    return int(counts.max()) if counts.size else 1
