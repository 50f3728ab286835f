"""GPT-2 decoder (Radford et al. 2019) with a tied language-model head.

``gpt2`` is the small published configuration (12 layers, hidden 768, 12 heads,
vocabulary 50257) at sequence length 128; ``gpt2_tiny`` is 2 layers, hidden 128,
2 heads, vocabulary 512, seq 64. The loss is next-token cross-entropy; no dropout.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from models.spec import ModelSpec, cross_entropy, register
from models.transformer import init_weights, PreNormLayer


@dataclass(frozen=True)
class GPT2Config:
    layers: int = 12
    hidden: int = 768
    heads: int = 12
    seq_len: int = 128
    vocab: int = 50257


class GPT2(nn.Module):
    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab, cfg.hidden)
        self.wpe = nn.Embedding(cfg.seq_len, cfg.hidden)
        self.blocks = nn.ModuleList(PreNormLayer(cfg.hidden, cfg.heads, cfg.seq_len) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.hidden)
        self.register_buffer("positions", torch.arange(cfg.seq_len), persistent=False)
        init_weights(self)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.wte(ids) + self.wpe(self.positions[: ids.shape[1]])
        for block in self.blocks:
            x = block(x)
        # Weight tying as in GPT-2: the LM head reuses the token embedding.
        return self.ln_f(x) @ self.wte.weight.t()


def gpt2_spec(name: str, cfg: GPT2Config, batch: int, description: str) -> ModelSpec:
    def inputs(b: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        return (torch.randint(0, cfg.vocab, (b, cfg.seq_len), generator=gen),)

    def target(b: int, gen: torch.Generator) -> torch.Tensor:
        return torch.randint(0, cfg.vocab, (b, cfg.seq_len), generator=gen)

    return ModelSpec(name=name, description=description, factory=lambda: GPT2(cfg),
                     make_inputs=inputs, make_target=target, default_batch=batch, loss=cross_entropy)


register(gpt2_spec("gpt2", GPT2Config(), 1,
                   "GPT-2 small (12 layers, hidden 768, 12 heads, vocab 50257), seq 128, LM loss"))
register(gpt2_spec("gpt2_tiny", GPT2Config(layers=2, hidden=128, heads=2, seq_len=64, vocab=512), 4,
                   "GPT-2 tiny (2 layers, hidden 128, 2 heads, vocab 512), seq 64, LM loss"))
