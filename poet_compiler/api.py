"""The Python API: ``poet_compiler.compile(...)`` is ``poetc compile`` from a notebook.

One call walks the whole pipeline — frontend -> graph -> costs -> solve -> schedule —
and returns a :class:`Compilation` holding every intermediate value, so a user can
inspect the graph, the costs, the Program and the simulator's figures, then write the
bytecode and the report with :meth:`Compilation.save`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from poet_compiler.devices.costs import CostTable
from poet_compiler.errors import PoetError
from poet_compiler.fileio import atomic_write_bytes, atomic_write_text
from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.solve.budgets import (
    Reference,
    reference,
    resolve_deadline,
    resolve_ram,
)
from poet_compiler.solve.problem import MODES, Problem
from poet_compiler.solve.result import Result
from poet_compiler.solve.strategies import SolveOptions, get_strategy, run_strategy


@dataclass
class Compilation:
    """Everything one compile produced; ``result`` holds the simulator's figures."""

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

    @property
    def program(self):
        return self.result.program

    def report(self) -> dict[str, Any]:
        """The sidecar JSON object: the Result's report plus model/device/reference figures."""
        out = self.result.report()
        out.update(
            model=self.model,
            device=self.device,
            checkpoint_all_peak_bytes=self.reference.peak_bytes,
            checkpoint_all_runtime_s=self.reference.runtime_s,
            checkpoint_all_energy_j=self.reference.energy_j,
            count_fixed=self.problem.count_fixed,
            granularity=self.granularity,
            batch=self.batch,
            onnx_loss=self.onnx_loss,
            input_shapes=self.input_shapes,
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


def load_costs(graph: TrainingGraph, device: str | None) -> CostTable:
    """Costs of ``graph`` on ``device`` (a profile name or path; None: explicit costs only)."""
    from poet_compiler.devices.cost_model import costs_for
    from poet_compiler.devices.profile import load_profile

    return costs_for(graph, load_profile(device) if device else None)


def resolve_graph(
    model: str | TrainingGraph,
    granularity: str = "op",
    batch: int | None = None,
    *,
    onnx_loss: str | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> TrainingGraph:
    if isinstance(model, TrainingGraph):
        return model
    from poet_compiler.frontends import load_graph

    return load_graph(str(model), granularity=granularity, batch=batch, input_shapes=input_shapes, onnx_loss=onnx_loss)


def compile(  # noqa: A001 - the product's verb
    model: str | TrainingGraph,
    device: str | None = "m4",
    ram: str | int | None = None,
    deadline: str | float | None = None,
    *,
    mode: str = "poet",
    strategy: str = "optimal",
    solver: str = "auto",
    formulation: str = "fast",
    time_limit_s: float = 60.0,
    threads: int = 2,
    gap: float | None = None,
    count_fixed: bool = False,
    granularity: str = "op",
    batch: int | None = None,
    progress: bool = False,
    onnx_loss: str | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> Compilation:
    """Compile ``model`` (zoo name, .json, .onnx or a TrainingGraph) for ``device``.

    ``ram``: bytes, ``"256k"`` or ``"50%"`` of the checkpoint-all peak (default: the
    device's RAM). ``deadline``: seconds, ``"120ms"`` or ``"1.5x"`` the compute-only
    step time (default: none). ``onnx_loss`` (cross_entropy | mse | sum) and
    ``input_shapes`` (input name -> shape) configure the ONNX frontend. ``gap``: stop
    once the schedule is proven within this relative gap of optimal (default: 0.001 on
    graphs above 40 nodes, 0 on smaller ones). Returns a :class:`Compilation`; an
    infeasible budget is a Result with status ``infeasible`` and a message giving the
    smallest budget that works.
    """
    # Refuse bad names before the (possibly slow) trace.
    if mode not in MODES:
        raise PoetError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    get_strategy(strategy)
    from poet_compiler.solve.backends import SOLVERS

    if solver not in SOLVERS:
        raise PoetError(f"unknown solver {solver!r}; known: {', '.join(SOLVERS)}")
    if gap is not None and not 0.0 <= gap < 1.0:
        raise PoetError(f"gap {gap!r} is not a relative gap in [0, 1) (e.g. 0.001 for 0.1%)")
    graph = resolve_graph(model, granularity, batch, onnx_loss=onnx_loss, input_shapes=input_shapes)
    costs = load_costs(graph, device)
    ref = reference(graph, costs)
    problem = Problem(
        graph=graph,
        costs=costs,
        ram_budget_bytes=resolve_ram(ram, ref, costs),
        deadline_s=resolve_deadline(deadline, ref, costs),
        mode=mode,  # type: ignore[arg-type]
        count_fixed=count_fixed,
    )
    opts = SolveOptions(solver=solver, formulation=formulation, time_limit_s=time_limit_s,
                        threads=threads, progress=progress, gap_limit=gap)
    result = run_strategy(strategy, problem, opts)
    name = model.name if isinstance(model, TrainingGraph) else str(model)
    return Compilation(model=name, device=costs.device, graph=graph, costs=costs,
                       problem=problem, reference=ref, result=result,
                       granularity=granularity, batch=batch, onnx_loss=onnx_loss,
                       input_shapes={k: list(v) for k, v in input_shapes.items()} if input_shapes else None)
