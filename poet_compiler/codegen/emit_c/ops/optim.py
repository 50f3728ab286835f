"""Emitters of the optimizer updates a schedule carries (docs/training.md): SGD, SGD with
momentum, Adam, each writing the parameter and its state in place."""

from __future__ import annotations

from poet_compiler.codegen.emit_c.errors import EmitError
from poet_compiler.codegen.emit_c.layout import Ref
from poet_compiler.codegen.emit_c.ops.emitter import Call, c_float, emitter


def _update_refs(c: Call, n_state: int) -> tuple[Ref, Ref, list[Ref]]:
    """Parameter, gradient and state of an update op (docs/training.md); the gradient is
    read dense, the parameter and state are the static arrays it overwrites."""
    param, grad = c.dense(c.ref(0), "parameter"), c.dense(c.ref(1), "gradient")
    state = [c.dense(c.ref(2 + k), "optimizer state") for k in range(n_state)]
    assert param is not None and grad is not None
    if param.sizes != grad.sizes:
        raise EmitError(f"{c.label}: gradient sizes {grad.sizes} differ from the parameter's {param.sizes}")
    return param, grad, [s for s in state if s is not None]


@emitter("poet.sgd.default")
def _sgd(c: Call) -> list[str]:
    p, g, _ = _update_refs(c, 0)
    return [f"poet_sgd({p.numel}, {p.ptr()}, {g.ptr()}, {c_float(float(c.arg(2)))}, {c_float(float(c.arg(3)))});"]


@emitter("poet.sgd_momentum.default")
def _sgd_momentum(c: Call) -> list[str]:
    p, g, (buf,) = _update_refs(c, 1)
    attr = c.struct("poet_sgd_attr", [float(c.arg(3)), float(c.arg(4)), float(c.arg(5)), int(bool(c.arg(6)))])
    return [f"poet_sgd_momentum({p.numel}, {p.ptr()}, {g.ptr()}, {buf.ptr()}, {attr});"]


@emitter("poet.adam.default")
def _adam(c: Call) -> list[str]:
    p, g, (m, v, step) = _update_refs(c, 3)
    # lr, betas and weight decay stay doubles: the bias corrections are computed in double.
    doubles = ", ".join(repr(float(c.arg(k))) for k in (5, 6, 7, 9))
    name = f"attr_{c.sched_id}_{len(c.structs)}"
    c.structs.append(f"static const poet_adam_attr {name} = {{{doubles}, {c_float(float(c.arg(8)))}, "
                     f"{int(bool(c.arg(10)))}}};")
    return [f"poet_adam({p.numel}, {p.ptr()}, {g.ptr()}, {m.ptr()}, {v.ptr()}, {step.ptr()}, &{name});"]
