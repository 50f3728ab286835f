"""The model zoo: deterministic, dropout-free, and every model traces."""

from __future__ import annotations

import pytest
import torch

import models
from poet_compiler.frontends import trace_zoo

BIG = {"bert_base", "gpt2", "gpt2_large", "gpt2_large_mini", "resnet18"}  # gpt2_large*: test_gpt2_large.py


def test_registry_lists_every_family() -> None:
    assert {"resnet18_cifar", "resnet18", "vgg16_cifar", "mobilenetv2", "bert_tiny", "bert_base", "gpt2",
            "gpt2_tiny", "mlp", "kws_dscnn", "cifar_cnn_tiny"} <= set(models.names())
    with pytest.raises(KeyError, match="known models"):
        models.get("nope")


@pytest.mark.parametrize("name", sorted(set(models.names()) - BIG))
def test_deterministic_and_no_dropout(name: str) -> None:
    spec = models.get(name)
    a, b = spec.build(), spec.build()
    for (ka, pa), (kb, pb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(pa, pb)
    assert all(torch.equal(x, y) for x, y in zip(spec.example_inputs(2), spec.example_inputs(2)))
    assert torch.equal(spec.target(2), spec.target(2))
    assert not any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in a.modules())
    loss = spec.loss_fn(a(*spec.example_inputs(2)), spec.target(2))
    assert loss.dim() == 0 and torch.isfinite(loss)


@pytest.mark.parametrize("name", sorted(set(models.names()) - BIG))
def test_every_small_model_traces(name: str) -> None:
    g = trace_zoo(name, batch=2).graph
    assert g.count("forward") > 0 and g.count("loss") > 0 and g.count("backward") > 0
    assert g.sinks  # loss and gradients


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BIG))
def test_big_models_trace(name: str) -> None:
    g = trace_zoo(name, batch=1).graph
    assert g.count("backward") > 100 or name == "resnet18"


def test_mcu_models_need_remat_or_paging_in_256k() -> None:
    for name in ("kws_dscnn", "cifar_cnn_tiny"):
        g = trace_zoo(name).graph
        saved = {i for n in g.nodes if n.kind == "backward" for i in n.inputs if g.nodes[i].kind != "backward"}
        peak = sum(g.nodes[i].output_bytes for i in saved)
        assert 256 * 1024 < peak < 16 * 256 * 1024, (name, peak)
