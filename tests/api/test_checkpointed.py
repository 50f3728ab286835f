"""``Compilation.checkpointed()``: the schedule run by torch.utils.checkpoint and saved-tensor hooks.

The module it returns trains the compiled module exactly as plain autograd does (eager:
parameters, BatchNorm statistics and losses bitwise after several SGD steps), pages
through a real file where the plan pages, refuses a batch it was not planned for in one
line, and runs under ``torch.compile``. What PyTorch does with the plan is a Program the
simulator replays: the measured peak stays within it plus one op's kernel scratch.
"""

from __future__ import annotations

import copy
import dataclasses
import operator
import re

import pytest
import torch
import torch.nn.functional as F

import poet_compiler
from poet_compiler.errors import BatchError, InfeasibleError, PoetError
from tests.api.usermodel import TinyResNet, batch, refusal


def _compile(ram: str, *, device: str = "m4", mode: str = "poet"):
    torch.manual_seed(0)
    model = TinyResNet().train()
    reference = copy.deepcopy(model)
    x, y = batch(0)
    c = poet_compiler.compile(model, device=device, ram=ram, mode=mode, example_inputs=(x,), target=y,
                              loss_fn=F.cross_entropy, effort=0.3, time_limit_s=60, threads=1)
    assert c.result.ok, c.result.message
    return model, reference, c


@pytest.fixture(scope="module")
def remat():
    return _compile("50%")


def _train_both(m, model, reference, steps=3) -> None:
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    for k in range(1, steps + 1):       # new batches, not the example it was traced with
        x, y = batch(k)
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        ref_opt.zero_grad()
        ref_loss = F.cross_entropy(reference(x), y)
        ref_loss.backward()
        ref_opt.step()
        assert torch.equal(loss, ref_loss), k
    params = dict(reference.named_parameters())
    for name, p in model.named_parameters():
        assert torch.equal(p, params[name]), name
    buffers = dict(reference.named_buffers())
    for name, b in model.named_buffers():
        assert torch.equal(b, buffers[name]), name


def test_regions_train_bitwise_like_autograd(remat) -> None:
    model, reference, c = remat
    m = c.checkpointed()
    assert m.module is model and list(m.parameters()) == list(model.parameters())
    plan = m.plan
    # 50 % of checkpoint-all: the plan recomputes, in regions, and fits.
    assert plan.regions and any(r.recompute for r in plan.regions)
    assert plan.peak_bytes <= c.problem.activation_budget < c.reference.peak_bytes
    assert "_ckpt(_region0" in m.source
    _assert_policies_where_saved(m)
    _train_both(m, model, reference)
    assert int(dict(model.named_buffers())["bn.num_batches_tracked"]) == 3


def _saved_calls(m, region) -> list[str]:
    fx = {n.name: n for n in m._traced.gm.graph.nodes}
    return [o for o in region.ops if o not in region.recompute and fx[o].target is not operator.getitem]


def _assert_policies_where_saved(m) -> None:
    """A region with a MUST_SAVE call has a selective policy; one without is plain checkpointing."""
    lines = [line for line in m.source.splitlines() if "_ckpt(_region" in line]
    assert len(lines) == len(m.plan.regions)
    for r, region in enumerate(m.plan.regions):
        line = next(line for line in lines if f"_ckpt(_region{r}," in line)
        assert (f"context_fn=_ctx{r}," in line) == bool(_saved_calls(m, region)), line


def test_a_region_that_saves_a_call_runs_its_policy_bitwise(remat) -> None:
    """Dropping the second convolution's output puts the BatchNorm that reads it in its
    region, saved (MUST_SAVE) while the convolution is recomputed: the selective path."""
    from poet_compiler.torch_exec.checkpoint_model import simulate_plan
    from poet_compiler.torch_exec.checkpointed import CheckpointedModule
    from poet_compiler.torch_exec.regions import plan_from

    model, reference, c = remat
    _, an = c.torch_plan()
    conv = next(i for i in an.forward if an.graph.nodes[i].name == "blocks.0.conv2/convolution_2")
    unsimulated = plan_from(an, {conv}, set(), c.costs)
    plan = simulate_plan(an, unsimulated, c.costs)
    # A plan is a value: simulating it makes a new one.
    assert unsimulated.program is None and unsimulated.simulation is None and plan.simulation is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.paged = frozenset()  # type: ignore[misc]
    m = CheckpointedModule(c.traced, plan, an)
    assert [len(_saved_calls(m, r)) for r in plan.regions] == [1]
    _assert_policies_where_saved(m)
    model_state = copy.deepcopy(model.state_dict())
    reference_state = copy.deepcopy(reference.state_dict())
    try:
        _train_both(m, model, reference)
        _assert_peak_within_plan(m, model)
    finally:
        model.load_state_dict(model_state)
        reference.load_state_dict(reference_state)


@pytest.mark.parametrize("device", ["m4", "a72"])
def test_paging_goes_through_a_real_file(tmp_path, device: str) -> None:
    """Mode paging at 40 %: the hooks page to the file (a72: on the background thread)."""
    model, reference, c = _compile("40%", device=device, mode="paging")
    path = tmp_path / "pages.bin"
    m = c.checkpointed(page_file=path)
    assert m.plan.paged and m.plan.dma is (device == "a72")
    assert m.page_file == path
    pager = m._pager
    _train_both(m, model, reference, steps=2)
    assert pager is not None and pager.n_out == len(m.plan.paged) and pager.n_in == len(m.plan.paged)
    assert path.stat().st_size >= sum(c.graph.nodes[i].output_bytes for i in m.plan.paged)
    assert m._pages.bytes_read == m._pages.bytes_written > 0      # every page read back
    # A second forward while the first one's graph still holds pages would overwrite them.
    x, y = batch(7)
    loss = F.cross_entropy(m(x), y)
    with pytest.raises(PoetError, match="backward"):
        m(x)
    loss.backward()
    m(x)
    m.close()
    assert path.exists()   # a file the user named is closed, not deleted


@pytest.mark.parametrize("device", ["m4", "a72"])
def test_a_budget_regions_cannot_reach_is_met_by_paging(device: str) -> None:
    """At 30 % of TinyResNet's autograd peak no plan of checkpoint regions fits (one region
    recomputes its values at once); the plan search pages saved tensors instead. The plan
    fits the budget, the measured peak its plan plus one kernel's scratch (a72: transfers on
    the pager's thread), and training stays bitwise."""
    model, reference, c = _compile("30%", device=device)
    m = c.checkpointed()
    assert m.plan.paged and m.plan.dma is (device == "a72")
    assert m.plan.peak_bytes <= c.problem.activation_budget
    _train_both(m, model, reference, steps=2)
    measured, plain = _assert_peak_within_plan(m, model)
    assert measured < plain / 2
    m.close()


@pytest.mark.parametrize("which", ["shape", "dtype", "arity", "mode", "frozen"])
def test_another_batch_is_refused_in_one_line(remat, which: str) -> None:
    model, _, c = remat
    m = c.checkpointed()
    x, _ = batch(1)
    args = {"shape": (batch(1, n=8)[0],), "dtype": (x.double(),), "arity": (x, x), "mode": (x,),
            "frozen": (x,)}[which]
    msg = refusal(model, which, m, *args)
    assert "\n" not in msg
    expect = {"shape": "(8, 3, 12, 12)", "dtype": "float64", "arity": "takes 1 input", "mode": "eval()",
              "frozen": "'head.bias'"}[which]
    assert expect in msg, msg


def test_errors_name_the_module_and_op(remat) -> None:
    _, _, c = remat
    m = c.checkpointed()
    x, _ = batch(1)
    params = dict(m.module.named_parameters())
    buffers = {**dict(m.module.named_buffers()), **params}
    args = [params[n] for n in c.traced.param_names] + [buffers[n] for n in c.traced.buffer_names]
    with pytest.raises(RuntimeError) as info:
        m._eager(*args, x[:, :2])          # 2 channels where the stem convolution wants 3
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "module 'stem'" in notes and "convolution" in notes, notes


def test_compiled_path_runs(remat) -> None:
    model, _, c = remat
    twin = copy.deepcopy(model)
    m = c.checkpointed()
    torch._dynamo.reset()
    cm = torch.compile(m, backend="aot_eager")     # AOTAutograd's partitioner, no C++ build
    x, y = batch(4)
    model.zero_grad(set_to_none=True)
    loss = F.cross_entropy(cm(x), y)
    loss.backward()
    ref = F.cross_entropy(twin(x), y)
    ref.backward()
    torch.testing.assert_close(loss, ref)
    grads = dict(twin.named_parameters())
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, grads[name].grad, rtol=1e-4, atol=1e-6)
    with pytest.raises(BatchError):
        cm(batch(1, n=8)[0])
    torch._dynamo.reset()


def test_measured_peak_is_within_the_plan_and_one_kernels_scratch(remat) -> None:
    model, _, c = remat
    measured, plain = _assert_peak_within_plan(c.checkpointed(), model)
    assert measured < plain


def _assert_peak_within_plan(m, model) -> tuple[int, int]:
    """(measured peak, plain autograd's) of one step of ``m``; asserts the first is within
    the plan's peak plus one kernel's scratch."""
    from poet_compiler.torch_exec.memtrack import measure

    x, y = batch(2)

    def step(mod):
        F.cross_entropy(mod(x), y).backward()

    twin = copy.deepcopy(model)
    step(twin)
    twin.zero_grad(set_to_none=True)
    _, plain = measure(lambda: step(twin), lambda: [p.grad for p in twin.parameters()], params=list(twin.parameters()))
    step(m)
    model.zero_grad(set_to_none=True)
    _, got = measure(lambda: step(m), lambda: [p.grad for p in model.parameters()], params=list(model.parameters()))
    model.zero_grad(set_to_none=True)
    assert got.peak_bytes <= m.plan.peak_bytes + plain.slack_bytes
    return got.peak_bytes, plain.peak_bytes


def test_a_budget_no_pytorch_plan_meets_is_refused_in_one_line() -> None:
    """At 20 % the schedule fits by recomputing piece by piece; no plan PyTorch's
    checkpointing runs does: checkpointed() refuses, naming the budget, the smallest RAM
    budget the plan search fits and where the plan peaks, unless told to run it anyway."""
    _, _, c = _compile("20%")
    assert c.result.peak_ram_bytes <= c.problem.activation_budget
    with pytest.raises(InfeasibleError) as info:
        c.checkpointed()
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("TinyResNet: no plan PyTorch's checkpointing can run fits RAM ")
    needed = int(re.search(r"ram=(\d+) bytes or more", message).group(1))
    assert needed > c.problem.ram_budget_bytes
    assert "the plan peaks at '" in message
    m = c.checkpointed(allow_over_budget=True)      # the explicit opt-out runs that plan
    assert m.plan.peak_bytes + c.problem.fixed.total == needed
    m.close()


def test_a_byte_budget_is_held_and_the_smallest_budget_named_works() -> None:
    """A budget in bytes ("100KB") below every plan is refused; at the RAM budget the
    message names, checkpointed() runs a plan within it and the measured peak is within
    that plan plus one kernel's scratch."""
    _, _, c = _compile("100KB")
    assert c.problem.ram_budget_bytes == 100 * 1024
    with pytest.raises(InfeasibleError, match=r"ram=\d+ bytes or more") as info:
        c.checkpointed()
    needed = int(re.search(r"ram=(\d+) bytes", str(info.value)).group(1))
    model, _, c = _compile(str(needed))
    m = c.checkpointed()
    assert m.plan.peak_bytes + c.problem.fixed.total <= needed == c.problem.ram_budget_bytes
    _assert_peak_within_plan(m, model)
    m.close()


def test_graph_without_module_and_optimizer_steps_are_refused() -> None:
    from poet_compiler.graph.io import graph_from_dict
    from tests.viz.graphs import chain_dict

    c = poet_compiler.compile(graph_from_dict(chain_dict(4), "chain"), device=None, ram="80%",
                              time_limit_s=5, threads=1)
    with pytest.raises(PoetError, match="needs the model's weights"):
        c.checkpointed()
    torch.manual_seed(0)
    model = TinyResNet().train()
    x, y = batch(0)
    c = poet_compiler.compile(model, device="m4", ram="100%", example_inputs=(x,), target=y, loss_fn=F.cross_entropy,
                              strategy="checkpoint_all", optimizer="sgd:lr=0.1")
    with pytest.raises(PoetError, match="opt.step"):
        c.checkpointed()


def test_the_dma_pager_frees_and_allocates_on_the_calling_thread(tmp_path) -> None:
    """A page-out's source storage is freed at its fence and a prefetch's buffers are
    allocated when it is issued, both on the forward's thread: the profiler, which sees
    only that thread's allocations, measures what the plan models (two page-outs and two
    page-ins in a row peak at one tensor)."""
    from poet_compiler.torch_exec.memtrack import measure
    from poet_compiler.torch_exec.pager import PageFile, SavedTensorPager

    x = torch.randn(1 << 20)
    nbytes = x.untyped_storage().nbytes()
    with PageFile(tmp_path / "pages.bin") as pages:
        pager = SavedTensorPager(pages, dma=True)

        def step() -> torch.Tensor:
            pager.reset()
            pager.active = True
            handles = []
            for node, scale in enumerate((2.0, 3.0)):
                pager.begin()
                y = x * scale
                pager.end(node, (y,))
                handles.append(pager.pack(y))
                del y
                pager.fence()
            pager.unpack(handles[1])        # read back here, dropped at once
            pager.prefetch((0,))            # read back there, into buffers allocated here
            return pager.unpack(handles[0])

        back, got = measure(step)
        pager.close()
    assert torch.equal(back, x * 2)
    assert got.end_bytes == nbytes                   # the prefetched buffer, seen
    assert got.peak_bytes < nbytes + 4096            # one tensor (and view headers) at a time
