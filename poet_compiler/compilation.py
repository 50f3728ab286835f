"""What one compile produced (:class:`Compilation`): the results, and the runners and
files made from them.

It keeps the graph, the costs, the problem, the checkpoint-all reference and the
Result; it hands out the PyTorch runners (:meth:`Compilation.training_step`,
:meth:`Compilation.checkpointed`, torch_exec/) and writes the bytecode and the report
(:meth:`Compilation.save`). ``poet_compiler.compile(...)`` (api.py) returns one.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from poet_compiler.devices.costs import CostTable
from poet_compiler.errors import PoetError
from poet_compiler.fileio import atomic_write_bytes, atomic_write_text
from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.solve.budgets import Reference
from poet_compiler.solve.problem import Problem
from poet_compiler.solve.ram import FixedRam
from poet_compiler.solve.result import Result
from poet_compiler.versions import versions

if TYPE_CHECKING:
    from poet_compiler.frontends.torch.traced import TracedModel
    from poet_compiler.schedule.program import Program
    from poet_compiler.torch_exec.analysis import Analysis
    from poet_compiler.torch_exec.checkpointed import CheckpointedModule
    from poet_compiler.torch_exec.torch_plan import TorchPlan
    from poet_compiler.training import TrainingStep


@dataclass
class Compilation:
    """Everything one compile produced; ``result`` holds the simulator's figures.

    ``traced`` is the module behind the graph (an ``nn.Module``'s trace, or a zoo
    model's). A zoo model is traced again on first use rather than kept through the
    solve: its weights (440 MB for BERT-base) would otherwise sit in poetc's memory
    while the solver needs it, and the zoo builds the same seeded module every time.
    """

    model: str
    device: str
    graph: TrainingGraph
    costs: CostTable
    problem: Problem
    reference: Reference
    result: Result
    granularity: str = "op"
    batch: int | None = None
    onnx_loss: str | None = None
    input_shapes: dict[str, list[int]] | None = None
    optimizer: str | None = None
    train: str | None = None
    #: What the step keeps in RAM beside its arena on the device (parameters, gradients,
    #: optimizer state, batch, outputs, runtime reserve), counted or not (``activations_only``).
    ram: FixedRam = field(default_factory=FixedRam)
    activations_only: bool = False
    _traced: TracedModel | None = field(default=None, repr=False)
    _retrace: Callable[[], TracedModel] | None = field(default=None, repr=False)

    @functools.cached_property
    def traced(self) -> TracedModel | None:
        """The module behind the graph: the one traced, or a zoo model traced again on first use."""
        if self._traced is None and self._retrace is not None:
            return self._retrace()
        return self._traced

    @property
    def program(self):
        return self.result.program

    @property
    def ram_split(self) -> dict[str, int | None]:
        """RAM on the device, in bytes: the arena, parameters, gradients, optimizer state,
        batch, outputs, the runtime's reserve and their total (``poetc inspect`` prints it)."""
        return self.ram.split(self.result.arena_bytes)

    def training_step(self, *, page_file: str | Path | None = None,
                      page_dir: str | Path | None = None) -> TrainingStep:
        """A callable ``step(x, y) -> loss`` that runs forward + backward by the schedule.

        It trains the compiled module itself (an ``nn.Module`` or zoo model): each call
        accumulates ``.grad`` on its parameters like ``loss.backward()`` and updates its
        buffers, so ``opt.zero_grad(); step(x, y); opt.step()`` is an ordinary loop.
        Compiled with an ``optimizer``, the step applies the update itself (no ``.grad``,
        no ``opt.step()``: the loop is ``step(x, y)``; the state is ``step.optimizer_state``). The
        batch must have the example's shapes and dtypes (else :class:`BatchError`).
        Paged tensors go to ``page_file`` (default: a temporary file in ``page_dir``).
        """
        from poet_compiler.training import TrainingStep

        traced, program = self._runnable("a training step needs")
        return TrainingStep(traced, program, page_file=page_file, page_dir=page_dir)

    def checkpointed(self, *, page_file: str | Path | None = None, page_dir: str | Path | None = None,
                     allow_over_budget: bool = False) -> CheckpointedModule:
        """The compiled module as an ``nn.Module`` whose forward runs under the schedule's
        decisions through PyTorch's own machinery: ``torch.utils.checkpoint`` regions with
        selective-checkpoint policies, and saved-tensor hooks that page to ``page_file``
        (default: a temporary file in ``page_dir``). Train it in an ordinary loop::

            m = c.checkpointed()
            loss_fn(m(x), y).backward()
            opt.step()

        It shares the module's parameters and buffers; gradients and BatchNorm statistics
        are autograd's (bitwise in eager mode); ``torch.compile(m)`` works. ``m.plan`` is
        the plan PyTorch runs, derived from the schedule and fitted to the budget, with the
        simulator's figures of it (docs/pytorch.md): where PyTorch cannot run the schedule
        as it is, the plan that runs is what is reported. Where no plan PyTorch can run fits
        the budget, it raises :class:`InfeasibleError` naming the smallest RAM budget the
        plan search fits and where the plan peaks; ``allow_over_budget=True`` runs that
        plan anyway (for its bits, or under ``torch.compile``, which places recomputations
        itself), ``m.plan.peak_bytes`` above the budget.
        """
        from poet_compiler.torch_exec.checkpointed import CheckpointedModule
        from poet_compiler.torch_exec.plan_budget import check_plan_within_budget

        traced, _ = self._runnable("checkpointed() needs")
        plan, analysis = self.torch_plan()
        if not allow_over_budget:
            check_plan_within_budget(self.model, analysis, plan, self.problem, self.result.peak_ram_bytes)
        return CheckpointedModule(traced, plan, analysis, page_file=page_file, page_dir=page_dir)

    def _runnable(self, needs: str) -> tuple[TracedModel, Program]:
        """The module and the schedule a runner runs; a PoetError saying which is missing
        (``needs``: who needs them, e.g. "checkpointed() needs")."""
        traced = self.traced
        if traced is None:
            raise PoetError(f"{self.model}: {needs} the model's weights; compile an nn.Module "
                            "or a zoo model (a graph file or ONNX graph has no module to train)")
        if self.result.program is None:
            raise PoetError(f"no schedule to run: {self.result.status}: {self.result.message}")
        return traced, self.result.program

    def torch_plan(self) -> tuple[TorchPlan, Analysis]:
        """The plan ``checkpointed()`` runs (torch_exec/plan_search.py: derived from the
        schedule, searched to fit the activation budget) and the analysis behind it."""
        return self._torch_plan

    @functools.cached_property
    def _torch_plan(self) -> tuple[TorchPlan, Analysis]:
        from poet_compiler.torch_exec.analysis import Analysis
        from poet_compiler.torch_exec.plan_search import derive_plan

        traced = self.traced
        if traced is None or self.result.program is None:
            raise PoetError(f"{self.model}: no schedule and module to plan for ({self.result.status})")
        analysis = Analysis(traced)
        return derive_plan(analysis, self.result.program, self.costs, self.problem.activation_budget), analysis

    def report(self) -> dict[str, Any]:
        """The sidecar JSON object: the Result's report plus model/device/reference figures."""
        out = self.result.report()
        out.update(
            model=self.model,
            device=self.device,
            checkpoint_all_peak_bytes=self.reference.peak_bytes,
            checkpoint_all_runtime_s=self.reference.runtime_s,
            checkpoint_all_energy_j=self.reference.energy_j,
            activations_only=self.activations_only,
            ram_split=self.ram_split,
            device_ram_bytes=self.costs.ram_bytes,
            granularity=self.granularity,
            batch=self.batch,
            onnx_loss=self.onnx_loss,
            input_shapes=self.input_shapes,
            optimizer=self.optimizer,
            train=self.train,
            versions=versions(),
        )
        return out

    def bytecode(self, strip: bool = False) -> bytes:
        from poet_compiler.codegen.bytecode import encode

        if self.result.program is None:
            raise PoetError(f"no schedule to encode: {self.result.status}: {self.result.message}")
        return encode(self.result.program, self.graph, strip=strip)

    def save(self, path: str | Path, strip: bool = False) -> tuple[Path, Path]:
        """Write ``path`` (.poet bytecode) and the report beside it (.json); atomic."""
        out = Path(path)
        data = self.bytecode(strip=strip)
        sidecar = out.with_suffix(".json")
        atomic_write_text(sidecar, json.dumps(self.report(), indent=1, sort_keys=True) + "\n")
        atomic_write_bytes(out, data)
        return out, sidecar


__all__ = ["Compilation"]
