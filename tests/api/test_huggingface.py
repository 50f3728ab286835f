"""Hugging Face GPT-2, BERT and DistilBERT as users train them (dropout 0.1, train mode):
at 75 % and 100 % of the checkpoint-all peak, ``training_step()``, ``checkpointed()`` and
``poetc verify``'s check give eager autograd's gradients bitwise for the same seed."""

from __future__ import annotations

import copy
import functools

import pytest

import poet_compiler
from poet_compiler.torch_exec.verification import verify
from tests.api.dropoutmodels import differing, gradients
from tests.api.hfmodels import NAMES, build

pytest.importorskip("transformers")


def _backward(m, ids, target, loss_fn) -> None:
    loss_fn(m(ids), target).backward()


@pytest.mark.parametrize("name", NAMES)
def test_hugging_face_models_train_by_the_schedule_like_autograd(name: str) -> None:
    model, ids, target, loss_fn = build(name)
    twin = copy.deepcopy(model)
    ref = gradients(twin, functools.partial(_backward, twin, ids, target, loss_fn))
    for ram in ("100%", "75%"):
        c = poet_compiler.compile(model, device="a72", ram=ram, example_inputs=(ids,), target=target,
                                  loss_fn=loss_fn, effort=0.3, time_limit_s=60, threads=1)
        assert c.result.ok, c.result.message
        assert any(nd.op == "poet.rng_state" for nd in c.graph.nodes)   # its dropouts are in the graph
        step = c.training_step()
        assert not differing(gradients(model, functools.partial(step, ids, target)), ref), ram
        step.close()
        m = c.checkpointed(allow_over_budget=True)   # a plan above the budget too: the bits are checked
        assert not differing(gradients(model, functools.partial(_backward, m, ids, target, loss_fn)), ref), ram
        m.close()
        v = verify(c.traced, c.program, c.costs, seed=1)
        assert v.ok, v.failures
