"""Read and write the poet-graph/1 interchange format
(docs/graph-format.md, the project's copy of shared/graph-format.md).

The pydantic models below *are* the format: unknown keys are refused (``extra="forbid"``)
except inside ``"extra"`` objects. Reading returns a validated :class:`TrainingGraph`;
writing is atomic and deterministic (same graph, same bytes).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from poet_compiler.errors import GraphError
from poet_compiler.fileio import atomic_write_text
from poet_compiler.graph.ir import Kind, Node, NodeCost, OpClass, TrainingGraph
from poet_compiler.graph.validate import validate

FORMAT = "poet-graph/1"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class CostModel(_Strict):
    compute_s: float | None = Field(default=None, ge=0)
    compute_j: float | None = Field(default=None, ge=0)
    page_in_s: float | None = Field(default=None, ge=0)
    page_in_j: float | None = Field(default=None, ge=0)
    page_out_s: float | None = Field(default=None, ge=0)
    page_out_j: float | None = Field(default=None, ge=0)


class NodeModel(_Strict):
    id: int
    name: str = Field(min_length=1)
    kind: Kind
    op: str
    op_class: OpClass
    inputs: list[int]
    output_bytes: int = Field(ge=0)
    workspace_bytes: int = Field(default=0, ge=0)
    flops: int = Field(default=0, ge=0)
    bytes_accessed: int = Field(default=0, ge=0)
    pinned: bool = False
    after: list[int] = Field(default_factory=list)
    cost: CostModel | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


class GraphModel(_Strict):
    format: str
    name: str
    nodes: list[NodeModel]
    param_bytes: int = Field(default=0, ge=0)
    grad_bytes: int = Field(default=0, ge=0)
    optimizer_state_bytes: int = Field(default=0, ge=0)
    input_bytes: int = Field(default=0, ge=0)
    step_output_bytes: int = Field(default=0, ge=0)
    extra: dict[str, Any] = Field(default_factory=dict)


def _float_ok(data: Any) -> Any:
    """JSON has one number type: accept integers where the format says float."""
    if isinstance(data, dict):
        return {
            k: (
                float(v)
                if k in CostModel.model_fields and isinstance(v, int) and not isinstance(v, bool)
                else _float_ok(v)
            )
            for k, v in data.items()
        }
    if isinstance(data, list):
        return [_float_ok(v) for v in data]
    return data


def graph_from_dict(data: Any, source: str = "graph") -> TrainingGraph:
    """Build and validate a graph from parsed JSON; errors name the field path."""
    if not isinstance(data, dict):
        raise GraphError(f"{source}: expected a JSON object with \"format\": \"{FORMAT}\"")
    if data.get("format") != FORMAT:
        raise GraphError(f"{source}: format must be {FORMAT!r}, got {data.get('format')!r}")
    try:
        model = GraphModel.model_validate(_float_ok(data))
    except ValidationError as exc:
        raise GraphError(f"{source}: {_describe(exc, data)}") from None
    nodes = tuple(
        Node(
            id=n.id,
            name=n.name,
            kind=n.kind,
            op=n.op,
            op_class=n.op_class,
            inputs=tuple(n.inputs),
            output_bytes=n.output_bytes,
            workspace_bytes=n.workspace_bytes,
            flops=n.flops,
            bytes_accessed=n.bytes_accessed,
            pinned=n.pinned,
            after=tuple(n.after),
            cost=NodeCost(**n.cost.model_dump()) if n.cost is not None else None,
            extra=dict(n.extra),
        )
        for n in model.nodes
    )
    graph = TrainingGraph(
        name=model.name,
        nodes=nodes,
        param_bytes=model.param_bytes,
        grad_bytes=model.grad_bytes,
        optimizer_state_bytes=model.optimizer_state_bytes,
        input_bytes=model.input_bytes,
        step_output_bytes=model.step_output_bytes,
        extra=dict(model.extra),
    )
    try:
        return validate(graph)
    except GraphError as exc:
        raise GraphError(f"{source}: {exc}") from None


def _describe(exc: ValidationError, data: dict[str, Any]) -> str:
    """First pydantic error as 'nodes[3] ('conv1').output_bytes: <what is wrong>'."""
    err = exc.errors()[0]
    loc = list(err["loc"])
    parts: list[str] = []
    for i, key in enumerate(loc):
        if isinstance(key, int):
            parts[-1] += f"[{key}]"
            if i == 1 and loc[0] == "nodes":
                try:
                    parts[-1] += f" ({data['nodes'][key].get('name')!r})"
                except (AttributeError, IndexError, KeyError, TypeError):
                    pass
        else:
            parts.append(str(key))
    path = ".".join(parts) or "(top level)"
    msg = "unknown key (typo? put free-form data under \"extra\")" if err["type"] == "extra_forbidden" else err["msg"]
    return f"{path}: {msg}"


def graph_to_dict(graph: TrainingGraph) -> dict[str, Any]:
    """The poet-graph/1 object for a graph; optional fields at defaults are omitted."""
    nodes = []
    for n in graph.nodes:
        d: dict[str, Any] = {
            "id": n.id,
            "name": n.name,
            "kind": n.kind,
            "op": n.op,
            "op_class": n.op_class,
            "inputs": list(n.inputs),
            "output_bytes": n.output_bytes,
            "workspace_bytes": n.workspace_bytes,
            "flops": n.flops,
            "bytes_accessed": n.bytes_accessed,
        }
        if n.pinned:
            d["pinned"] = True
        if n.after:
            d["after"] = list(n.after)
        if n.cost is not None:
            d["cost"] = n.cost.as_dict()
        if n.extra:
            d["extra"] = n.extra
        nodes.append(d)
    out: dict[str, Any] = {
        "format": FORMAT,
        "name": graph.name,
        "nodes": nodes,
        "param_bytes": graph.param_bytes,
        "grad_bytes": graph.grad_bytes,
        "optimizer_state_bytes": graph.optimizer_state_bytes,
        "input_bytes": graph.input_bytes,
    }
    if graph.step_output_bytes:
        out["step_output_bytes"] = graph.step_output_bytes
    if graph.extra:
        out["extra"] = graph.extra
    return out


def dumps(graph: TrainingGraph) -> str:
    return json.dumps(graph_to_dict(graph), indent=1, sort_keys=False) + "\n"


def loads(text: str, source: str = "graph") -> TrainingGraph:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GraphError(f"{source}: not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    return graph_from_dict(data, source)


def read_graph(path: str | Path) -> TrainingGraph:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise GraphError(f"{p}: cannot read ({exc.__class__.__name__}: {exc})") from None
    return loads(text, str(p))


def write_graph(graph: TrainingGraph, path: str | Path) -> None:
    atomic_write_text(path, dumps(graph))
