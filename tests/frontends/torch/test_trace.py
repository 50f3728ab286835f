"""Torch frontend: the traced graph reproduces autograd bitwise and tells the truth
about saved activations."""

from __future__ import annotations

import pytest
import torch

import models
from poet_compiler.errors import FrontendError
from poet_compiler.frontends.torch import trace_module

SMALL = ["cifar_cnn_tiny", "kws_dscnn", "mlp", "resnet18_cifar", "bert_tiny", "gpt2_tiny"]


def _trace(name: str, batch: int | None = 2):
    spec = models.get(name)
    return spec, trace_module(spec.build(), spec.example_inputs(batch), spec.target(batch), spec.loss_fn, name=name)


@pytest.mark.parametrize("name", SMALL)
def test_reference_run_is_bitwise_equal_to_autograd(name: str) -> None:
    spec, tm = _trace(name)
    loss, grads = tm.run_reference()
    model = spec.build()
    ref = spec.loss_fn(model(*spec.example_inputs(2)), spec.target(2))
    ref.backward()
    assert torch.equal(loss, ref.detach())
    named = dict(model.named_parameters())
    assert set(grads) == set(named)
    for k, g in grads.items():
        assert torch.equal(g, named[k].grad), k


def _saved_bytes(spec, batch: int) -> int:
    """Bytes autograd saves in a plain forward, deduplicated by storage; parameters,
    buffers and the batch itself excluded."""
    model = spec.build()
    inputs, target = spec.example_inputs(batch), spec.target(batch)
    exclude = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers(), *inputs, target]}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        if s.data_ptr() not in exclude and s.nbytes() > 0:
            seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        spec.loss_fn(model(*inputs), target)
    return sum(seen.values())


@pytest.mark.parametrize("name", ["cifar_cnn_tiny", "mlp", "resnet18_cifar", "gpt2_tiny"])
def test_backward_reads_exactly_the_saved_activations(name: str) -> None:
    spec, tm = _trace(name)
    g = tm.graph
    # ones_like(loss) seeds the backward: it reads the loss for its shape only.
    read = {i for n in g.nodes if n.kind == "backward" and n.op != "aten.ones_like"
            for i in n.inputs if g.nodes[i].kind != "backward"}
    graph_bytes = 0
    for i in read:
        # An op node keeps its secondary outputs alongside the primary one and a select
        # node re-references them (a deliberate, bounded over-estimate): count them once.
        selects = [c for c in g.consumers[i] if g.nodes[c].op == "getitem"]
        graph_bytes += g.nodes[i].output_bytes - sum(g.nodes[c].output_bytes for c in selects)
    assert graph_bytes == _saved_bytes(spec, 2)


def test_nodes_have_signature_provenance_and_fx_lists() -> None:
    _, tm = _trace("cifar_cnn_tiny")
    conv = tm.graph.nodes[0]
    assert conv.op == "aten.convolution" and conv.op_class == "conv" and conv.kind == "forward"
    assert conv.extra["signature"].startswith("aten.convolution(f32[2,3,32,32],f32[8,3,3,3],")
    assert conv.extra["provenance"] == "features.0"
    assert conv.flops == 2 * 2 * 8 * 32 * 32 * 27
    assert conv.output_bytes == 2 * 8 * 32 * 32 * 4
    kinds = [n.kind for n in tm.graph.nodes]
    assert kinds.index("loss") > kinds.index("forward") and kinds.index("backward") > kinds.index("loss")
    # Every FX op outside the prelude belongs to exactly one scheduling node.
    owned = [f for fx in tm.node_fx for f in fx]
    assert len(owned) == len(set(owned))
    ops = {n.name for n in tm.gm.graph.nodes if n.op == "call_function"}
    assert ops == set(owned) | set(tm.prelude_fx)
    # Buffer updates are explicit outputs: BN running stats and batch counters.
    assert "features.1.running_mean" in tm.update_names
    upd = tm.buffer_updates()
    assert int(upd["features.1.num_batches_tracked"]) == 1


def test_batchnorm_multi_output_split_into_op_and_select_node() -> None:
    _, tm = _trace("cifar_cnn_tiny")
    g = tm.graph
    bn = next(n for n in g.nodes if n.op.endswith("_native_batch_norm_legit_functional"))
    sel = g.nodes[bn.id + 1]
    assert sel.op == "getitem" and sel.inputs == (bn.id,) and sel.output_bytes == 2 * 8 * 4
    assert all(g.nodes[c].kind == "backward" for c in g.consumers[sel.id])
    assert all(g.nodes[c].kind == "forward" for c in g.consumers[bn.id])


class _NoParams(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class _Branchy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # data-dependent control flow cannot be traced
            return self.lin(x)
        return -self.lin(x)


def test_bad_inputs_raise_frontend_error() -> None:
    x, t = torch.randn(2, 4), torch.randn(2, 4)
    mse = torch.nn.functional.mse_loss
    with pytest.raises(FrontendError, match="no trainable parameters"):
        trace_module(_NoParams(), (x,), t, mse, name="np")
    with pytest.raises(FrontendError, match="scalar"):
        trace_module(torch.nn.Linear(4, 4), (x,), t, lambda o, tt: o - tt, name="vec")
    with pytest.raises(FrontendError, match="tracing failed"):
        trace_module(_Branchy(), (x,), t, mse, name="branchy")
    with pytest.raises(FrontendError, match="granularity"):
        trace_module(torch.nn.Linear(4, 4), (x,), t, mse, name="g", granularity="block")
