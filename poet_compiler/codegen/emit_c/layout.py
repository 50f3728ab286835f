"""Where every value of the traced training step lives on the device.

Each FX value (an op's output, a ``getitem`` of a multi-output op, a view) resolves to a
:class:`Ref`: a base (an arena buffer of a scheduling node, or a static C array), an
element offset, sizes and element strides, and a dtype. Views cost nothing: a view's
Ref is its base's storage with the view's own strides and storage offset, exactly as
PyTorch's fake tensors record them during tracing.

The arena layout of a node's buffer follows the lowering
(:mod:`poet_compiler.frontends.torch.lowering`): a multi-output op holds, in output order
and back to back, every output that some op reads; a *select* node holds copies of the
outputs it picks (batch norm's saved mean/invstd, max-pool's indices), in output order.
Outputs no op reads are not in the arena: gradients and new running statistics go to
the static output arrays (``out_<k>``), anything else to a static scratch array.
Max-pool indices are stored as int32 (half of the int64 slot the graph reserves).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.fx

from poet_compiler.frontends.torch.opinfo import is_view


@dataclass(frozen=True)
class Ref:
    """A strided tensor on the device: ``base`` is ``arena:<node>`` or a C symbol."""

    base: str
    byte_offset: int            # within the arena buffer (arena bases only)
    elem_offset: int            # the view's storage offset, in elements
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: torch.dtype

    @property
    def node(self) -> int | None:
        return int(self.base.split(":", 1)[1]) if self.base.startswith("arena:") else None

    @property
    def numel(self) -> int:
        n = 1
        for s in self.sizes:
            n *= s
        return n

    def contiguous(self) -> bool:
        expect = 1
        for size, stride in zip(reversed(self.sizes), reversed(self.strides)):
            if size != 1 and stride != expect:
                return False
            expect *= size
        return True

    def ptr(self, ctype: str = "float") -> str:
        """C expression of the first element, inside a node function (``arena``, ``where`` in scope)."""
        node = self.node
        if node is not None:
            base = f"(({ctype} *)AT({node}, {self.byte_offset}))"
        else:
            base = self.base
        return f"{base} + {self.elem_offset}" if self.elem_offset else base

    def view(self, val: torch.Tensor) -> Ref:
        """The same storage seen through ``val``'s sizes, strides and storage offset."""
        return Ref(self.base, self.byte_offset, int(val.storage_offset()), tuple(val.shape),
                   tuple(val.stride()), val.dtype)


def fx_val(n: torch.fx.Node) -> Any:
    """The node's FX meta value: a (fake) tensor, a tuple of them, a number, or None."""
    return n.meta.get("val")


def is_alias(n: torch.fx.Node) -> bool:
    return n.op == "call_function" and (n.target is operator.getitem or is_view(n))


def tensor_nbytes(t: torch.Tensor) -> int:
    return int(t.numel() * t.element_size())


def out_elements(n: torch.fx.Node) -> list[torch.Tensor | None]:
    """An op's outputs as a list (one element for a single-output op)."""
    val = fx_val(n)
    if isinstance(val, (list, tuple)):
        return [v if isinstance(v, torch.Tensor) else None for v in val]
    return [val if isinstance(val, torch.Tensor) else None]


def alias_root(n: torch.fx.Node) -> tuple[torch.fx.Node, int]:
    """(op or placeholder, output index) whose storage ``n`` aliases."""
    while is_alias(n):
        parent = n.args[0]
        if not isinstance(parent, torch.fx.Node):
            break
        if n.target is operator.getitem and isinstance(fx_val(parent), (list, tuple)) and not is_alias(parent):
            return parent, int(cast(int, n.args[1]))  # getitem's index
        n = parent
    return n, 0


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def held_elements(op: torch.fx.Node, ops: set[torch.fx.Node]) -> list[int]:
    """Outputs of ``op`` that some op reads (what its arena buffer holds), as the lowering
    computes them; the first tensor output when nothing reads any."""
    read: set[int] = set()
    for m in ops:
        for a in m.all_input_nodes:
            root, idx = alias_root(a)
            if root is op:
                read.add(idx)
    elems = out_elements(op)
    if read:
        return sorted(read)
    return [next(i for i, t in enumerate(elems) if t is not None)]
