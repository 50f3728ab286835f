"""GPT-2 large (Radford et al. 2019): 36 layers, hidden 1280, 20 heads, vocabulary 50257.

``gpt2_large`` is the published configuration at sequence length 512 (the paper's 1024
is not needed for the schedule's shape: every layer is the same ops either way), batch
1: 773,374,720 parameters (774,030,080 with the 1,024 position embeddings) and, at op
level, 1,567 nodes in the joint forward+backward graph (618 forward, 3 loss, 946
backward; checkpoint-all peak 2.45 GiB). Why 512 and not 128: at 128 the activations
are so small that the tied embedding's gradient sum (three 245 MiB tensors) *is* the
checkpoint-all peak (736 MiB), so every budget below it is infeasible by one node's
working set and the model tests nothing but that cheap proof; at 512 the activations
dominate (50 % is 1.23 GiB, within the a72's 2 GiB) and the budget is a real trade-off. It is built and traced on PyTorch's ``meta`` device: the graph (shapes, dtypes,
bytes, FLOPs) without allocating or initialising a single weight, so ``poetc trace`` /
``poetc compile`` take seconds and a few hundred MB instead of 3.1 GB of float32
weights and a minute of initialisation. A meta model has no values, so anything that
runs the step for real (``poetc verify``, ``training_step()``, ``emit-c``, ``export``)
refuses it with one line.

``gpt2_large_mini`` is the same 36-layer decoder at hidden 64 (4 heads of 16), vocabulary
512, sequence 128, batch 1, with real seeded weights: its op-level graph has the same
nodes, ops and edges as ``gpt2_large``'s (only the byte counts differ;
``tests/models/test_gpt2_large.py``), so a schedule's recompute/paging pattern for the
large model is checked bitwise against autograd on it (``poetc verify gpt2_large_mini``).
"""

from __future__ import annotations

import torch
from torch import nn

from models.gpt2 import GPT2, GPT2Config
from models.spec import ModelSpec, cross_entropy, register

LARGE = GPT2Config(layers=36, hidden=1280, heads=20, seq_len=512, vocab=50257)
MINI = GPT2Config(layers=36, hidden=64, heads=4, seq_len=128, vocab=512)


def _meta_gpt2(cfg: GPT2Config) -> nn.Module:
    """The model on the meta device: parameters and buffers with shapes, no storage."""
    with torch.device("meta"):
        module = GPT2(cfg)
    module.poet_weights_from = "gpt2_large_mini"  # what require_weights() suggests instead
    return module


def _meta_tokens(cfg: GPT2Config):  # noqa: ANN202 - a make_inputs/make_target pair
    def inputs(batch: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        return (torch.empty((batch, cfg.seq_len), dtype=torch.long, device="meta"),)

    def target(batch: int, gen: torch.Generator) -> torch.Tensor:
        return torch.empty((batch, cfg.seq_len), dtype=torch.long, device="meta")

    return inputs, target


def _tokens(cfg: GPT2Config):  # noqa: ANN202
    def inputs(batch: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        return (torch.randint(0, cfg.vocab, (batch, cfg.seq_len), generator=gen),)

    def target(batch: int, gen: torch.Generator) -> torch.Tensor:
        return torch.randint(0, cfg.vocab, (batch, cfg.seq_len), generator=gen)

    return inputs, target


_large_inputs, _large_target = _meta_tokens(LARGE)
register(ModelSpec(
    name="gpt2_large",
    description="GPT-2 large (36 layers, hidden 1280, 20 heads, vocab 50257), seq 512, LM loss; "
                "graph only (meta device, no weights): run it as gpt2_large_mini",
    factory=lambda: _meta_gpt2(LARGE), make_inputs=_large_inputs, make_target=_large_target,
    default_batch=1, loss=cross_entropy))

_mini_inputs, _mini_target = _tokens(MINI)
register(ModelSpec(
    name="gpt2_large_mini",
    description="gpt2_large's 36-layer graph at hidden 64 (4 heads), vocab 512, seq 128, LM loss; "
                "real weights, for verify",
    factory=lambda: GPT2(MINI), make_inputs=_mini_inputs, make_target=_mini_target,
    default_batch=1, loss=cross_entropy))
