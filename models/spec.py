"""The ModelSpec record and the registry behind :func:`models.get` / :func:`models.names`.

A spec bundles everything needed to trace one training step of a model: how to build
it (deterministically seeded), a deterministic example batch and target, and the loss.
Nothing is downloaded; every model is plain PyTorch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

_REGISTRY: dict[str, "ModelSpec"] = {}


def seeded(seed: int) -> torch.Generator:
    """A private CPU generator, so that building a model never disturbs global RNG state."""
    return torch.Generator().manual_seed(seed)


def build_seeded(factory: Callable[[], nn.Module], seed: int = 0) -> nn.Module:
    """Run ``factory`` with the global RNG forked and seeded: same seed, same weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = factory()
    return module.train()


def cross_entropy(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy; sequence outputs ``[B, T, V]`` are flattened to tokens."""
    if output.dim() == 3:
        return nn.functional.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))
    return nn.functional.cross_entropy(output, target)


@dataclass(frozen=True)
class ModelSpec:
    """One zoo model.

    ``make_inputs(batch, generator)`` and ``make_target(batch, generator)`` produce the
    example batch; :meth:`example_inputs` and :meth:`target` seed them so every call
    returns the same values.
    """

    name: str
    description: str
    factory: Callable[[], nn.Module]
    make_inputs: Callable[[int, torch.Generator], tuple[torch.Tensor, ...]]
    make_target: Callable[[int, torch.Generator], torch.Tensor]
    default_batch: int
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = cross_entropy
    seed: int = 0

    def build(self) -> nn.Module:
        """A freshly initialised model in training mode; same weights on every call."""
        return build_seeded(self.factory, self.seed)

    def example_inputs(self, batch: int | None = None) -> tuple[torch.Tensor, ...]:
        return self.make_inputs(self._batch(batch), seeded(self.seed + 1))

    def target(self, batch: int | None = None) -> torch.Tensor:
        return self.make_target(self._batch(batch), seeded(self.seed + 2))

    def loss_fn(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.loss(output, target)

    def _batch(self, batch: int | None) -> int:
        b = self.default_batch if batch is None else int(batch)
        if b < 1:
            raise ValueError(f"{self.name}: batch must be >= 1, got {batch}")
        return b


def register(spec: ModelSpec) -> ModelSpec:
    if spec.name in _REGISTRY:
        raise ValueError(f"model {spec.name!r} registered twice")
    _REGISTRY[spec.name] = spec
    return spec


def image_inputs(channels: int, height: int, width: int) -> Callable[[int, torch.Generator], tuple[torch.Tensor, ...]]:
    def make(batch: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        return (torch.randn(batch, channels, height, width, generator=gen),)
    return make


def class_targets(classes: int) -> Callable[[int, torch.Generator], torch.Tensor]:
    def make(batch: int, gen: torch.Generator) -> torch.Tensor:
        return torch.randint(0, classes, (batch,), generator=gen)
    return make
