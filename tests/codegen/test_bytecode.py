"""Encoder/decoder/disassembler of the .poet bytecode (docs/bytecode.md)."""

from __future__ import annotations

import pytest

from poet_compiler.codegen.bytecode import (
    BytecodeFormatError, F_NODE_TABLE, F_WORKSPACE, decode, disassemble, encode,
)
from poet_compiler.errors import BytecodeError
from poet_compiler.schedule.program import Instruction, Op, Program
from tests.codegen.programs import (
    budget_program, chain_graph, checkpoint_all_peak, corruption_cases, resnet18_cifar_graph,
    training_graph,
)

RESNET = resnet18_cifar_graph()
RESNET_CA = checkpoint_all_peak(RESNET)


def _plan(graph, program):
    """The project's arena planner when present, else the test's first-fit offsets."""
    try:
        from poet_compiler.schedule.arena import plan_arena
    except ImportError:
        return program
    bare = Program(program.n_nodes, tuple(Instruction(i.op, i.node) for i in program), None)
    return plan_arena(graph, bare)


@pytest.mark.parametrize("frac", [None, 0.3, 0.5, 0.7])
@pytest.mark.parametrize("paging", [True, False])
@pytest.mark.parametrize("strip", [True, False])
def test_roundtrip_resnet(frac, paging, strip):
    budget = None if frac is None else int(RESNET_CA * frac)
    program = budget_program(RESNET, budget, paging=paging)
    decoded = decode(encode(program, RESNET, strip=strip))
    assert decoded.program == program
    assert decoded.sizes == tuple(n.output_bytes for n in RESNET.nodes)
    assert decoded.stripped is strip


@pytest.mark.parametrize("seed", range(6))
def test_roundtrip_chain_without_graph_or_offsets(seed):
    g = chain_graph(5 + seed)
    for offsets in (True, False):
        p = budget_program(g, 2500, seed=seed, offsets=offsets)
        assert p.n_recompute > 0 or p.n_page_in > 0   # the programs do exercise remat/paging
        for graph in (None, g):
            d = decode(encode(p, graph))
            assert d.program == p
            assert (d.sizes is None) is (graph is None)


def test_empty_and_fence_only_programs():
    for p in (Program(0, ()), Program(3, (Instruction(Op.FENCE),)), Program(0, (), arena_bytes=0)):
        assert decode(encode(p)).program == p


def test_deterministic_and_meta_independent():
    p = budget_program(RESNET, RESNET_CA // 2)
    q = Program(p.n_nodes, p.instructions, p.arena_bytes, meta={"anything": 1})
    assert encode(p, RESNET) == encode(p, RESNET) == encode(q, RESNET)


def test_node_table_matches_graph():
    d = decode(encode(budget_program(RESNET, None), RESNET))
    assert d.graph_name == RESNET.name
    assert [e.name for e in d.nodes] == [n.name for n in RESNET.nodes]
    assert [e.inputs for e in d.nodes] == [n.inputs for n in RESNET.nodes]
    assert [(e.kind, e.op, e.op_class) for e in d.nodes] == [(n.kind, n.op, n.op_class) for n in RESNET.nodes]


def test_strip_drops_only_the_node_table():
    p = budget_program(RESNET, RESNET_CA // 2)
    full, stripped = encode(p, RESNET), encode(p, RESNET, strip=True)
    assert full[5] & F_NODE_TABLE and not stripped[5] & F_NODE_TABLE
    assert len(stripped) < len(full)
    assert decode(stripped).program == decode(full).program == p


def test_workspace_roundtrip_and_overlap_rule():
    fwd = [("c0", "conv", [], 64), ("c1", "conv", [0], 64)]
    g = training_graph(fwd, workspace=32)
    p = budget_program(g, None)
    d = decode(encode(p, g))
    assert d.flags & F_WORKSPACE and d.workspace == tuple(n.workspace_bytes for n in g.nodes)
    # c0's workspace lies at [64, 96) while it runs: c1, live at 80, collides with it.
    bad = Program(g.n, (Instruction(Op.COMPUTE, 0, 0), Instruction(Op.FREE, 0, 0),
                        Instruction(Op.COMPUTE, 1, 80), Instruction(Op.COMPUTE, 0, 0)), arena_bytes=256)
    with pytest.raises(BytecodeFormatError) as err:
        encode(bad, g)
    assert err.value.code == "POET_E_OVERLAP"


def test_resnet18_size_target():
    """Issue 5: ResNet-18-CIFAR at 50 % budget, stripped: < 1 KiB and <= 2 B/instruction."""
    p = _plan(RESNET, budget_program(RESNET, RESNET_CA // 2, offsets=False))
    report: dict = {}
    data = encode(p, RESNET, strip=True, report=report)
    assert len(data) == report["total_bytes"] < 1024
    assert report["bytes_per_instruction"] <= 2.0
    parts = ("header_bytes", "sizes_bytes", "workspace_bytes", "offsets_bytes", "code_bytes", "node_table_bytes")
    assert sum(report[k] for k in parts) == len(data)
    assert decode(data).program == p


@pytest.mark.parametrize("bad, code", [
    (Program(2, (Instruction(Op.COMPUTE, 0, 0), Instruction(Op.COMPUTE, 1))), "POET_E_OFFSET"),
    (Program(2, (Instruction(Op.COMPUTE, 0, 0), Instruction(Op.FREE, 0, 8))), "POET_E_OFFSET"),
    (Program(2, (Instruction(Op.FREE, 0),)), "POET_E_STATE"),
    (Program(2, (Instruction(Op.COMPUTE, 0), Instruction(Op.COMPUTE, 0))), "POET_E_STATE"),
    (Program(2, (Instruction(Op.COMPUTE, 0), Instruction(Op.PAGE_IN, 1))), "POET_E_STATE"),
    (Program(2, (Instruction(Op.COMPUTE, 2),)), "POET_E_NODE"),
    (Program(2, (Instruction(Op.COMPUTE, 0, 0),), arena_bytes=1 << 31), "POET_E_OFFSET"),
])
def test_encode_refuses_inconsistent_programs(bad, code):
    with pytest.raises(BytecodeFormatError) as err:
        encode(bad)
    assert err.value.code == code
    assert isinstance(err.value, BytecodeError)


def test_encode_refuses_graph_mismatch_and_overrun():
    g = chain_graph(2)
    with pytest.raises(BytecodeError, match="nodes"):
        encode(Program(3, ()), g)
    over = Program(g.n, (Instruction(Op.COMPUTE, 0, 16),), arena_bytes=32)
    with pytest.raises(BytecodeFormatError) as err:
        encode(over, g)
    assert err.value.code == "POET_E_OFFSET"


@pytest.mark.parametrize("name", sorted(corruption_cases()))
def test_every_corruption_class_has_its_code(name):
    data, code = corruption_cases()[name]
    if code == "POET_OK":
        assert len(decode(data).program) == 4
        return
    with pytest.raises(BytecodeFormatError) as err:
        decode(data)
    assert err.value.code == code
    assert "\n" not in str(err.value)


def test_disassemble_lists_every_instruction():
    p = budget_program(chain_graph(6), 3000, seed=1)
    text = disassemble(encode(p, chain_graph(6)))
    lines = [ln for ln in text.splitlines() if not ln.startswith(";")]
    assert len(lines) == len(p)
    for ln, ins in zip(lines, p):
        assert str(ins) in ln
    assert "graph 'chain6'" in text and "NODE_TABLE" in text
    assert "l0_bwd" in text
