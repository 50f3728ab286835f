"""The batch signature: what a compiled step was traced with, and the check that a call
matches it.

A schedule (and a plan) holds for the traced graph alone: another shape, dtype or device
of a tensor, a module switched between ``train()`` and ``eval()``, or parameters frozen
or unfrozen since the trace would make PyTorch run another step. ``training_step()`` and
``checkpointed()`` refuse such a call with a :class:`~poet_compiler.errors.BatchError`
before anything runs, each naming what it runs (the schedule, the plan).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from poet_compiler.errors import BatchError


def describe(t: torch.Tensor) -> str:
    """A tensor's shape, dtype and device, as a refusal names them."""
    return f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')} on {t.device}"


def _training_flags(module: torch.nn.Module) -> tuple[bool, ...]:
    return tuple(m.training for m in module.modules())


def _trainable(module: torch.nn.Module) -> tuple[str, ...]:
    return tuple(n for n, p in module.named_parameters() if p.requires_grad)


@dataclass(frozen=True)
class BatchSignature:
    """The module's train/eval flags and trainable parameters at the trace; the example
    tensors are given to :meth:`check_tensors` beside the call's."""

    flags: tuple[bool, ...]
    trainable: tuple[str, ...]

    @classmethod
    def of(cls, module: torch.nn.Module) -> BatchSignature:
        return cls(_training_flags(module), _trainable(module))

    @staticmethod
    def check_tensors(pairs: Sequence[tuple[str, Any, torch.Tensor]], runs: str) -> None:
        """Each ``(what, got, traced)``: ``got`` a tensor like the traced one, else a
        BatchError saying that ``runs`` (the schedule, the plan) was compiled for it."""
        for what, got, ref in pairs:
            if not isinstance(got, torch.Tensor):
                raise BatchError(f"{what}: expected a tensor, got {type(got).__name__}")
            if (got.shape, got.dtype, got.device) != (ref.shape, ref.dtype, ref.device):
                raise BatchError(f"{what} is {describe(got)} but {runs} was compiled for {describe(ref)}; "
                                 "compile again with an example batch like this one")

    def check_module(self, module: torch.nn.Module, *, mode: str, gradients: str) -> None:
        """The module in its traced mode with its traced trainable parameters, else a
        BatchError ending in ``mode`` or ``gradients`` (why it matters to the caller)."""
        if _training_flags(module) != self.flags:
            raise BatchError(f"the module was switched between train() and eval() since it was compiled; {mode}")
        trainable = _trainable(module)
        if trainable != self.trainable:
            changed = sorted(set(trainable) ^ set(self.trainable))
            raise BatchError(f"requires_grad changed since the module was compiled (e.g. {changed[0]!r}); {gradients}")


__all__ = ["BatchSignature", "describe"]
