"""The scheduled step: compiled in mode poet on m4 at 30/50/70% of
the checkpoint-all peak, it reproduces autograd bitwise, its measured peak of live
activation bytes stays within the budget and within 5% of the simulator's prediction,
and its paging really goes to disk, byte for byte the schedule's paging volume."""

from __future__ import annotations

import copy
import functools

import pytest
import torch

import poet_compiler.api as api
from poet_compiler.errors import ScheduleError
from poet_compiler.frontends import trace_zoo
from poet_compiler.schedule.program import Instruction, Op, Program
from poet_compiler.schedule.simulate import simulate
from poet_compiler.torch_exec.executor import ScheduledStep
from poet_compiler.torch_exec.verification import autograd_step

BATCH = 2


@functools.cache
def traced(name: str, granularity: str = "op"):
    return trace_zoo(name, granularity=granularity, batch=BATCH)


@functools.cache
def compiled(name: str, ram: str, mode: str = "poet", granularity: str = "op"):
    # Little effort (what a 1 s limit would give): the warm start (or the incumbent) is a
    # valid schedule either way. The wall cap stays far: at 1 s a loaded machine hit it.
    return api.compile(traced(name, granularity).graph, "m4", ram, mode=mode, effort=0.3, time_limit_s=60.0,
                       threads=1)


def check_schedule(name: str, ram: str, mode: str = "poet", granularity: str = "op") -> dict:
    tm = traced(name, granularity)
    c = compiled(name, ram, mode, granularity)
    if not c.result.ok:
        # An infeasible budget is the model's property (e.g. one gradient tensor larger
        # than the budget); the compiler must say so and name what would work.
        assert c.result.status == "infeasible" and "needed" in c.result.message
        return {"status": "infeasible"}
    sim = simulate(c.graph, c.costs, c.program)
    ref_loss, ref_grads, _, _ = autograd_step(tm)
    with ScheduledStep(tm, c.program) as step:
        loss, grads = step.run()
        stats = step.last
    assert torch.equal(loss, ref_loss)
    assert grads.keys() == ref_grads.keys()
    for k in grads:
        assert torch.equal(grads[k], ref_grads[k]), k  # bitwise: max abs diff 0.0
    budget = c.result.ram_budget_bytes
    assert stats.peak_bytes <= budget
    assert abs(stats.peak_bytes - sim.peak_bytes) <= 0.05 * sim.peak_bytes
    if granularity == "op":
        assert (stats.page_out_bytes, stats.page_in_bytes) == (sim.page_out_bytes, sim.page_in_bytes)
    return {"status": c.result.status, "paged": sim.page_out_bytes, "recomputed": sim.n_recompute}


@pytest.mark.parametrize("ram", ["30%", "50%", "70%"])
@pytest.mark.parametrize("name", ["kws_dscnn", "cifar_cnn_tiny", "mlp"])
def test_zoo_schedules_are_exact(name: str, ram: str) -> None:
    check_schedule(name, ram)


def test_some_budgets_are_feasible_and_page_or_recompute() -> None:
    """The matrix above is not vacuous: kws_dscnn needs remat or paging at 30% and 50%
    (which one the time-limited solver picks may vary), and pages at 30% in mode paging."""
    for ram in ("30%", "50%"):
        r = check_schedule("kws_dscnn", ram)
        assert r["paged"] > 0 or r["recomputed"] > 0
    assert check_schedule("kws_dscnn", "30%", mode="paging")["paged"] > 0


def test_mlp_at_full_budget_and_cifar_forced_paging() -> None:
    # mlp is infeasible below ~100%: its largest working set holds a 784x512 weight gradient.
    assert check_schedule("mlp", "100%")["status"] in ("optimal", "feasible")
    assert check_schedule("cifar_cnn_tiny", "70%", mode="paging")["paged"] > 0


def test_paging_really_goes_to_disk(tmp_path) -> None:
    tm = traced("kws_dscnn")
    c = compiled("kws_dscnn", "30%", "paging")  # no remat allowed: the schedule must page
    sim = simulate(c.graph, c.costs, c.program)
    assert sim.page_out_bytes > 0 and sim.page_in_bytes > 0
    path = tmp_path / "flash.bin"
    step = ScheduledStep(tm, c.program, page_file=path)
    writes: list[int] = []
    original = step.pages.page_out

    def spy(node, values):
        writes.append(node)
        return original(node, values)

    step.pages.page_out = spy  # type: ignore[method-assign]
    step.run()
    st = step.last
    assert (st.page_out_bytes, st.page_in_bytes) == (sim.page_out_bytes, sim.page_in_bytes)
    assert (st.n_page_out, st.n_page_in) == (sim.n_page_out, sim.n_page_in)
    assert sorted(writes) == sorted(ins.node for ins in c.program if ins.op is Op.PAGE_OUT)
    # The bytes are on disk: the file spans at least every paged node's region, and the
    # region of a paged node holds exactly its tensor's bytes.
    assert path.stat().st_size >= sum({c.graph.nodes[i].output_bytes for i in writes})
    node = writes[0]
    fx = step.plan.nodes[node].kept[0]
    rec = step.pages._records[node]
    on_disk = path.read_bytes()[rec.offset:rec.offset + rec.sizes[0]]
    ref = _value_of(tm, fx)
    assert on_disk == ref.contiguous().numpy().tobytes()
    step.close()
    assert path.exists()  # a named page file is the user's: kept


def _value_of(tm, fx_name: str) -> torch.Tensor:
    """The value of one FX node in a plain run of the joint graph."""
    env = {}
    interp = torch.fx.Interpreter(tm.gm)
    orig = interp.run_node

    def run_node(n):
        out = orig(n)
        if n.name == fx_name:
            env["v"] = out
        return out

    interp.run_node = run_node  # type: ignore[method-assign]
    with torch.no_grad():
        interp.run(*tm.flat_args())
    return env["v"]


def test_temporary_page_file_is_deleted(tmp_path) -> None:
    c = compiled("kws_dscnn", "30%")
    step = ScheduledStep(traced("kws_dscnn"), c.program, page_dir=tmp_path)
    step.run()
    assert len(list(tmp_path.iterdir())) == 1
    step.close()
    assert list(tmp_path.iterdir()) == []


def test_step_is_a_drop_in_for_backward() -> None:
    """Two steps accumulate .grad exactly as two loss.backward() calls, buffers (BatchNorm
    running statistics) update the same way, and an optimizer step follows."""
    tm0 = traced("cifar_cnn_tiny")
    c = compiled("cifar_cnn_tiny", "70%", "paging")
    tm = copy.copy(tm0)
    tm.module = copy.deepcopy(tm0.module)
    ref = copy.deepcopy(tm0.module)
    opt_a = torch.optim.SGD(tm.module.parameters(), lr=0.1)
    opt_b = torch.optim.SGD(ref.parameters(), lr=0.1)
    with ScheduledStep(tm, c.program) as step:
        for _ in range(2):
            loss = step(tm.example_inputs, tm.target)
            ref_loss = tm.loss_fn(ref(*tm.example_inputs), tm.target)
            ref_loss.backward()
            assert torch.equal(loss, ref_loss.detach())
        for (n, p), (_, q) in zip(tm.module.named_parameters(), ref.named_parameters()):
            assert torch.equal(p.grad, q.grad), n
        for (n, a), (_, b) in zip(tm.module.named_buffers(), ref.named_buffers()):
            assert torch.equal(a, b), n
        opt_a.step()
        opt_b.step()
        for (n, p), (_, q) in zip(tm.module.named_parameters(), ref.named_parameters()):
            assert torch.equal(p, q), n


def test_other_inputs_are_used() -> None:
    tm = traced("kws_dscnn")
    c = compiled("kws_dscnn", "50%")
    x = tuple(torch.randn_like(t) for t in tm.example_inputs)
    ref_loss, ref_grads, _, _ = autograd_step(tm, x, tm.target)
    with ScheduledStep(tm, c.program) as step:
        loss, grads = step.run(x, tm.target)
    assert torch.equal(loss, ref_loss)
    assert all(torch.equal(grads[k], ref_grads[k]) for k in grads)


@pytest.mark.parametrize("name,ram", [("mlp", "100%"), ("kws_dscnn", "50%"), ("cifar_cnn_tiny", "70%")])
def test_measured_timeline_is_the_simulators_exactly(name: str, ram: str) -> None:
    """Instruction by instruction, measured live bytes == the simulator's, minus exactly
    the lowering's documented over-estimate: while an op node and its select node (batch
    norm's saved mean/invstd, max-pool's indices, nll_loss's total_weight) are both
    resident, the graph counts the selected outputs twice, the executor holds them once.
    (This is why cifar_cnn_tiny can measure >5% below the simulator when a schedule
    recomputes a max-pool in the backward while its indices are resident.)"""
    tm = traced(name)
    c = compiled(name, ram)
    g = tm.graph
    sim = simulate(c.graph, c.costs, c.program)
    with ScheduledStep(tm, c.program) as step:
        step.run()
        measured = step.last.timeline
    selects = {nd.id: nd.inputs[0] for nd in g.nodes if nd.op == "getitem"}
    resident: set[int] = set()
    # Storage is shared only between a select node and the very computation of its op
    # node it was taken from: a recomputed (or paged-in) op node has fresh buffers.
    generation = [0] * g.n
    taken_from: dict[int, int | None] = {}
    assert len(measured) == len(sim.timeline)
    for k, ins in enumerate(c.program.instructions):
        if ins.op in (Op.COMPUTE, Op.PAGE_IN):
            resident.add(ins.node)
            generation[ins.node] += 1
            if ins.node in selects:
                o = selects[ins.node]
                taken_from[ins.node] = generation[o] if ins.op is Op.COMPUTE else None
        elif ins.op is Op.FREE:
            resident.discard(ins.node)
        double = sum(g.nodes[s].output_bytes for s, o in selects.items()
                     if s in resident and o in resident and taken_from.get(s) == generation[o])
        assert measured[k] == sim.timeline[k] - double, (k, str(ins))


def test_bad_programs_raise_schedule_error() -> None:
    tm = traced("mlp")
    n = tm.graph.n
    with pytest.raises(ScheduleError, match="program is for 3 nodes"):
        ScheduledStep(tm, Program(3, ()))
    consumer = next(nd for nd in tm.graph.nodes if nd.inputs)
    prog = Program(n, (Instruction(Op.COMPUTE, consumer.id),))
    with pytest.raises(ScheduleError, match=rf"instruction 0 \(COMPUTE {consumer.id}\): input node \d+ is not in RAM"):
        ScheduledStep(tm, prog).run()
    prog = Program(n, (Instruction(Op.COMPUTE, 0), Instruction(Op.PAGE_IN, 0)))
    with pytest.raises(ScheduleError, match="already in RAM"):
        ScheduledStep(tm, prog).run()
    prog = Program(n, (Instruction(Op.COMPUTE, 0), Instruction(Op.FREE, 0), Instruction(Op.PAGE_IN, 0)))
    with pytest.raises(ScheduleError, match="no copy in the page file"):
        ScheduledStep(tm, prog).run()
    prog = Program(n, (Instruction(Op.COMPUTE, 0),))
    with pytest.raises(ScheduleError, match="never computed"):
        ScheduledStep(tm, prog).run()


def test_module_granularity_is_exact_and_explains_paging_volume() -> None:
    """Module level: bitwise and within 5%. The page file holds each batch-norm group's
    saved mean/invstd once, while the coarsened graph counts them twice (in the op
    member and in its select member): the only difference with the schedule's volume."""
    tm = traced("kws_dscnn", "module")
    c = compiled("kws_dscnn", "30%", "poet", "module")
    assert c.result.ok
    check_schedule("kws_dscnn", "30%", granularity="module")
    sim = simulate(c.graph, c.costs, c.program)
    with ScheduledStep(tm, c.program) as step:
        step.run()
        st = step.last
    op_graph = traced("kws_dscnn").graph
    by_name = {nd.name: nd for nd in op_graph.nodes}
    double = 0
    for ins in c.program:
        if ins.op is Op.PAGE_OUT:
            members = c.graph.nodes[ins.node].extra.get("members", [])
            double += sum(by_name[m].output_bytes for m in members if by_name[m].op == "getitem"
                          and any(by_name[m].inputs[0] == by_name[o].id for o in members))
    assert st.page_out_bytes == sim.page_out_bytes - double
