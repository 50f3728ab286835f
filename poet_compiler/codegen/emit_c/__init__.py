"""``poetc emit-c``: a model plus its schedule -> C sources for one training step on a device.

:func:`emit_c` traces the model (op granularity, the batch recorded with the schedule),
resolves where every value lives (:mod:`.resolve`), emits one C function per graph node
that calls the reference kernels of ``runtime/c/kernels`` (:mod:`.ops`), and writes the
directory atomically (:mod:`.bundle`). :mod:`.run` builds and runs the result on the
host or under QEMU and compares it with PyTorch. With a :class:`TrainLoop` the directory
is a firmware that trains the model over data set files (:mod:`.train`, :mod:`.dataset`).
"""

from __future__ import annotations

from poet_compiler.codegen.emit_c.emit import EmitResult, emit_c, plan_for
from poet_compiler.codegen.emit_c.errors import EmitError
from poet_compiler.codegen.emit_c.train import TrainLoop

__all__ = ["EmitError", "EmitResult", "TrainLoop", "emit_c", "plan_for"]
