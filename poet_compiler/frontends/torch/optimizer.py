"""The optimizer of a compiled step: a spec string or a torch.optim instance, read into
an :class:`OptimizerSpec` that says which ``poet.*`` op updates each parameter and what
state it keeps (docs/training.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Literal

import torch

from poet_compiler.errors import FrontendError
from poet_compiler.frontends.torch import optim_ops

Kind = Literal["sgd", "adam", "adamw"]
_KEYS: dict[str, tuple[str, ...]] = {
    "sgd": ("lr", "momentum", "weight_decay", "nesterov"),
    "adam": ("lr", "beta1", "beta2", "eps", "weight_decay"),
    "adamw": ("lr", "beta1", "beta2", "eps", "weight_decay"),
}
_SPEC_HELP = "sgd:lr=0.05,momentum=0.9 | adam:lr=1e-3 | adamw:lr=1e-3,weight_decay=0.01"


@dataclass(frozen=True)
class OptimizerSpec:
    """One optimizer and its hyper-parameters (torch.optim's names and defaults)."""

    kind: Kind
    lr: float
    momentum: float = 0.0
    weight_decay: float = 0.0
    nesterov: bool = False
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, float) and (not math.isfinite(v) or v < 0):
                raise FrontendError(f"optimizer {self.kind}: {f.name} must be a finite number >= 0, got {v}")
        if self.nesterov and self.momentum == 0:
            raise FrontendError("optimizer sgd: nesterov needs a momentum > 0")
        if self.kind != "sgd" and not (self.beta1 < 1 and self.beta2 < 1):
            raise FrontendError(f"optimizer {self.kind}: betas must be in [0, 1)")

    @property
    def state_names(self) -> tuple[str, ...]:
        """The state tensors each parameter keeps, in the op's argument order."""
        if self.kind == "sgd":
            return ("momentum_buffer",) if self.momentum else ()
        return ("exp_avg", "exp_avg_sq", "step")

    def initial_state(self, param: torch.Tensor) -> dict[str, torch.Tensor]:
        """State before the first step: zeros (``step`` a float32 scalar, as torch.optim)."""
        return {s: torch.zeros((), dtype=torch.float32, device=param.device) if s == "step"
                else torch.zeros_like(param, memory_format=torch.contiguous_format) for s in self.state_names}

    def apply(self, param: torch.Tensor, grad: torch.Tensor, state: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """The new parameter and state: one ``poet.*`` op (traced as one FX node)."""
        if self.kind == "sgd" and not self.momentum:
            return (torch.ops.poet.sgd(param, grad, self.lr, self.weight_decay),)
        if self.kind == "sgd":
            return tuple(torch.ops.poet.sgd_momentum(param, grad, state[0], self.lr, self.momentum,
                                                     self.weight_decay, self.nesterov))
        return tuple(torch.ops.poet.adam(param, grad, state[0], state[1], state[2], self.lr, self.beta1,
                                         self.beta2, self.eps, self.weight_decay, self.kind == "adamw"))

    def to_torch(self, params: Any) -> torch.optim.Optimizer:
        """The same optimizer in torch.optim, single-tensor path (the reference of ``verify``)."""
        if self.kind == "sgd":
            return torch.optim.SGD(params, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay,
                                   nesterov=self.nesterov, foreach=False)
        cls = torch.optim.Adam if self.kind == "adam" else torch.optim.AdamW
        return cls(params, lr=self.lr, betas=(self.beta1, self.beta2), eps=self.eps,
                   weight_decay=self.weight_decay, foreach=False)

    def torch_state(self, opt: torch.optim.Optimizer, param: torch.Tensor) -> dict[str, torch.Tensor]:
        """``param``'s state in a torch.optim instance under this spec's names (zeros before
        its first step)."""
        st = opt.state.get(param, {})
        out = self.initial_state(param)
        for s in out:
            if s in st:
                out[s] = st[s]
        return out

    def describe(self) -> str:
        """The spec string that gives this optimizer back."""
        defaults = OptimizerSpec(self.kind, self.lr) if self.kind != "adamw" else OptimizerSpec(
            "adamw", self.lr, weight_decay=1e-2)
        parts = [f"lr={self.lr:g}"]
        for k in _KEYS[self.kind][1:]:
            v = getattr(self, k)
            if v != getattr(defaults, k):
                parts.append(f"{k}={int(v) if isinstance(v, bool) else format(v, 'g')}")
        return f"{self.kind}:" + ",".join(parts)


def parse_optimizer(spec: str) -> OptimizerSpec:
    """``sgd:lr=0.05,momentum=0.9`` -> OptimizerSpec; a bad spec is one FrontendError line."""
    text = spec.strip()
    kind, _, rest = text.partition(":")
    kind = kind.strip().lower()
    if kind not in _KEYS:
        raise FrontendError(f"--optimizer {spec!r}: unknown optimizer {kind!r} (expected {_SPEC_HELP})")
    values: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq or key not in _KEYS[kind]:
            allowed = ", ".join(_KEYS[kind])
            raise FrontendError(f"--optimizer {spec!r}: {item!r} is not key=value with a key of {kind} ({allowed})")
        try:
            num = float(raw)
        except ValueError:
            raise FrontendError(f"--optimizer {spec!r}: {key}={raw.strip()!r} is not a number") from None
        if key == "nesterov":
            if num not in (0.0, 1.0):
                raise FrontendError(f"--optimizer {spec!r}: nesterov must be 0 or 1")
            values[key] = bool(num)
        else:
            values[key] = num
    if "lr" not in values:
        if kind == "sgd":
            raise FrontendError(f"--optimizer {spec!r}: sgd needs lr=...")
        values["lr"] = 1e-3
    if kind == "adamw":
        values.setdefault("weight_decay", 1e-2)
    return OptimizerSpec(kind=kind, **values)  # type: ignore[arg-type]


_REFUSED = ("maximize", "amsgrad", "capturable", "differentiable")


def from_torch(opt: torch.optim.Optimizer) -> OptimizerSpec:
    """Read a torch.optim instance for its class and hyper-parameters."""
    kinds: dict[type, Kind] = {torch.optim.SGD: "sgd", torch.optim.Adam: "adam", torch.optim.AdamW: "adamw"}
    kind = kinds.get(type(opt))
    if kind is None:
        raise FrontendError(f"optimizer {type(opt).__name__} is not supported (SGD, Adam, AdamW)")
    if len(opt.param_groups) != 1:
        raise FrontendError(f"optimizer {type(opt).__name__}: {len(opt.param_groups)} parameter groups; "
                            "one is supported")
    group = opt.param_groups[0]
    for key in _REFUSED:
        if group.get(key):
            raise FrontendError(f"optimizer {type(opt).__name__}: {key}=True is not supported")
    if group.get("fused"):
        raise FrontendError(f"optimizer {type(opt).__name__}: fused=True is not supported")
    if isinstance(group["lr"], torch.Tensor):
        raise FrontendError(f"optimizer {type(opt).__name__}: a tensor lr is not supported")
    if kind == "sgd":
        if group.get("dampening", 0):
            raise FrontendError("optimizer SGD: dampening != 0 is not supported")
        return OptimizerSpec("sgd", float(group["lr"]), momentum=float(group["momentum"]),
                             weight_decay=float(group["weight_decay"]), nesterov=bool(group["nesterov"]))
    beta1, beta2 = (float(b) for b in group["betas"])
    return OptimizerSpec(kind, float(group["lr"]), weight_decay=float(group["weight_decay"]), beta1=beta1,
                         beta2=beta2, eps=float(group["eps"]))


def as_optimizer(value: str | torch.optim.Optimizer | OptimizerSpec | None) -> OptimizerSpec | None:
    """Any accepted form of the ``optimizer`` argument, or None."""
    if value is None or isinstance(value, OptimizerSpec):
        return value
    if isinstance(value, str):
        return parse_optimizer(value)
    if isinstance(value, torch.optim.Optimizer):
        return from_torch(value)
    raise FrontendError(f"optimizer must be a torch.optim instance or a spec string, got {type(value).__name__}")


_ = optim_ops  # the poet.* ops are registered by importing it
