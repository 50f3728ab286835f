"""Frontends: turn a model source into a TrainingGraph (and, for torch models, a TracedModel).

``source`` is a zoo model name (``models.names()``), a ``.json`` poet-graph/1 file, or an
``.onnx`` file (handled by :mod:`poet_compiler.frontends.onnx`, imported lazily).
torch is imported only when a zoo model is traced.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from poet_compiler.errors import FrontendError
from poet_compiler.graph.ir import TrainingGraph

if TYPE_CHECKING:
    from poet_compiler.frontends.torch import TracedModel

GRANULARITIES = ("op", "module")


def zoo_names() -> list[str]:
    import models

    return models.names()


def trace_zoo(name: str, *, granularity: str = "op", batch: int | None = None) -> "TracedModel":
    """Build zoo model ``name`` and trace it at ``batch`` (default: the model's)."""
    import models

    from poet_compiler.frontends.torch import trace_module

    spec = models.get(name)
    if batch is not None and batch < 1:
        raise FrontendError(f"batch must be >= 1, got {batch}")
    return trace_module(spec.build(), spec.example_inputs(batch), spec.target(batch), spec.loss_fn,
                        name=name, granularity=granularity)


def load_model(source: str, *, granularity: str = "op", batch: int | None = None) -> "TracedModel | None":
    """A TracedModel for a zoo name; None for graph-only sources (.json, .onnx)."""
    _check_granularity(granularity)
    if source in zoo_names():
        return trace_zoo(source, granularity=granularity, batch=batch)
    _classify_file(source)
    return None


def load_graph(source: str, granularity: str = "op", batch: int | None = None) -> TrainingGraph:
    """The TrainingGraph of a zoo model, a poet-graph/1 JSON file or an ONNX file."""
    _check_granularity(granularity)
    if source in zoo_names():
        return trace_zoo(source, granularity=granularity, batch=batch).graph
    kind = _classify_file(source)
    if kind == "json":
        from poet_compiler.graph.io import read_graph

        graph = read_graph(source)
        if granularity == "module":
            from poet_compiler.graph.coarsen import coarsen_by_module

            graph = coarsen_by_module(graph)[0]
        return graph
    try:
        from poet_compiler.frontends import onnx as onnx_frontend
    except ImportError:
        raise FrontendError(f"{source}: ONNX import is not available in this build (poet_compiler.frontends.onnx missing)") from None
    result: Any = onnx_frontend.load_onnx_module(source, granularity=granularity, batch=batch)
    return result if isinstance(result, TrainingGraph) else result.graph


def _check_granularity(granularity: str) -> None:
    if granularity not in GRANULARITIES:
        raise FrontendError(f"granularity must be one of {', '.join(GRANULARITIES)}, got {granularity!r}")


def _classify_file(source: str) -> str:
    suffix = Path(source).suffix.lower()
    if suffix in (".json", ".onnx"):
        if not Path(source).is_file():
            raise FrontendError(f"{source}: no such file")
        return suffix[1:]
    raise FrontendError(f"unknown model {source!r}: not a .json/.onnx file nor a zoo model ({', '.join(zoo_names())})")


__all__ = ["GRANULARITIES", "load_graph", "load_model", "trace_zoo", "zoo_names"]
