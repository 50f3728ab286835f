"""Shared transformer pieces for the BERT and GPT-2 families.

Attention is written out (matmul, softmax, matmul) rather than calling
``scaled_dot_product_attention``, so the traced graph shows the attention matrix as
its own activation, as in the papers POET is compared against. No dropout.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class SelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, causal: bool, max_len: int) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden size {hidden} is not divisible by {heads} heads")
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.causal = causal
        if causal:
            # A non-persistent buffer: the frontend sees it as a graph input, not an op.
            mask = torch.full((max_len, max_len), float("-inf")).triu(1)
            self.register_buffer("mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape
        d = h // self.heads
        q, k, v = self.qkv(x).split(h, dim=2)
        q = q.reshape(b, t, self.heads, d).transpose(1, 2)
        k = k.reshape(b, t, self.heads, d).transpose(1, 2)
        v = v.reshape(b, t, self.heads, d).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        if self.causal:
            scores = scores + self.mask[:t, :t]
        out = torch.softmax(scores, dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, t, h))


class MLPBlock(nn.Module):
    def __init__(self, hidden: int, approximate: str) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.act = nn.GELU(approximate=approximate)
        self.fc2 = nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class PostNormLayer(nn.Module):
    """BERT encoder layer: x = LN(x + attn(x)); x = LN(x + mlp(x))."""

    def __init__(self, hidden: int, heads: int, max_len: int) -> None:
        super().__init__()
        self.attn = SelfAttention(hidden, heads, causal=False, max_len=max_len)
        self.ln1 = nn.LayerNorm(hidden, eps=1e-12)
        self.mlp = MLPBlock(hidden, "none")
        self.ln2 = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.mlp(x))


class PreNormLayer(nn.Module):
    """GPT-2 block: x = x + attn(LN(x)); x = x + mlp(LN(x))."""

    def __init__(self, hidden: int, heads: int, max_len: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(hidden)
        self.attn = SelfAttention(hidden, heads, causal=True, max_len=max_len)
        self.ln2 = nn.LayerNorm(hidden)
        self.mlp = MLPBlock(hidden, "tanh")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def init_weights(module: nn.Module, std: float = 0.02) -> None:
    """BERT/GPT-2 initialisation: N(0, 0.02) weights, zero biases, unit LayerNorm."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, std)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
