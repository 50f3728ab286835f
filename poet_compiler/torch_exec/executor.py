"""ScheduledStep: run one training step of a traced model by following a Program.

The rewritten training step (``training_step()``, docs/pytorch.md): instruction by instruction (a
:class:`~poet_compiler.schedule.interpreter.ProgramInterpreter`, one method per opcode),

* ``COMPUTE i`` runs node ``i``'s FX ops (the prelude once, first); a second COMPUTE of
  a node is a recomputation from its inputs, exactly as the schedule asks; a random op
  recomputed draws from its stashed generator state, so it gives its first numbers;
* ``FREE i`` drops every value node ``i`` holds from the environment — the executor
  keeps no other reference, so the storage is really released;
* ``PAGE_OUT i`` writes the node's storages to a real page file on disk
  (:class:`~poet_compiler.torch_exec.pager.PageFile`); the tensors stay usable until FREE;
* ``PAGE_IN i`` reads them back into fresh storages and rebuilds the node's values
  (dtype, shape, strides, storage offset: the folded views come back with them);
* ``FENCE`` completes transfers: I/O here is synchronous, so it is a no-op, or an
  ``fsync`` point with ``fsync=True``.

What the node keeps and what is transient follows :mod:`poet_compiler.torch_exec.plan`.
The executor measures the peak of live activation bytes from the tensors it really holds
(deduplicated by storage; parameters, buffers, inputs, target and the prelude excluded),
the bytes written to and read from the page file, and the wall time.

:meth:`ScheduledStep.step` is a drop-in for ``loss.backward()``: it accumulates ``.grad``
on the module's parameters and writes the buffer updates (BatchNorm running statistics)
back, then returns the loss. :meth:`ScheduledStep.run` leaves the module untouched.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import torch
import torch.fx

from poet_compiler.errors import ScheduleError
from poet_compiler.frontends.torch.rng import device_of, replayed
from poet_compiler.schedule.interpreter import ProgramInterpreter
from poet_compiler.schedule.program import Instruction, Op, Program
from poet_compiler.torch_exec.pager import PageFile
from poet_compiler.torch_exec.plan import StepPlan, build_plan, constants, tensors_of, trimmed

if TYPE_CHECKING:
    from poet_compiler.frontends.torch.traced import TracedModel


@dataclass
class StepStats:
    """Measurements of one scheduled step. ``timeline[j]``: live activation bytes after
    instruction ``j`` (at a COMPUTE: the most seen while it ran, transients included)."""

    peak_bytes: int = 0
    peak_at: int = -1
    page_out_bytes: int = 0
    page_in_bytes: int = 0
    n_page_out: int = 0
    n_page_in: int = 0
    n_compute: int = 0
    n_fsync: int = 0
    wall_s: float = 0.0
    timeline: list[int] = field(default_factory=list)

    def report(self) -> dict[str, float | int]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "timeline"}


class _Live:
    """Live activation bytes of the environment, by storage, with reference counts."""

    def __init__(self, excluded: set[int]) -> None:
        self.excluded = excluded
        self.refs: dict[int, int] = {}
        self.size: dict[int, int] = {}
        self.bytes = 0

    def add(self, value: Any) -> None:
        for t in tensors_of(value):
            s = t.untyped_storage()
            n = s.nbytes()
            key = s.data_ptr()
            if n == 0 or key in self.excluded:
                continue
            if key in self.refs:
                self.refs[key] += 1
            else:
                self.refs[key] = 1
                self.size[key] = n
                self.bytes += n

    def remove(self, value: Any) -> None:
        for t in tensors_of(value):
            s = t.untyped_storage()
            key = s.data_ptr()
            if s.nbytes() == 0 or key not in self.refs:
                continue
            self.refs[key] -= 1
            if self.refs[key] == 0:
                del self.refs[key]
                self.bytes -= self.size.pop(key)


def _as_tuple(inputs: Any) -> tuple[torch.Tensor, ...] | None:
    if inputs is None:
        return None
    return (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)


class ScheduledStep:
    """One training step of ``traced`` executed by ``program``.

    ``page_file``: the path of the page file (created/truncated); default: a temporary
    file in ``page_dir`` (or the system's temp directory), deleted by :meth:`close`.
    """

    def __init__(self, traced: TracedModel, program: Program, *, page_file: str | Path | None = None,
                 page_dir: str | Path | None = None, fsync: bool = False) -> None:
        traced.require_weights("running a schedule")
        n = traced.graph.n
        if program.n_nodes != n:
            raise ScheduleError(f"the program is for {program.n_nodes} nodes but the traced graph "
                                f"{traced.graph.name!r} has {n}")
        for k, ins in enumerate(program.instructions):
            if ins.op is not Op.FENCE and not 0 <= ins.node < n:
                raise ScheduleError(f"instruction {k} ({ins.op.name} {ins.node}): node {ins.node} does not exist "
                                    f"(graph has {n} nodes)")
        self.traced = traced
        self.program = program
        self.plan: StepPlan = build_plan(traced)
        self._page_file_path = page_file
        self._page_dir = page_dir
        self._fsync = fsync
        self._pages: PageFile | None = None
        self.last: StepStats | None = None

    # -- public API --------------------------------------------------------------------
    @property
    def pages(self) -> PageFile:
        """The page file (opened on first use; reused and overwritten by every step)."""
        if self._pages is None:
            self._pages = PageFile(self._page_file_path, directory=self._page_dir, fsync=self._fsync)
        return self._pages

    def run(self, inputs: Any = None, target: torch.Tensor | None = None
            ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Run the schedule; return ``(loss, {param name: grad})``. The module is not touched."""
        outs = self._execute(_as_tuple(inputs), target)
        g = len(self.traced.grad_names)
        return outs[0], dict(zip(self.traced.grad_names, outs[1:1 + g]))

    def run_full(self, inputs: Any = None, target: torch.Tensor | None = None
                 ) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Like :meth:`run`, plus the new buffer values ``{buffer name: value}``."""
        outs = self._execute(_as_tuple(inputs), target)
        g = len(self.traced.grad_names)
        return (outs[0], dict(zip(self.traced.grad_names, outs[1:1 + g])),
                dict(zip(self.traced.update_names, outs[1 + g:])))

    def step(self, inputs: Any = None, target: torch.Tensor | None = None) -> torch.Tensor:
        """A drop-in for ``loss.backward()``: accumulate ``.grad`` on the parameters,
        apply the buffer updates, return the (detached) loss. With an optimizer in the
        graph it is ``loss.backward(); opt.step()``: the parameters and the optimizer
        state (``traced.opt_state``) take their new values, no ``.grad`` is set."""
        tm = self.traced
        outs = self._execute(_as_tuple(inputs), target)
        g = len(tm.grad_names)
        params = dict(tm.module.named_parameters())
        with torch.no_grad():
            for name, grad in zip(tm.grad_names, outs[1:1 + g]):
                p = params[name]
                if p.grad is None:
                    p.grad = grad.detach()
                else:
                    p.grad += grad  # what autograd's AccumulateGrad does outside grad mode
        tm.apply_updates(dict(zip(tm.update_names, outs[1 + g:])))
        return outs[0].detach()

    __call__ = step

    def source(self) -> str:
        """The schedule as straight-line Python (see :func:`poet_compiler.torch_exec.pygen.to_python`)."""
        from poet_compiler.torch_exec.pygen import to_python

        return to_python(self.traced, self.program)

    def close(self) -> None:
        if self._pages is not None:
            self._pages.close()
            self._pages = None

    def __enter__(self) -> ScheduledStep:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the interpreter ---------------------------------------------------------------
    def _execute(self, inputs: tuple[torch.Tensor, ...] | None, target: torch.Tensor | None) -> list[Any]:
        tm, plan = self.traced, self.plan
        pages = self.pages
        pages.reset_counters()
        t0 = time.perf_counter()
        args = tm.flat_args(inputs, target)
        if len(args) != len(plan.placeholders):
            raise ScheduleError(f"the step takes {len(plan.placeholders) - len(tm.param_names) - len(tm.buffer_names)} "
                                f"inputs and a target, got {len(args) - len(tm.param_names) - len(tm.buffer_names)}")
        with torch.no_grad():
            walk = _StepWalk(self.program, tm, plan, pages, args)
            outputs = walk.run()
        stats = walk.stats
        stats.wall_s = time.perf_counter() - t0
        stats.page_out_bytes, stats.page_in_bytes = pages.bytes_written, pages.bytes_read
        stats.n_page_out, stats.n_page_in, stats.n_fsync = pages.n_writes, pages.n_reads, pages.n_fsync
        self.last = stats
        return outputs


class _StepWalk(ProgramInterpreter):
    """One run of the Program on the real tensors: :meth:`start` binds the placeholders
    and runs the prelude, each opcode's method does what the module docstring says, and
    :meth:`finish` returns the graph's outputs. Run it under ``torch.no_grad()``."""

    def __init__(self, program: Program, traced: TracedModel, plan: StepPlan, pages: PageFile,
                 args: tuple[Any, ...] | list[Any]) -> None:
        super().__init__(program)
        self.traced, self.plan, self.pages, self.args = traced, plan, pages, args
        self.graph = traced.graph
        self.stats = StepStats()
        self.env: dict[str, Any] = {}
        self.outputs: list[Any] = [None] * len(plan.output_names)
        self.out_pos: dict[str, list[int]] = {}
        for k, name in enumerate(plan.output_names):
            self.out_pos.setdefault(name, []).append(k)
        self.resident: set[int] = set()
        self.computed: set[int] = set()
        self.live = _Live(set())
        self.point: int | None = None   # the most live bytes seen during the current COMPUTE

    def run_fx(self, name: str) -> Any:
        node = self.plan.fx_nodes[name]
        env = self.env

        def load(a: torch.fx.Node) -> Any:
            return env[a.name]

        a = torch.fx.node.map_arg(node.args, load)
        kw = torch.fx.node.map_arg(node.kwargs, load)
        return node.target(*a, **kw)  # type: ignore[operator]

    def replay_fx(self, name: str, stash: str) -> Any:
        """Run random FX op ``name`` again, drawing from its stash's state."""
        with replayed(self.env[stash], device_of(self.plan.fx_nodes[name])):
            return self.run_fx(name)

    def start(self) -> None:
        plan, env = self.plan, self.env
        env.update(zip(plan.placeholders, self.args))
        env.update(constants(self.traced))
        for name in plan.prelude:
            env[name] = self.run_fx(name)
        for name, k in plan.prelude_outputs:
            self.outputs[k] = env[name]
        # Placeholders, constants and the prelude are not activations: never counted.
        self.live = _Live({t.untyped_storage().data_ptr() for v in env.values() for t in tensors_of(v)})

    def fail(self, what: str) -> NoReturn:
        ins = self.instructions[self.index]
        raise ScheduleError(f"instruction {self.index} ({ins.op.name} {ins.node}): {what}")

    # -- every instruction: the timeline and the peak ----------------------------------
    def before(self, ins: Instruction) -> None:
        self.point = None

    def after(self, ins: Instruction) -> None:
        stats, live = self.stats, self.live.bytes
        current = live if self.point is None else max(self.point, live)
        stats.timeline.append(current)
        if current > stats.peak_bytes:
            stats.peak_bytes, stats.peak_at = current, self.index

    # -- the opcodes -------------------------------------------------------------------
    # A handler's locals die when it returns, so no stray reference keeps a storage that
    # an instruction dropped alive (and its bytes in the measured peak).
    def compute(self, ins: Instruction) -> None:
        i, env, live = ins.node, self.env, self.live
        for j in self.graph.nodes[i].inputs:
            if j not in self.resident:
                self.fail(f"input node {j} is not in RAM")
        if i in self.resident:
            self.fail(f"node {i} is already in RAM")
        npl = self.plan.nodes[i]
        point = live.bytes
        in_place = self.graph.nodes[i].kind == "update"  # writes parameters: no activation bytes
        replays = dict(npl.replays) if i in self.computed else {}
        for name, drops in zip(npl.fx, npl.drop_after):
            stash = replays.get(name)
            value = self.run_fx(name) if stash is None else self.replay_fx(name, stash)
            env[name] = value
            if not in_place:
                live.add(value)
            point = max(point, live.bytes)
            for k in self.out_pos.get(name, ()):
                self.outputs[k] = value
            for dead in drops:
                gone = env.pop(dead)
                if not in_place:
                    live.remove(gone)
        for name, keep in npl.trim:
            value = env[name]
            live.remove(value)
            env[name] = trimmed(value, keep)
            live.add(env[name])
        self.point = point
        self.resident.add(i)
        self.computed.add(i)
        self.stats.n_compute += 1

    def free(self, ins: Instruction) -> None:
        i = ins.node
        if i not in self.resident:
            self.fail(f"node {i} is not in RAM")
        for name in self.plan.nodes[i].kept:
            self.live.remove(self.env.pop(name))
        self.resident.discard(i)

    def move(self, ins: Instruction) -> None:
        # Arena compaction: torch owns its tensors' storage, so there is nothing to copy;
        # the instruction's rule still holds.
        if ins.node not in self.resident:
            self.fail(f"node {ins.node} is not in RAM")

    def page_out(self, ins: Instruction) -> None:
        i = ins.node
        if i not in self.resident:
            self.fail(f"node {i} is not in RAM")
        self.pages.page_out(i, {name: self.env[name] for name in self.plan.nodes[i].kept})

    def page_in(self, ins: Instruction) -> None:
        i = ins.node
        if i in self.resident:
            self.fail(f"node {i} is already in RAM")
        if not self.pages.has(i):
            self.fail(f"node {i} has no copy in the page file")
        for name, value in self.pages.page_in(i).items():
            self.env[name] = value
            self.live.add(value)
        self.resident.add(i)

    def fence(self, ins: Instruction) -> None:
        self.pages.fence()

    def finish(self) -> list[Any]:
        missing = [k for k, v in enumerate(self.outputs) if v is None]
        if missing:
            raise ScheduleError(
                f"end of program: graph output {self.plan.output_names[missing[0]]!r} was never computed"
            )
        self.env.clear()
        return self.outputs


__all__ = ["ScheduledStep", "StepStats"]
