"""Frontends: turn a model source into a TrainingGraph (and, for torch models, a TracedModel).

``source`` is a zoo model name (``models.names()``), a ``.json`` poet-graph/1 file, or an
``.onnx`` file (handled by :mod:`poet_compiler.frontends.onnx`, imported lazily).
torch is imported only when a zoo model is traced.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from poet_compiler.errors import FrontendError
from poet_compiler.graph.coarsen import GRANULARITIES
from poet_compiler.graph.ir import TrainingGraph

if TYPE_CHECKING:
    from poet_compiler.frontends.torch import TracedModel
    from poet_compiler.frontends.torch.optimizer import OptimizerSpec


def zoo_names() -> list[str]:
    import models

    return models.names()


def trace_zoo(name: str, *, granularity: str = "op", batch: int | None = None,
              optimizer: OptimizerSpec | None = None, train: str | None = None) -> TracedModel:
    """Build zoo model ``name`` and trace it at ``batch`` (default: the model's), with
    ``optimizer``'s update and ``train``'s subset (docs/training.md)."""
    import models
    from poet_compiler.frontends.torch import trace_module

    spec = models.get(name)
    if batch is not None and batch < 1:
        raise FrontendError(f"batch must be >= 1, got {batch}")
    _check_granularity(granularity)
    tm = trace_module(spec.build(), spec.example_inputs(batch), spec.target(batch), spec.loss_fn, name=name,
                      optimizer=optimizer, train=train)
    if granularity == "op":
        return tm
    from poet_compiler.graph.coarsen import coarsen_traced

    return coarsen_traced(tm, granularity)


def load_model(
    source: str,
    *,
    granularity: str = "op",
    batch: int | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    onnx_loss: str | None = None,
    optimizer: OptimizerSpec | None = None,
    train: str | None = None,
) -> TracedModel | None:
    """A TracedModel for a zoo name or an .onnx file; None for graph-only .json files.

    ``input_shapes`` (``--input-shape``) and ``onnx_loss`` (``--loss``) apply to ONNX
    files only (see :func:`poet_compiler.frontends.onnx.load_onnx_module`).
    """
    _check_granularity(granularity)
    _check_onnx_options(source, input_shapes, onnx_loss)
    if source in zoo_names():
        return trace_zoo(source, granularity=granularity, batch=batch, optimizer=optimizer, train=train)
    if _classify_file(source) == "onnx":
        from poet_compiler.frontends.onnx import trace_onnx

        return trace_onnx(source, granularity=granularity, batch=batch, input_shapes=input_shapes, loss=onnx_loss,
                          optimizer=optimizer, train=train)
    _check_training_options(source, optimizer, train)
    return None


def load_graph(
    source: str,
    granularity: str = "op",
    batch: int | None = None,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    onnx_loss: str | None = None,
    optimizer: OptimizerSpec | None = None,
    train: str | None = None,
) -> TrainingGraph:
    """The TrainingGraph of a zoo model, a poet-graph/1 JSON file or an ONNX file
    (``input_shapes``, ``onnx_loss``: ONNX only; ``optimizer``, ``train``: traced models
    only; as in :func:`load_model`)."""
    _check_granularity(granularity)
    _check_onnx_options(source, input_shapes, onnx_loss)
    if source in zoo_names():
        return trace_zoo(source, granularity=granularity, batch=batch, optimizer=optimizer, train=train).graph
    kind = _classify_file(source)
    if kind == "json":
        _check_training_options(source, optimizer, train)
        from poet_compiler.graph.coarsen import coarsen_to
        from poet_compiler.graph.io import read_graph

        return coarsen_to(read_graph(source), granularity)[0]
    try:
        from poet_compiler.frontends import onnx as onnx_frontend
    except ImportError:
        raise FrontendError(
            f"{source}: ONNX import is not available in this build (poet_compiler.frontends.onnx missing)"
        ) from None
    # The ONNX frontend coarsens per module itself; layer grouping runs on its op graph.
    layered = granularity in ("layer", "auto")
    result: Any = onnx_frontend.trace_onnx(
        source, input_shapes=input_shapes, loss=onnx_loss, granularity="op" if layered else granularity, batch=batch,
        optimizer=optimizer, train=train,
    )
    graph = result if isinstance(result, TrainingGraph) else result.graph
    if layered:
        from poet_compiler.graph.coarsen import coarsen_to

        graph = coarsen_to(graph, granularity)[0]
    return graph


def _check_granularity(granularity: str) -> None:
    if granularity not in GRANULARITIES:
        raise FrontendError(f"granularity must be one of {', '.join(GRANULARITIES)}, got {granularity!r}")


def _check_onnx_options(source: str, input_shapes: Mapping[str, Sequence[int]] | None, onnx_loss: str | None) -> None:
    """--input-shape and --loss configure the ONNX frontend; elsewhere they would be
    silently ignored (zoo models bring their own loss and batch), so refuse them."""
    given = [opt for opt, v in (("--input-shape", input_shapes), ("--loss", onnx_loss)) if v]
    if given and Path(source).suffix.lower() != ".onnx":
        raise FrontendError(
            f"{' and '.join(given)} {'apply' if len(given) > 1 else 'applies'} to .onnx models only, not {source!r}"
        )


def _check_training_options(source: str, optimizer: OptimizerSpec | None, train: str | None) -> None:
    """--optimizer and --train act on a traced model; a graph file has its nodes already."""
    given = [opt for opt, v in (("--optimizer", optimizer), ("--train", train)) if v is not None]
    if given:
        raise FrontendError(f"{' and '.join(given)} {'apply' if len(given) > 1 else 'applies'} to traced models "
                            f"(zoo, .onnx, nn.Module), not the graph file {source!r}: its update nodes are in it")


def check_model_file(source: str) -> None:
    """A ``.json``/``.onnx`` model that is not a file is refused (zoo names pass)."""
    if Path(source).suffix.lower() in (".json", ".onnx") and not Path(source).is_file():
        raise FrontendError(f"{source}: no such file")


def _classify_file(source: str) -> str:
    suffix = Path(source).suffix.lower()
    if suffix in (".json", ".onnx"):
        check_model_file(source)
        return suffix[1:]
    raise FrontendError(f"unknown model {source!r}: not a .json/.onnx file nor a zoo model ({', '.join(zoo_names())})")




def training_options(optimizer: str | None, train: str | None,
                     side: Mapping[str, Any] | None = None) -> tuple[OptimizerSpec | None, str | None]:
    """``--optimizer``/``--train`` as given, else as recorded in a schedule's sidecar report,
    so that a model is traced again into the graph its schedule was compiled for."""
    side = side or {}
    spec = optimizer if optimizer is not None else side.get("optimizer")
    patterns = train if train is not None else side.get("train")
    if spec is None:
        return None, patterns
    from poet_compiler.frontends.torch.optimizer import parse_optimizer

    return parse_optimizer(spec), patterns


__all__ = ["GRANULARITIES", "check_model_file", "load_graph", "load_model", "trace_zoo", "training_options",
           "zoo_names"]
