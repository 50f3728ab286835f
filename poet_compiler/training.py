"""``Compilation.training_step()``: the schedule as a drop-in for ``loss.backward()``.

A :class:`TrainingStep` wraps the executor (:class:`~poet_compiler.torch_exec.executor.ScheduledStep`)
for a user's training loop::

    step = compilation.training_step()
    for x, y in batches:
        opt.zero_grad()
        loss = step(x, y)     # forward + backward, following the schedule
        opt.step()

Each call runs the Program on the module's *current* parameters, accumulates ``.grad``
on them exactly as ``loss.backward()`` does (created when ``None``, added to otherwise),
writes the buffer updates (BatchNorm running statistics) back into the module and
returns the detached loss. The schedule was solved for one set of shapes: a batch of
another shape, dtype or device — or a module switched between ``train()`` and ``eval()``,
or with parameters frozen or unfrozen, since it was traced — is refused with a :class:`~poet_compiler.errors.BatchError`
before anything runs, because the traced graph (and so the schedule) would not be the
step PyTorch runs for it.

Compiled with an ``optimizer`` (docs/training.md), each call is the whole training step,
``loss.backward(); opt.step()`` included: the loop is ``for x, y in batches: step(x, y)``,
the parameters take their new values, and the optimizer state is :attr:`TrainingStep.optimizer_state`.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from poet_compiler.errors import BatchError
from poet_compiler.torch_exec.batch import BatchSignature

if TYPE_CHECKING:
    from poet_compiler.frontends.torch.traced import TracedModel
    from poet_compiler.schedule.program import Program
    from poet_compiler.torch_exec.executor import StepStats


class TrainingStep:
    """Callable ``step(*inputs, target) -> loss`` that trains ``traced.module`` by ``program``.

    ``page_file``/``page_dir``: where paged tensors go (default: a temporary file, deleted
    by :meth:`close` or when the step is garbage-collected).
    """

    def __init__(self, traced: TracedModel, program: Program, *,
                 page_file: str | Path | None = None, page_dir: str | Path | None = None) -> None:
        from poet_compiler.torch_exec.executor import ScheduledStep

        self.traced = traced
        self.module = traced.module
        self._inputs = tuple(traced.example_inputs)
        self._target = traced.target
        self._signature = BatchSignature.of(traced.module)
        self._step = ScheduledStep(traced, program, page_file=page_file, page_dir=page_dir)
        # Delete the temporary page file even if the user never calls close().
        self._finalizer = weakref.finalize(self, self._step.close)

    @property
    def optimizer_state(self) -> dict[str, torch.Tensor]:
        """With an optimizer compiled into the step: its state, ``{"<param>@<name>": tensor}``
        (``momentum_buffer``; ``exp_avg``, ``exp_avg_sq``, ``step``); empty otherwise."""
        return self.traced.opt_state

    @property
    def stats(self) -> StepStats | None:
        """Measurements of the last call: peak live activation bytes, paging traffic, time."""
        return self._step.last

    def check_batch(self, inputs: Sequence[Any], target: Any) -> None:
        """Raise BatchError unless ``inputs``/``target`` match what the schedule was solved for."""
        want = self._inputs
        if len(inputs) != len(want):
            raise BatchError(f"the step takes {len(want)} input tensor(s) and a target, got {len(inputs)} input(s)")
        named = [(f"input {k}", got, ref) for k, (got, ref) in enumerate(zip(inputs, want))]
        self._signature.check_tensors([*named, ("target", target, self._target)], "the schedule")
        self._signature.check_module(
            self.module, mode="the schedule is for the mode it was traced in",
            gradients="the schedule computes the gradients of the parameters it was traced with")

    def __call__(self, *args: Any) -> torch.Tensor:
        """``step(x, y)`` (or ``step(x1, x2, ..., y)``): one scheduled forward + backward."""
        if len(args) < 2:
            raise BatchError(f"call the step as step(*inputs, target), got {len(args)} argument(s)")
        *inputs, target = args
        self.check_batch(inputs, target)
        return self._step.step(tuple(inputs), target)

    def close(self) -> None:
        """Close (and, if temporary, delete) the page file."""
        self._finalizer()

    def __enter__(self) -> TrainingStep:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["TrainingStep"]
