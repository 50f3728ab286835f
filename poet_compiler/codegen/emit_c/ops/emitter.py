"""What an emitter is: the :class:`Call` it gets, the helpers it writes C with, and the
registry :func:`emit_op` looks ops up in (:data:`EMITTERS`, filled by :func:`emitter`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from poet_compiler.codegen.emit_c.errors import EmitError
from poet_compiler.codegen.emit_c.layout import Ref, fx_val
from poet_compiler.frontends.torch.opinfo import packet_name


@dataclass
class Call:
    """What an emitter needs about one op."""

    node: torch.fx.Node
    refs: dict[str, Ref]
    outs: list[Ref | None]
    sched_id: int
    structs: list[str] = field(default_factory=list)  # static const definitions this op needs

    def ref(self, i: int) -> Ref:
        a = self.node.args[i]
        if not isinstance(a, torch.fx.Node) or a.name not in self.refs:
            raise EmitError(f"{self.label}: argument {i} is not a tensor the device holds")
        return self.refs[a.name]

    def opt(self, i: int) -> Ref | None:
        a = self.node.args[i] if i < len(self.node.args) else None
        return self.ref(i) if isinstance(a, torch.fx.Node) else None

    def arg(self, i: int, default: Any = None) -> Any:
        """Argument ``i`` of the call (positional or by its schema name): FX arguments are untyped."""
        if i < len(self.node.args):
            return self.node.args[i]
        return self.node.kwargs.get(_schema_name(self.node, i), default)

    @property
    def label(self) -> str:
        return f"node {self.sched_id} ({packet_name(self.node.target)})"

    def dense(self, ref: Ref | None, what: str) -> Ref | None:
        """``ref``, checked contiguous (conv, batch norm and pooling read dense NCHW)."""
        if ref is not None and not ref.contiguous():
            raise EmitError(f"{self.label}: {what} is a strided view; the reference kernel needs it contiguous")
        return ref

    def struct(self, ctype: str, fields: list[int | float]) -> str:
        name = f"attr_{self.sched_id}_{len(self.structs)}"
        body = ", ".join(_c_number(v) for v in fields)
        self.structs.append(f"static const {ctype} {name} = {{{body}}};")
        return f"&{name}"


def _schema_name(node: torch.fx.Node, i: int) -> str:
    schema = getattr(node.target, "_schema", None)
    return schema.arguments[i].name if schema is not None and i < len(schema.arguments) else ""


def _c_number(v: int | float) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    return c_float(v)


def c_float(v: float) -> str:
    """A float32 literal that round-trips exactly (9 significant digits)."""
    f = float(torch.tensor(v, dtype=torch.float32).item())
    if f != f or f in (float("inf"), float("-inf")):
        raise EmitError(f"non-finite constant {v}")
    text = f"{f:.9g}"
    if "e" not in text and "." not in text:
        text += ".0"
    return text + "f"


def ints(v: Any, n: int = 2) -> list[int]:
    if isinstance(v, int):
        return [v] * n
    vals = [int(x) for x in v]
    return vals * n if len(vals) == 1 else vals


def dims(r: Ref) -> tuple[int, int, int, int]:
    if len(r.sizes) != 4:
        raise EmitError(f"expected an NCHW tensor, got sizes {r.sizes}")
    n, c, h, w = r.sizes
    return n, c, h, w


def i32_list(vals: tuple[int, ...] | list[int]) -> str:
    return "(const int32_t[]){" + ", ".join(str(v) for v in (list(vals) or [0])) + "}"


def broadcast_strides(r: Ref, out_sizes: tuple[int, ...]) -> tuple[int, ...]:
    """``r``'s element strides over ``out_sizes`` (right-aligned; stride 0 where it broadcasts)."""
    pad = len(out_sizes) - len(r.sizes)
    if pad < 0:
        raise EmitError(f"cannot broadcast sizes {r.sizes} to {out_sizes}")
    strides = []
    for d, size in enumerate(out_sizes):
        k = d - pad
        if k < 0 or r.sizes[k] == 1:
            strides.append(0)
        elif r.sizes[k] == size:
            strides.append(r.strides[k])
        else:
            raise EmitError(f"cannot broadcast sizes {r.sizes} to {out_sizes}")
    return tuple(strides)


def ewise(code: str, y: Ref, a: Ref | None, b: Ref | None, scalar: float | int = 0.0) -> str:
    """A poet_ewise call writing the contiguous ``y``."""
    if len(y.sizes) > 4:
        raise EmitError(f"element-wise op on a {len(y.sizes)}-d tensor (the kernels handle up to 4)")
    sa = i32_list(broadcast_strides(a, y.sizes)) if a is not None else "NULL"
    sb = i32_list(broadcast_strides(b, y.sizes)) if b is not None else "NULL"
    return (f"poet_ewise({code}, {len(y.sizes)}, {i32_list(y.sizes)}, {y.ptr()}, "
            f"{a.ptr() if a else 'NULL'}, {sa}, {b.ptr() if b else 'NULL'}, {sb}, {c_float(float(scalar))});")


Emitter = Callable[[Call], list[str]]
EMITTERS: dict[str, Emitter] = {}


def emitter(*targets: str) -> Callable[[Emitter], Emitter]:
    def deco(fn: Emitter) -> Emitter:
        for t in targets:
            EMITTERS[t] = fn
        return fn
    return deco


def out_ptr(c: Call, e: int) -> str:
    """The pointer to output ``e`` of the call, or ``NULL`` when nothing holds it."""
    r = c.outs[e] if e < len(c.outs) else None
    return r.ptr() if r is not None else "NULL"


def emit_op(call: Call) -> list[str]:
    """C statements for ``call``, or EmitError naming the op that has no kernel."""
    key = str(call.node.target)
    fn = EMITTERS.get(key)
    if fn is None:
        raise EmitError(
            f"no reference kernel for op {key} (node {call.sched_id}, {call.node.name}); "
            f"emit-c supports {len({k.rsplit('.', 1)[0] for k in EMITTERS})} ops: see runtime/c/kernels/README.md"
        )
    val = fx_val(call.node)
    for t in val if isinstance(val, (list, tuple)) else [val]:
        if isinstance(t, torch.Tensor) and t.dtype not in (torch.float32, torch.int64):
            raise EmitError(f"{call.label}: dtype {t.dtype} has no reference kernel (float32 only)")
    return fn(call)
