"""Hugging Face models as users train them: GPT-2, BERT and DistilBERT built from
``transformers`` configs (small, so that a trace takes seconds), with their default
dropout (0.1) and attention implementation, in train mode, and the loss a user computes
from their outputs. ``build(name)`` returns ``(model, input_ids, target, loss_fn)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

VOCAB, SEQ, BATCH = 128, 16, 4
NAMES = ("gpt2", "bert", "distilbert")


def _lm_loss(out: Any, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out.logits.flatten(0, 1), y.flatten())


def _class_loss(out: Any, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out.logits, y)


def build(name: str) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor, Callable[[Any, torch.Tensor], torch.Tensor]]:
    import transformers as tf

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    if name == "gpt2":
        gpt2 = tf.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=2, n_head=2,
                             bos_token_id=0, eos_token_id=0)
        return tf.GPT2LMHeadModel(gpt2).train(), ids, torch.randint(0, VOCAB, (BATCH, SEQ), generator=g), _lm_loss
    labels = torch.randint(0, 2, (BATCH,), generator=g)
    if name == "bert":
        bert = tf.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                             intermediate_size=64, max_position_embeddings=SEQ)
        return tf.BertForSequenceClassification(bert).train(), ids, labels, _class_loss
    if name == "distilbert":
        distil = tf.DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                     max_position_embeddings=SEQ)
        return tf.DistilBertForSequenceClassification(distil).train(), ids, labels, _class_loss
    raise ValueError(f"unknown model {name!r}; one of {', '.join(NAMES)}")
