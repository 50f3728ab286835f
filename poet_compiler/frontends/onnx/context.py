"""What an op converter sees of its node, and the registry of converters.

A converter runs once, at conversion time. It reads the node's attributes, the static
shapes of its inputs (known exactly: the frontend converts with fixed input shapes and
runs every node once on the example batch) and the values of inputs that are constants
(initializers, Constant nodes, folded Shape arithmetic). It returns a *runner*: a pure
function of the node's run-time input tensors that only calls torch ops, so that the
converted module traces with make_fx without data-dependent Python control flow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import onnx
import torch

from poet_compiler.errors import FrontendError

from .dtypes import tensor_from_proto

Runner = Callable[[Sequence[Any]], Sequence[torch.Tensor | None]]
"""Run-time body of one ONNX node: input tensors (None where absent or consumed
statically) -> output tensors (None for outputs nobody reads). The inputs are typed
``Any``: which of them may be None is the op's contract, checked when it is converted."""

Converter = Callable[["NodeContext"], Runner]

CONVERTERS: dict[str, Converter] = {}
#: Domain of the nodes the fusion pass (``fuse.py``) creates; their registry key is
#: ``"ai.poetc::OpType"``, so no ONNX op type can reach their converters.
INTERNAL_DOMAIN = "ai.poetc"
#: Ops whose outputs depend only on input shapes (folded whenever the shapes are known).
SHAPE_ONLY: set[str] = set()


def op_key(node: onnx.NodeProto) -> str:
    """The registry key of ``node``: its op type, prefixed by its domain unless default."""
    if node.domain in ("", "ai.onnx"):
        return node.op_type
    return f"{node.domain}::{node.op_type}"


def converter(*op_types: str, shape_only: bool = False) -> Callable[[Converter], Converter]:
    """Register ``fn`` as the converter of ONNX ops ``op_types`` (default domain, or
    ``"domain::OpType"`` for the fusion pass's internal nodes)."""

    def deco(fn: Converter) -> Converter:
        for op in op_types:
            if op in CONVERTERS:
                raise RuntimeError(f"two converters for ONNX op {op}")
            CONVERTERS[op] = fn
            if shape_only:
                SHAPE_ONLY.add(op)
        return fn

    return deco


@dataclass
class NodeContext:
    """One ONNX node as its converter sees it."""

    node: onnx.NodeProto
    opset: int
    #: Static shape of each input ("" inputs -> None).
    shapes: list[tuple[int, ...] | None]
    #: Dtype of each input ("" inputs -> None).
    dtypes: list[torch.dtype | None]
    #: Constant value of each input, where it is one (else None).
    consts: list[torch.Tensor | None]
    #: Whether each output is read by some node or is a graph output.
    used: list[bool]
    #: Inputs the converter read as constants (the runner gets None for those).
    static_inputs: set[int] = field(default_factory=set)
    #: Inputs the converter declares non-trainable (e.g. BatchNorm running statistics).
    frozen_inputs: set[int] = field(default_factory=set)
    _attrs: dict[str, Any] | None = None

    # -- naming ---------------------------------------------------------------------
    @property
    def where(self) -> str:
        name = self.node.name or (self.node.output[0] if self.node.output else "?")
        return f"node '{name}' ({self.node.op_type}, opset {self.opset})"

    def fail(self, why: str) -> FrontendError:
        return FrontendError(f"{self.where}: {why}")

    # -- attributes -----------------------------------------------------------------
    @property
    def attrs(self) -> dict[str, Any]:
        if self._attrs is None:
            out: dict[str, Any] = {}
            for a in self.node.attribute:
                if a.type == onnx.AttributeProto.TENSOR:
                    out[a.name] = tensor_from_proto(a.t, self.where)
                elif a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                    raise self.fail(f"attribute '{a.name}' holds a subgraph (control flow is not supported)")
                else:
                    v = onnx.helper.get_attribute_value(a)
                    out[a.name] = v.decode() if isinstance(v, bytes) else v
            self._attrs = out
        return self._attrs

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    # -- inputs ---------------------------------------------------------------------
    @property
    def n_inputs(self) -> int:
        return len(self.node.input)

    def has_input(self, i: int) -> bool:
        return i < len(self.node.input) and self.node.input[i] != ""

    def shape(self, i: int) -> tuple[int, ...]:
        s = self.shapes[i] if i < len(self.shapes) else None
        if s is None:
            raise self.fail(f"input {i} is missing")
        return s

    def rank(self, i: int) -> int:
        return len(self.shape(i))

    def dtype(self, i: int) -> torch.dtype:
        d = self.dtypes[i] if i < len(self.dtypes) else None
        if d is None:
            raise self.fail(f"input {i} is missing")
        return d

    def is_const(self, i: int) -> bool:
        return self.has_input(i) and self.consts[i] is not None

    def const(self, i: int, what: str) -> torch.Tensor:
        """The constant value of input ``i``; fails if it is computed at run time."""
        if not self.has_input(i):
            raise self.fail(f"{what} (input {i}) is missing")
        v = self.consts[i]
        if v is None:
            raise self.fail(
                f"{what} (input '{self.node.input[i]}') is computed from run-time data; "
                "only constant or shape-derived values are supported there"
            )
        self.static_inputs.add(i)
        return v

    def ints(self, i: int, what: str) -> list[int]:
        return [int(v) for v in self.const(i, what).reshape(-1).tolist()]

    def int_list(self, attr: str, input_index: int, since: int, what: str) -> list[int] | None:
        """A list given as attribute ``attr`` before opset ``since`` and as input after."""
        if self.opset < since or attr in self.attrs:
            v = self.attr(attr)
            return None if v is None else [int(x) for x in v]
        if not self.has_input(input_index):
            return None
        return self.ints(input_index, what)

    @overload
    def scalar(self, i: int, what: str, default: float) -> float: ...
    @overload
    def scalar(self, i: int, what: str, default: None = None) -> float | None: ...

    def scalar(self, i: int, what: str, default: float | None = None) -> float | None:
        if not self.has_input(i):
            return default
        return float(self.const(i, what).reshape(-1)[0].item())

    def axis(self, a: int, rank: int) -> int:
        if not -rank <= a < max(rank, 1):
            raise self.fail(f"axis {a} is out of range for rank {rank}")
        return a % rank if rank else 0

    def freeze(self, *idx: int) -> None:
        self.frozen_inputs.update(idx)
