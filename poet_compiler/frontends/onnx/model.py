"""``load_onnx_module``: an ONNX file -> OnnxModel (module, example batch, target, loss),
ready for the same tracing path as a zoo model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import onnx
import torch
import torch.nn.functional as F

from poet_compiler.errors import FrontendError

from . import ops  # noqa: F401  (fills the converter registry)
from .convert import OnnxModule, convert_graph
from .dtypes import FLOAT_TYPES, torch_dtype
from .fuse import fuse_graph
from .loader import check_supported, default_opset, read_model

LOSSES = ("cross_entropy", "mse", "sum")
INPUT_SEED = 0
TARGET_SEED = 1


class OnnxLoss:
    """A picklable loss over (output, target) -> scalar.

    ``cross_entropy`` takes class scores on the last dimension: [N, C] with target [N],
    or [..., C] (e.g. a language model's [N, S, V]) with target [...].
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __call__(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if self.kind == "cross_entropy":
            if output.dim() == 2:
                return F.cross_entropy(output, target)
            return F.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))
        if self.kind == "mse":
            return F.mse_loss(output, target)
        return output.sum()

    def __repr__(self) -> str:
        return f"OnnxLoss({self.kind!r})"


@dataclass
class OnnxModel:
    """A converted ONNX model, with everything the torch tracing frontend needs."""

    module: OnnxModule
    example_inputs: tuple[torch.Tensor, ...]
    target: torch.Tensor
    loss_fn: OnnxLoss
    name: str
    opset: int
    input_names: tuple[str, ...] = ()
    output_name: str = ""
    #: ONNX initializer name -> module parameter/buffer attribute name.
    attr_of: dict[str, str] = field(default_factory=dict)
    #: Initializers the fusion pass stores transposed ([in, out] in the file -> [out, in]
    #: for F.linear); :meth:`onnx_tensors` turns them back.
    transposed: frozenset[str] = frozenset()
    #: Fused pattern -> how many (``{"linear": 8, "gelu": 2}``); empty without fusion.
    fusions: dict[str, int] = field(default_factory=dict)

    def onnx_tensors(self, grads: bool = False) -> dict[str, torch.Tensor]:
        """The module's parameters (or, with ``grads``, their gradients) by ONNX
        initializer name, in the file's orientation. Parameters without a gradient are
        left out when ``grads`` is set."""
        params = dict(self.module.named_parameters())
        out: dict[str, torch.Tensor] = {}
        for onnx_name, attr in self.attr_of.items():
            p = params.get(attr)
            if p is None:
                continue
            t = p.grad if grads else p.detach()
            if t is None:
                continue
            out[onnx_name] = t.t() if onnx_name in self.transposed else t
        return out


def load_onnx_module(
    path: str | Path,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    loss: str | None = None,
    fuse: bool = True,
) -> OnnxModel:
    """Read, check and convert ``path``.

    ``input_shapes`` maps graph-input names to full shapes; it is required for inputs
    with symbolic or unknown dimensions and overrides the file's shapes otherwise (the
    frontend always converts for one fixed batch shape). ``loss`` is one of
    ``cross_entropy``, ``mse``, ``sum``; by default cross-entropy over the last dimension
    for a [N, C] or [N, S, V] float output (classifier, language model) with C, V > 1,
    else MSE. ``fuse`` (default on) rewrites exported linear layers and GELU formulas
    into F.linear / F.gelu before conversion (:mod:`.fuse`).
    """
    where = str(path)
    if loss is not None and loss not in LOSSES:
        raise FrontendError(f"unknown loss '{loss}' (choose from {', '.join(LOSSES)})")
    model = read_model(path)
    opset = default_opset(model, where)
    check_supported(model, opset, where)
    graph = model.graph
    output = _primary_output(graph, where)
    shapes = _input_shapes(graph, input_shapes or {}, where)
    examples = _example_inputs(graph, shapes, where)
    fusions: dict[str, int] = {}
    transposed: frozenset[str] = frozenset()
    if fuse:
        fused = fuse_graph(graph)
        graph, transposed = fused.graph, fused.transposed
        fusions = {"linear": fused.linear, "gelu": fused.gelu}
    converted = convert_graph(graph, opset, examples, output.name, where)
    out = converted.output
    _check_against_shape_inference(model, shapes, converted.module, out, output.name, where)
    kind = loss or _default_loss(out)
    target = _target(kind, out, where)
    module = converted.module
    return OnnxModel(
        module=module,
        example_inputs=tuple(examples.values()),
        target=target,
        loss_fn=OnnxLoss(kind),
        name=Path(path).stem,
        opset=opset,
        input_names=module.input_names,
        output_name=output.name,
        attr_of=dict(module.attr_of),
        transposed=frozenset(n for n in transposed if n in module.attr_of),
        fusions=fusions,
    )


def _primary_output(graph: onnx.GraphProto, where: str) -> onnx.ValueInfoProto:
    for o in graph.output:
        if o.type.HasField("tensor_type") and o.type.tensor_type.elem_type in FLOAT_TYPES:
            return o
    raise FrontendError(f"{where}: the model has no float output to attach a loss to")


def _input_shapes(
    graph: onnx.GraphProto, given: Mapping[str, Sequence[int]], where: str
) -> dict[str, tuple[int, ...]]:
    init = {i.name for i in graph.initializer}
    inputs = [i for i in graph.input if i.name not in init]
    names = {i.name for i in inputs}
    for name in given:
        if name not in names:
            raise FrontendError(
                f"{where}: --input-shape names '{name}', which is not an input (inputs: {', '.join(sorted(names))})"
            )
    out: dict[str, tuple[int, ...]] = {}
    for vi in inputs:
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise FrontendError(f"{where}: input '{vi.name}' is not a tensor")
        dims = list(tt.shape.dim) if tt.HasField("shape") else None
        if vi.name in given:
            shape = tuple(int(d) for d in given[vi.name])
            if any(d <= 0 for d in shape):
                raise FrontendError(f"{where}: input shape {list(shape)} for '{vi.name}' has a non-positive dimension")
            if dims is not None and len(dims) != len(shape):
                raise FrontendError(
                    f"{where}: input '{vi.name}' has rank {len(dims)}, "
                    f"but its given shape {list(shape)} has rank {len(shape)}"
                )
            if dims is not None:
                for k, (d, s) in enumerate(zip(dims, shape)):
                    if d.HasField("dim_value") and d.dim_value != s:
                        raise FrontendError(
                            f"{where}: input '{vi.name}' dim {k} is fixed to {d.dim_value} in the file, not {s}"
                        )
            out[vi.name] = shape
            continue
        if dims is None:
            raise FrontendError(
                f"{where}: input '{vi.name}' has no shape; give one with --input-shape {vi.name}=D0,D1,..."
            )
        shape_l: list[int] = []
        for k, d in enumerate(dims):
            if d.HasField("dim_value") and d.dim_value > 0:
                shape_l.append(int(d.dim_value))
            else:
                sym = f"'{d.dim_param}'" if d.HasField("dim_param") else "unknown"
                raise FrontendError(
                    f"{where}: input '{vi.name}' dim {k} is symbolic ({sym}); "
                    f"give a shape with --input-shape {vi.name}=D0,D1,..."
                )
        out[vi.name] = tuple(shape_l)
    return out


def _index_bounds(graph: onnx.GraphProto) -> dict[str, int]:
    """For integer inputs used as Gather indices (token ids), the size they index."""
    sizes = {i.name: list(i.dims) for i in graph.initializer}
    bounds: dict[str, int] = {}
    for node in graph.node:
        if node.op_type == "Gather" and len(node.input) > 1 and node.input[0] in sizes:
            axis = 0
            for a in node.attribute:
                if a.name == "axis":
                    axis = int(a.i)
            dims = sizes[node.input[0]]
            if dims:
                n = int(dims[axis])
                bounds[node.input[1]] = min(bounds.get(node.input[1], n), n)
    return bounds


def _example_inputs(graph: onnx.GraphProto, shapes: dict[str, tuple[int, ...]], where: str) -> dict[str, torch.Tensor]:
    """Deterministic example batch: N(0,1) floats, token ids in range, ones for other
    integer inputs (attention masks), seeded so every run builds the same bytes."""
    g = torch.Generator().manual_seed(INPUT_SEED)
    bounds = _index_bounds(graph)
    init = {i.name for i in graph.initializer}
    out: dict[str, torch.Tensor] = {}
    for vi in graph.input:
        if vi.name in init:
            continue
        dt = torch_dtype(vi.type.tensor_type.elem_type, f"{where}: input '{vi.name}'")
        shape = shapes[vi.name]
        if dt.is_floating_point:
            out[vi.name] = torch.randn(shape, generator=g, dtype=torch.float32).to(dt)
        elif dt == torch.bool:
            out[vi.name] = torch.ones(shape, dtype=torch.bool)
        elif vi.name in bounds:
            out[vi.name] = torch.randint(0, bounds[vi.name], shape, generator=g, dtype=torch.int64).to(dt)
        else:
            out[vi.name] = torch.ones(shape, dtype=dt)
    return out


def _default_loss(out: torch.Tensor) -> str:
    """Class scores get cross-entropy over the last dimension: [N, C] (a classifier) and
    [N, S, V] (a language model's per-token logits, as the zoo's GPT-2 is trained);
    anything else (regression heads, images, 4-D maps whose class axis is ambiguous) MSE."""
    if out.dim() in (2, 3) and out.shape[-1] > 1 and out.is_floating_point():
        return "cross_entropy"
    return "mse"


def _target(kind: str, out: torch.Tensor, where: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(TARGET_SEED)
    if kind == "cross_entropy":
        if out.dim() < 2 or out.shape[-1] < 2:
            raise FrontendError(
                f"{where}: cross_entropy needs class scores [N, C] with C > 1; the output is {list(out.shape)}"
            )
        return torch.randint(0, out.shape[-1], tuple(out.shape[:-1]), generator=g, dtype=torch.int64)
    if kind == "mse":
        return torch.randn(tuple(out.shape), generator=g, dtype=torch.float32).to(out.dtype)
    return torch.zeros((), dtype=out.dtype)


def _check_against_shape_inference(
    model: onnx.ModelProto,
    shapes: dict[str, tuple[int, ...]],
    module: OnnxModule,
    out: torch.Tensor,
    output_name: str,
    where: str,
) -> None:
    """The primary output's shape must agree with ONNX shape inference for the fixed
    input shapes (a converter bug or a wrong --input-shape shows up here, not later)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    init = {i.name for i in m.graph.initializer}
    for vi in m.graph.input:
        if vi.name in init or vi.name not in shapes:
            continue
        shp = vi.type.tensor_type.shape
        shp.ClearField("dim")
        for d in shapes[vi.name]:
            shp.dim.add().dim_value = d
    try:
        inferred = onnx.shape_inference.infer_shapes(m, data_prop=True)
    except onnx.shape_inference.InferenceError as exc:
        raise FrontendError(
            f"{where}: ONNX shape inference failed for these input shapes: {str(exc).splitlines()[0][:200]}"
        ) from None
    for vi in inferred.graph.output:
        if vi.name != output_name:
            continue
        dims = vi.type.tensor_type.shape.dim
        known = [d.dim_value if d.HasField("dim_value") else None for d in dims]
        if vi.type.tensor_type.HasField("shape") and (
            len(known) != out.dim() or any(k is not None and k != s for k, s in zip(known, out.shape))
        ):
            raise FrontendError(
                f"{where}: output '{output_name}' has shape {list(out.shape)} after conversion, "
                f"but ONNX shape inference says {[k if k is not None else '?' for k in known]}"
            )
