"""FX ops written as Python source: the one printer of the straight-line step
(:mod:`.pygen`) and of ``checkpointed()``'s forward (:mod:`.checkpointed`).

An FX argument is a node (written as its name), a constant (:func:`literal`), or a
:class:`Raw` text the caller generated; a call is ``<callee>(<args>, <k>=<v>)`` with the
callee named by the caller (a qualified ``torch.ops`` name, or a bound global), a
``getitem`` is ``<value>[<index>]``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from poet_compiler.errors import FrontendError


class Raw:
    """An argument written as-is (a generated name)."""

    def __init__(self, text: str) -> None:
        self.text = text


def literal(value: Any) -> str:
    """Python source that evaluates to the FX argument ``value``."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, torch.fx.Node):
        return value.name
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return repr(value)
    if isinstance(value, float):
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        if math.isnan(value):
            return "nan"
        return repr(value)
    if isinstance(value, (list, tuple)):
        inner = ", ".join(literal(v) for v in value)
        if isinstance(value, tuple):
            return f"({inner},)" if len(value) == 1 else f"({inner})"
        return f"[{inner}]"
    if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
        return repr(value)  # torch.float32, torch.strided, torch.contiguous_format
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    raise FrontendError(f"cannot write the FX constant {value!r} ({type(value).__name__}) as Python")


def call(node: torch.fx.Node, callee: Callable[[torch.fx.Node], str], args: tuple | None = None) -> str:
    """The right-hand side of FX op ``node``: ``callee(node)`` names what it calls;
    ``args`` replace the node's positional arguments."""
    if node.target is operator.getitem:
        return f"{literal(node.args[0])}[{literal(node.args[1])}]"
    written = [literal(a) for a in (node.args if args is None else args)]
    written += [f"{k}={literal(v)}" for k, v in node.kwargs.items()]
    return f"{callee(node)}({', '.join(written)})"


def qualified_name(node: torch.fx.Node) -> str:
    """The target of FX op ``node`` as an importable name: ``torch.ops.<ns>.<op>.<overload>``,
    or ``_operator.<name>`` (the generated module imports ``operator`` as ``_operator``)."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        ns, op = target.name().split("::", 1)
        op = op.split(".", 1)[0]
        return f"torch.ops.{ns}.{op}.{target._overloadname}"
    if not isinstance(target, str) and getattr(target, "__module__", None) in ("_operator", "operator"):
        return f"_operator.{target.__name__}"
    raise FrontendError(f"FX node {node.name}: cannot write target {target!r} as Python")


__all__ = ["Raw", "call", "literal", "qualified_name"]
