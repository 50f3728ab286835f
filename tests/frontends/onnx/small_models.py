"""Small stand-ins for the zoo's model families, used by the ONNX frontend tests.

They exercise the same layer types as the zoo (conv+BN+residual, depthwise conv with
ReLU6, max/avg pooling, MLP, BERT- and GPT-style transformer blocks with embeddings,
LayerNorm, GELU, attention softmax and a causal mask) at sizes that export and run in
well under a second each.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class _Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.short = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.b1(self.c1(x)))
        return F.relu(self.b2(self.c2(y)) + self.short(x))


class TinyResNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.l1 = _Block(8, 8, 1)
        self.l2 = _Block(8, 16, 2)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.l2(self.l1(self.stem(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class TinyMobile(nn.Module):
    """Inverted residual with depthwise conv and ReLU6, as in MobileNetV2."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU6())
        self.expand = nn.Sequential(nn.Conv2d(8, 16, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6())
        self.dw = nn.Sequential(nn.Conv2d(16, 16, 3, 1, 1, groups=16, bias=False), nn.BatchNorm2d(16), nn.ReLU6())
        self.project = nn.Sequential(nn.Conv2d(16, 8, 1, bias=False), nn.BatchNorm2d(8))
        self.head = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = x + self.project(self.dw(self.expand(x)))
        return self.head(x.mean([2, 3]))


class TinyVGG(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AvgPool2d(2),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(16 * 2 * 2, 32), nn.ReLU(), nn.Linear(32, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class TinyKWS(nn.Module):
    """DS-CNN keyword spotter shape: non-square kernels and a global average pool."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, 8, (10, 4), (2, 2), (5, 1), bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.dw = nn.Sequential(nn.Conv2d(8, 8, 3, 1, 1, groups=8, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.pw = nn.Sequential(nn.Conv2d(8, 8, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.pw(self.dw(self.conv(x)))).flatten(1))


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(20, 32), nn.Tanh(), nn.Linear(32, 32), nn.Sigmoid(), nn.Linear(32, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class _Attention(nn.Module):
    def __init__(self, d: int, heads: int, causal: bool) -> None:
        super().__init__()
        self.h, self.causal = heads, causal
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.h, d // self.h).transpose(1, 2) for t in (q, k, v))
        att = q @ k.transpose(-2, -1) / math.sqrt(d // self.h)
        if self.causal:
            mask = torch.tril(torch.ones(s, s, dtype=torch.bool))
            att = att.masked_fill(~mask, float("-inf"))
        y = att.softmax(-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, s, d))


class TinyTransformer(nn.Module):
    """BERT-like (post-LN, GELU erf) or GPT-like (pre-LN, tanh GELU, causal mask)."""

    def __init__(self, causal: bool, vocab: int = 50, d: int = 16, seq: int = 8, classes: int = 3) -> None:
        super().__init__()
        self.causal = causal
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.att = _Attention(d, 2, causal)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU("tanh" if causal else "none"), nn.Linear(4 * d, d))
        self.head = nn.Linear(d, vocab if causal else classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1])
        x = self.tok(ids) + self.pos(pos)
        if self.causal:
            x = x + self.att(self.ln1(x))
            x = x + self.ff(self.ln2(x))
            return self.head(x)
        x = self.ln1(x + self.att(x))
        x = self.ln2(x + self.ff(x))
        return self.head(x[:, 0])


def build(name: str) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model ``name`` (seeded init) and a deterministic example batch."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    if name == "resnet":
        return TinyResNet(), (torch.randn(2, 3, 8, 8, generator=g),)
    if name == "mobile":
        return TinyMobile(), (torch.randn(2, 3, 8, 8, generator=g),)
    if name == "vgg":
        return TinyVGG(), (torch.randn(2, 3, 8, 8, generator=g),)
    if name == "kws":
        return TinyKWS(), (torch.randn(2, 1, 49, 10, generator=g),)
    if name == "mlp":
        return MLP(), (torch.randn(4, 20, generator=g),)
    if name in ("bert", "gpt"):
        return TinyTransformer(causal=name == "gpt"), (torch.randint(0, 50, (2, 8), generator=g),)
    raise KeyError(name)


NAMES = ("resnet", "mobile", "vgg", "kws", "mlp", "bert", "gpt")
