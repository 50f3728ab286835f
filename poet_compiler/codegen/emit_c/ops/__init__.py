"""One emitter per aten op: the C statements that run it with the reference kernels.

An emitter gets a :class:`Call` (the FX node, the Refs of its tensor arguments and of
its outputs, a place for constant attribute structs) and returns C statements. An op
without an emitter has no reference kernel: :func:`emit_op` raises
:class:`~.errors.EmitError` naming it. Shapes are checked here, at generation time, so
the device never meets a case the kernels do not handle.
"""

from __future__ import annotations

# Each family registers its emitters in EMITTERS when imported.
from poet_compiler.codegen.emit_c.ops import matrix, optim, pointwise, spatial  # noqa: F401
from poet_compiler.codegen.emit_c.ops.emitter import EMITTERS, Call, c_float, emit_op, emitter, ewise

__all__ = ["EMITTERS", "Call", "c_float", "emit_op", "emitter", "ewise"]
