"""The models of ``make bench-torch`` (bench/torch_bench.py, checkpoint_cost.py, op_timing.py):
two of the zoo, a U-Net and a ReLU transformer written here, with their example batches."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from poet_compiler.frontends import trace_zoo


class Stage(nn.Module):
    """conv-GroupNorm-SiLU twice (spatial dropout after, in the middle stage)."""

    def __init__(self, cin: int, cout: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm1 = nn.GroupNorm(4, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.norm2 = nn.GroupNorm(4, cout)
        self.drop = nn.Dropout2d(dropout) if dropout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.silu(self.norm1(self.conv1(x)))
        return self.drop(F.silu(self.norm2(self.conv2(x))))


class TinyUNet(nn.Module):
    """A two-level U-Net for per-pixel classes: long skips, concatenation, upsampling."""

    def __init__(self, c: int = 16, classes: int = 4) -> None:
        super().__init__()
        self.enc1, self.enc2 = Stage(3, c), Stage(c, 2 * c)
        self.mid = Stage(2 * c, 4 * c, dropout=0.1)
        self.dec2, self.dec1 = Stage(6 * c, 2 * c), Stage(3 * c, c)
        self.head = nn.Conv2d(c, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        m = self.mid(F.max_pool2d(e2, 2))
        d2 = self.dec2(torch.cat([F.interpolate(m, scale_factor=2.0), e2], 1))
        d1 = self.dec1(torch.cat([F.interpolate(d2, scale_factor=2.0), e1], 1))
        return self.head(d1)

class ReluTransformer(nn.Module):
    """A linear stem, four ``nn.TransformerEncoderLayer`` with its default ReLU feed-forward and
    no dropout, a mean-pooled head: under Inductor a recomputed ReLU's mask must be the
    forward's (BENCHMARKS.md, "PyTorch execution")."""

    def __init__(self, d_model: int = 64, layers: int = 4, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Linear(16, d_model)
        layer = nn.TransformerEncoderLayer(d_model, 4, 4 * d_model, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.enc(self.stem(x)).mean(1))


@dataclass
class Model:
    name: str
    module: nn.Module
    inputs: tuple[torch.Tensor, ...]
    target: torch.Tensor
    loss_fn: Callable[..., torch.Tensor]
    blocks: list[str]


def load(name: str, quick: bool) -> Model:
    if name == "unet":
        torch.manual_seed(0)
        g = torch.Generator().manual_seed(0)
        n, size = (2, 32) if quick else (4, 64)
        x = torch.randn(n, 3, size, size, generator=g)
        y = torch.randint(0, 4, (n, size, size), generator=g)
        return Model("unet (bench)", TinyUNet().train(), (x,), y, F.cross_entropy,
                     ["enc1", "enc2", "mid", "dec2", "dec1"])
    if name == "relu_transformer":
        torch.manual_seed(0)
        g = torch.Generator().manual_seed(0)
        x = torch.randn(8, 32, 16, generator=g)
        y = torch.randint(0, 10, (8,), generator=g)
        return Model("relu_transformer (bench)", ReluTransformer().train(), (x,), y, F.cross_entropy,
                     [f"enc.layers.{k}" for k in range(4)])
    batch = {"resnet18_cifar": 8, "gpt2_tiny": 16}[name]
    tm = trace_zoo(name, batch=batch)
    module = tm.module.train()
    if name == "resnet18_cifar":
        blocks = [f"layer{i}.{j}" for i in range(1, 5) for j in range(2)]
    else:
        blocks = [f"blocks.{k}" for k in range(len(module.blocks))]   # type: ignore[arg-type]
    return Model(name, module, tuple(tm.example_inputs), tm.target, tm.loss_fn, blocks)
