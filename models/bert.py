"""BERT encoder (Devlin et al. 2019) with a sequence-classification head.

:class:`BertConfig` sets layers / hidden / heads / sequence length / vocabulary.
Registered: ``bert_tiny`` (2 layers, hidden 128, 2 heads, seq 64 -- the published
BERT-Tiny shape) and ``bert_base`` (12 layers, 768, 12 heads, seq 128). The loss is
cross-entropy of a 2-class head on the first ([CLS]) token; no dropout.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from models.spec import ModelSpec, class_targets, register
from models.transformer import init_weights, PostNormLayer


@dataclass(frozen=True)
class BertConfig:
    layers: int = 12
    hidden: int = 768
    heads: int = 12
    seq_len: int = 128
    vocab: int = 30522
    classes: int = 2


class Bert(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.hidden)
        self.pos = nn.Embedding(cfg.seq_len, cfg.hidden)
        self.ln = nn.LayerNorm(cfg.hidden, eps=1e-12)
        self.layers = nn.ModuleList(PostNormLayer(cfg.hidden, cfg.heads, cfg.seq_len) for _ in range(cfg.layers))
        self.pooler = nn.Linear(cfg.hidden, cfg.hidden)
        self.head = nn.Linear(cfg.hidden, cfg.classes)
        self.register_buffer("positions", torch.arange(cfg.seq_len), persistent=False)
        init_weights(self)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.ln(self.tok(ids) + self.pos(self.positions[: ids.shape[1]]))
        for layer in self.layers:
            x = layer(x)
        return self.head(torch.tanh(self.pooler(x[:, 0])))


def bert_spec(name: str, cfg: BertConfig, batch: int, description: str) -> ModelSpec:
    def inputs(b: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        return (torch.randint(0, cfg.vocab, (b, cfg.seq_len), generator=gen),)

    return ModelSpec(name=name, description=description, factory=lambda: Bert(cfg),
                     make_inputs=inputs, make_target=class_targets(cfg.classes), default_batch=batch)


register(bert_spec("bert_tiny", BertConfig(layers=2, hidden=128, heads=2, seq_len=64), 8,
                   "BERT-Tiny encoder (2 layers, hidden 128, 2 heads, seq 64) + 2-class head"))
register(bert_spec("bert_base", BertConfig(), 2,
                   "BERT-Base encoder (12 layers, hidden 768, 12 heads, seq 128) + 2-class head"))
