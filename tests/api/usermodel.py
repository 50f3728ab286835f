"""A user's own model, not in the zoo: conv + batch norm + residual + GELU/SiLU + linear."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from poet_compiler.errors import BatchError


class Block(nn.Module):
    """conv-BN-GELU-conv-BN plus the identity, then SiLU (a ResNet basic block's shape)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.gelu(self.bn1(self.conv1(x)))
        return nn.functional.silu(self.bn2(self.conv2(y)) + x)


class TinyResNet(nn.Module):
    def __init__(self, channels: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.bn = nn.BatchNorm2d(channels)
        self.blocks = nn.Sequential(Block(channels), Block(channels))
        self.head = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.silu(self.bn(self.stem(x)))
        x = self.blocks(x)
        return self.head(x.mean(dim=(2, 3)))


def batch(seed: int, n: int = 4, size: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, size, size, generator=g), torch.randint(0, 10, (n,), generator=g)


def refusal(model: TinyResNet, which: str, call: Callable[..., object], *args: object) -> str:
    """The ``BatchError`` message ``call(*args)`` raises, with ``model`` in eval mode
    (``which == "mode"``) or its head's bias frozen (``"frozen"``) meanwhile; the model is
    trained and unfrozen again after."""
    try:
        if which == "mode":
            model.eval()
        if which == "frozen":
            model.head.bias.requires_grad_(False)
        with pytest.raises(BatchError) as info:
            call(*args)
    finally:
        model.train()
        model.head.bias.requires_grad_(True)
    return str(info.value)
