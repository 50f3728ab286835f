"""Random ops in the trace: which ops draw, a stash before each, draws in eager's order."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from poet_compiler.frontends.torch import trace_module
from poet_compiler.frontends.torch.rng import bernoulli_in_memory_order, draws, is_stash, replayed, stash_of
from poet_compiler.graph.coarsen import coarsen_traced
from poet_compiler.graph.ir import RNG_STATE_OP


@pytest.mark.parametrize("shape, perm", [((8, 32, 64), (1, 0, 2)), ((37, 100), (1, 0)), ((2, 3, 4, 5), (0, 2, 3, 1))])
def test_bernoulli_draws_in_the_memory_order_of_its_input(shape, perm) -> None:
    x = torch.empty(shape).permute(perm)          # a non-contiguous, dense layout
    torch.manual_seed(3)
    eager = torch.empty_like(x).bernoulli_(0.9)   # what F.dropout does in eager mode
    torch.manual_seed(3)
    functional = torch.ops.aten.bernoulli.p(torch.empty_like(x), 0.9)
    torch.manual_seed(3)
    ours = bernoulli_in_memory_order(torch.empty_like(x), 0.9)
    assert not torch.equal(eager, functional)    # why the trace needs it
    assert torch.equal(ours, eager)


def test_contiguous_input_is_traced_as_it_is() -> None:
    assert bernoulli_in_memory_order(torch.empty(4, 5), 0.5) is NotImplemented


def test_replayed_draws_the_stashed_numbers_and_leaves_the_stream_alone() -> None:
    torch.manual_seed(5)
    state = torch.get_rng_state()
    first = torch.rand(10)
    after = torch.get_rng_state()
    with replayed(state, torch.device("cpu")):
        again = torch.rand(10)
    assert torch.equal(first, again)
    assert torch.equal(torch.get_rng_state(), after)


class _Net(nn.Module):
    def __init__(self, p: float) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 4)
        self.drop = nn.Dropout(p)
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.drop(F.relu(self.a(x)))
        h = h + self.attn(h, h, h, need_weights=False)[0]
        return self.b(h).mean(1)


@pytest.mark.parametrize("p", [0.0, 0.2])
def test_every_drawing_op_gets_a_pinned_stash_node_of_its_own(p: float) -> None:
    torch.manual_seed(0)
    tm = trace_module(_Net(p).train(), (torch.randn(2, 5, 8),), torch.randint(0, 4, (2,)), F.cross_entropy,
                      name="net")
    fx = list(tm.gm.graph.nodes)
    drawing = [n for n in fx if draws(n)]
    stashes = [n for n in fx if is_stash(n)]
    # Dropout 0 draws nothing (nor does attention with dropout_p 0): no stash, no change.
    assert len(drawing) == len(stashes) == (0 if p == 0 else 1)
    for n in drawing:
        assert fx[fx.index(n) - 1].name == stash_of(n)
        owner = tm.fx_owner[n.name]
        stash = tm.fx_owner[stash_of(n)]
        assert stash in tm.graph.nodes[owner].inputs and tm.graph.nodes[stash].pinned
    if p:
        coarse = coarsen_traced(tm, "layer")
        (k,) = [k for k, nd in enumerate(coarse.graph.nodes) if nd.op == RNG_STATE_OP]
        assert coarse.node_fx[k] == (stashes[0].name,) and coarse.graph.nodes[k].pinned
        assert k in coarse.graph.nodes[coarse.fx_owner[drawing[0].name]].inputs
