"""Torch frontend: FLOP counts and memory traffic of the lowered nodes, checked
against hand counts on small traced modules."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from poet_compiler.devices.cost_model import traffic_bytes
from poet_compiler.frontends.torch import trace_module
from poet_compiler.graph.ir import TrainingGraph


def _graph(model: nn.Module, x: torch.Tensor, target: torch.Tensor) -> TrainingGraph:
    return trace_module(model, (x,), target, nn.functional.mse_loss, name="t").graph


def _nodes(g: TrainingGraph, op: str) -> list:
    return [n for n in g.nodes if n.op == f"aten.{op}"]


class _Conv(nn.Module):
    def __init__(self, c_in: int, c_out: int, groups: int, stem: bool) -> None:
        super().__init__()
        # A stem conv in front so the tested conv's backward needs grad_input too.
        self.stem = nn.Conv2d(c_in, c_in, 1, bias=False) if stem else nn.Identity()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1, groups=groups, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(self.stem(x))


@pytest.mark.parametrize(("c_in", "c_out", "groups"), [(8, 8, 8), (8, 12, 4), (8, 6, 1)])
def test_conv_flops_count_groups_forward_and_backward(c_in: int, c_out: int, groups: int) -> None:
    n, h, w = 2, 6, 5
    g = _graph(_Conv(c_in, c_out, groups, stem=True), torch.randn(n, c_in, h, w), torch.randn(n, c_out, h, w))
    # Hand count: every output element is a dot product over (c_in / groups) * 3 * 3
    # inputs, one multiply and one add each.
    fwd = 2 * n * c_out * h * w * (c_in // groups) * 9
    stem_fwd = 2 * n * c_in * h * w * c_in
    fwd_nodes = sorted(x.flops for x in _nodes(g, "convolution"))
    assert fwd_nodes == sorted([stem_fwd, fwd])
    bwd = {x.flops for x in _nodes(g, "convolution_backward")}
    # grad_input and grad_weight of the 3x3 conv: the forward's multiply-adds each. The
    # stem (reading the batch) only needs grad_weight.
    assert bwd == {2 * fwd, stem_fwd}
    if groups == c_in:  # depthwise: torch.utils.flop_counter counted (c_in + 1) * fwd
        assert max(bwd) == 2 * n * h * w * c_in * 9 * 2


def test_conv_flops_strided_and_transposed() -> None:
    n = 2
    model = nn.Sequential(nn.Conv2d(4, 4, 1, bias=False),
                          nn.Conv2d(4, 8, 3, stride=2, padding=1, groups=2, bias=False),
                          nn.ConvTranspose2d(8, 4, 2, stride=2, groups=4, bias=False))
    g = _graph(model, torch.randn(n, 4, 8, 8), torch.randn(n, 4, 8, 8))
    strided = 2 * n * 8 * 4 * 4 * (4 // 2) * 9          # output 4x4
    transposed = 2 * n * (8 * (4 // 4) * 2 * 2) * 4 * 4  # weight [8, 1, 2, 2] over the 4x4 input
    pointwise = 2 * n * 4 * 8 * 8 * 4
    assert sorted(x.flops for x in _nodes(g, "convolution")) == sorted([pointwise, strided, transposed])
    assert sorted(x.flops for x in _nodes(g, "convolution_backward")) == sorted(
        [pointwise, 2 * strided, 2 * transposed])


class _BN(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 1, bias=False)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x))


def test_batchnorm_flops_and_select_node_traffic() -> None:
    n, c, h, w = 2, 8, 5, 3
    g = _graph(_BN(c), torch.randn(n, c, h, w), torch.randn(n, c, h, w))
    elems = n * c * h * w
    fwd = [x for x in g.nodes if x.op_class == "norm" and x.kind == "forward"]
    bwd = [x for x in g.nodes if x.op_class == "norm" and x.kind == "backward"]
    assert len(fwd) == 1 and len(bwd) == 1
    # Forward: mean 1 + centred variance 3 + normalize/scale/shift 2 per element.
    assert fwd[0].flops == 6 * elems
    # Backward: sum dy 1 + sum dy * (x - mean) 3 + dx 4 per element.
    assert bwd[0].flops == 8 * elems

    # The select node holding the saved mean/invstd copies its own 2 * c floats: it is
    # charged their read and write, not the batch norm's whole output buffer.
    sel = g.nodes[fwd[0].id + 1]
    assert sel.op == "getitem" and sel.inputs == (fwd[0].id,)
    assert sel.output_bytes == 2 * c * 4
    assert sel.bytes_accessed == 2 * sel.output_bytes
    assert traffic_bytes(g, sel) == 2 * 2 * c * 4
    assert g.nodes[fwd[0].id].output_bytes >= elems * 4 > traffic_bytes(g, sel)


def test_layernorm_flops() -> None:
    n, d = 4, 16
    model = nn.Sequential(nn.Linear(d, d), nn.LayerNorm(d))
    g = _graph(model, torch.randn(n, d), torch.randn(n, d))
    norm = {x.kind: x.flops for x in g.nodes if x.op_class == "norm"}
    assert norm == {"forward": 6 * n * d, "backward": 8 * n * d}
