"""A plain multilayer perceptron on flattened 28x28 inputs (MNIST-sized), 10 classes."""

from __future__ import annotations

import torch
from torch import nn

from models.spec import ModelSpec, class_targets, register


class MLP(nn.Module):
    def __init__(self, sizes: tuple[int, ...] = (784, 512, 256, 10)) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(nn.Linear(a, b))
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _inputs(batch: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    return (torch.randn(batch, 784, generator=gen),)


register(ModelSpec(
    name="mlp",
    description="MLP 784-512-256-10 with ReLU",
    factory=MLP,
    make_inputs=_inputs,
    make_target=class_targets(10),
    default_batch=32,
))
