"""Models with dropout in train mode, as users train them: an MLP and a transformer layer
(and the transformer without dropout, whose ReLU a schedule recomputes under Inductor).

``gradients(module, step, x, y, seed)`` runs one step under ``torch.manual_seed(seed)``
and returns the gradients by parameter name, so that runs can be compared bitwise.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class DropoutMLP(nn.Module):
    """``Linear -> GELU -> Dropout(0.1)`` three times, then a head."""

    def __init__(self, width: int = 256, inputs: int = 64, classes: int = 10) -> None:
        super().__init__()
        self.l = nn.ModuleList([nn.Linear(inputs if k == 0 else width, width) for k in range(3)])
        self.d = nn.ModuleList([nn.Dropout(0.1) for _ in range(3)])
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for linear, drop in zip(self.l, self.d):
            x = drop(F.gelu(linear(x)))
        return self.head(x)


class DropoutTransformer(nn.Module):
    """A linear stem, ``layers`` of ``nn.TransformerEncoderLayer(dropout=0.1)`` (batch first:
    its attention output is not contiguous where its dropout draws; its default ReLU
    feed-forward), a mean-pooled head."""

    def __init__(self, d_model: int = 32, classes: int = 10, dropout: float = 0.1, layers: int = 1) -> None:
        super().__init__()
        self.stem = nn.Linear(16, d_model)
        layer = nn.TransformerEncoderLayer(d_model, 4, 2 * d_model, dropout=dropout, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False) if layers > 1 else layer
        self.head = nn.Linear(d_model, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.enc(self.stem(x)).mean(1))


def mlp_case() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    return DropoutMLP().train(), torch.randn(64, 64, generator=g), torch.randint(0, 10, (64,), generator=g)


def transformer_case() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    return (DropoutTransformer().train(), torch.randn(8, 16, 16, generator=g),
            torch.randint(0, 10, (8,), generator=g))


def relu_transformer_case() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """Two transformer layers without dropout: at 50 % on ``a72`` the schedule recomputes a
    ``native_layer_norm -> addmm -> relu`` chain."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    return (DropoutTransformer(dropout=0.0, layers=2).train(), torch.randn(8, 16, 16, generator=g),
            torch.randint(0, 10, (8,), generator=g))


def gradients(module: nn.Module, step: Callable[[], Any], seed: int = 1) -> dict[str, torch.Tensor]:
    """``step()`` (one forward and backward) under ``manual_seed(seed)``: ``module``'s gradients."""
    module.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    step()
    out = {n: p.grad.detach().clone() for n, p in module.named_parameters() if p.grad is not None}
    module.zero_grad(set_to_none=True)
    return out


def autograd_gradients(module: nn.Module, x: torch.Tensor, y: torch.Tensor, seed: int = 1) -> dict[str, torch.Tensor]:
    """Plain ``loss.backward()`` on a copy of ``module``."""
    twin = copy.deepcopy(module)
    return gradients(twin, lambda: F.cross_entropy(twin(x), y).backward(), seed)


def differing(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> list[str]:
    """Names whose gradients are not bitwise equal (or missing on one side)."""
    return sorted(n for n in a.keys() | b.keys() if n not in a or n not in b or not torch.equal(a[n], b[n]))
