"""The optimizer updates as functional custom ops (``torch.ops.poet.*``), one per parameter.

Each op reads a parameter, its gradient and its state and returns their new values; the
implementation runs, on copies, the aten ops of torch.optim's single-tensor path
(``foreach=False``), in its order, so a step that runs these ops is bitwise equal to
``torch.optim`` on the same gradients. Adam's step-dependent scalars are Python floats
computed from ``step.item()``, as torch.optim computes them. A fake implementation gives
their shapes to tracing (make_fx), where each op stays one FX node: the update node of
docs/training.md. Importing this module registers the ops (pygen's output imports it).
"""

from __future__ import annotations

import torch
from torch import Tensor


@torch.library.custom_op("poet::sgd", mutates_args=())
def sgd(param: Tensor, grad: Tensor, lr: float, weight_decay: float) -> Tensor:
    """Plain SGD: ``param - lr * (grad + weight_decay * param)``."""
    p = param.clone()
    if weight_decay != 0:
        grad = grad.add(p, alpha=weight_decay)
    p.add_(grad, alpha=-lr)
    return p


@sgd.register_fake
def _sgd_fake(param: Tensor, grad: Tensor, lr: float, weight_decay: float) -> Tensor:
    return torch.empty_like(param)


@torch.library.custom_op("poet::sgd_momentum", mutates_args=())
def sgd_momentum(param: Tensor, grad: Tensor, buf: Tensor, lr: float, momentum: float, weight_decay: float,
                 nesterov: bool) -> tuple[Tensor, Tensor]:
    """SGD with momentum (dampening 0). The buffer starts at zero: ``0 * m + g == g``
    exactly, torch.optim's first-step ``clone(grad)``."""
    p, b = param.clone(), buf.clone()
    if weight_decay != 0:
        grad = grad.add(p, alpha=weight_decay)
    b.mul_(momentum).add_(grad, alpha=1)
    step = grad.add(b, alpha=momentum) if nesterov else b
    p.add_(step, alpha=-lr)
    return p, b


@sgd_momentum.register_fake
def _sgd_momentum_fake(param: Tensor, grad: Tensor, buf: Tensor, lr: float, momentum: float,
                       weight_decay: float, nesterov: bool) -> tuple[Tensor, Tensor]:
    return torch.empty_like(param), torch.empty_like(buf)


@torch.library.custom_op("poet::adam", mutates_args=())
def adam(param: Tensor, grad: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, step: Tensor, lr: float,
         beta1: float, beta2: float, eps: float, weight_decay: float,
         decoupled: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Adam (``decoupled``: AdamW), no amsgrad; ``step`` a float32 scalar tensor."""
    p, m, v, t = param.clone(), exp_avg.clone(), exp_avg_sq.clone(), step.clone()
    t += 1
    if weight_decay != 0:
        if decoupled:
            p.mul_(1 - lr * weight_decay)
        else:
            grad = grad.add(p, alpha=weight_decay)
    m.lerp_(grad, 1 - beta1)
    v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    n = t.item()
    bias_correction1 = 1 - beta1**n
    bias_correction2 = 1 - beta2**n
    step_size = lr / bias_correction1
    denom = (v.sqrt() / bias_correction2**0.5).add_(eps)
    p.addcdiv_(m, denom, value=-step_size)
    return p, m, v, t


@adam.register_fake
def _adam_fake(param: Tensor, grad: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, step: Tensor, lr: float,
               beta1: float, beta2: float, eps: float, weight_decay: float,
               decoupled: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return torch.empty_like(param), torch.empty_like(exp_avg), torch.empty_like(exp_avg_sq), torch.empty_like(step)


UPDATE_OPS = ("poet.sgd", "poet.sgd_momentum", "poet.adam")
