"""PyTorch frontend: nn.Module + example batch + loss -> TracedModel (joint fwd+bwd graph)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from poet_compiler.errors import FrontendError
from poet_compiler.frontends.torch.lowering import lower
from poet_compiler.frontends.torch.optimizer import OptimizerSpec
from poet_compiler.frontends.torch.subset import select_trained
from poet_compiler.frontends.torch.traced import TracedModel
from poet_compiler.frontends.torch.tracing import trace_joint
from poet_compiler.graph.coarsen import GRANULARITIES


def trace_module(
    module: nn.Module,
    example_inputs: Sequence[torch.Tensor] | torch.Tensor,
    target: torch.Tensor,
    loss_fn: Callable[[Any, torch.Tensor], torch.Tensor],
    *,
    name: str,
    granularity: str = "op",
    optimizer: OptimizerSpec | None = None,
    train: str | None = None,
) -> TracedModel:
    """Trace one training step of ``module`` into a :class:`TracedModel`.

    ``granularity`` other than ``"op"`` coarsens the op-level graph
    (:func:`poet_compiler.graph.coarsen.coarsen_traced`): ``module`` per leaf module,
    ``layer`` one heavy op with its cheap followers, ``auto`` layers merged to <= 80 nodes.
    ``optimizer``: the step applies this update to every trained parameter
    (docs/training.md) instead of returning the gradients. ``train``: comma-separated
    name globs; the parameters none of them matches are frozen (``requires_grad=False``
    on ``module``) before tracing.
    """
    if granularity not in GRANULARITIES:
        raise FrontendError(f"granularity must be one of {', '.join(GRANULARITIES)}, got {granularity!r}")
    if not isinstance(module, nn.Module):
        raise FrontendError(f"{name}: expected an nn.Module, got {type(module).__name__}")
    if train is not None:
        select_trained(module, train)
    inputs = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    if not all(isinstance(t, torch.Tensor) for t in inputs) or not isinstance(target, torch.Tensor):
        raise FrontendError(f"{name}: example inputs and target must be tensors")
    joint = trace_joint(module, inputs, target, loss_fn, optimizer)
    low = lower(joint, name)
    tm = TracedModel(
        graph=low.graph, gm=joint.gm, module=module, example_inputs=inputs, target=target, loss_fn=loss_fn,
        param_names=joint.param_names, buffer_names=joint.buffer_names, n_inputs=joint.n_inputs,
        grad_names=joint.grad_names, update_names=joint.update_names, node_fx=low.node_fx,
        prelude_fx=low.prelude_fx, fx_owner=low.fx_owner, state_names=joint.state_names, optimizer=optimizer,
        out_spec=joint.out_spec, out_leaves=joint.out_leaves, out_is_fx=joint.out_is_fx,
    )
    if granularity != "op":
        from poet_compiler.graph.coarsen import coarsen_traced

        tm = coarsen_traced(tm, granularity)
    return tm


__all__ = ["GRANULARITIES", "TracedModel", "trace_module"]
