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
    """The size target: ResNet-18-CIFAR at 50 % budget, stripped: < 1 KiB and <= 2 B/instruction."""
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
    (Program(2, (Instruction(Op.COMPUTE, 0, 0),), arena_bytes=1 << 59), "POET_E_OFFSET"),
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


# --------------------------------------------------------------------------- any RAM size (version 3)
GIB = 1 << 30
BIG = training_graph([("c0", "conv", [], 3 * GIB + 12), ("r0", "elementwise", [0], 3 * GIB),
                      ("c1", "conv", [1], 5 * GIB + 4), ("fc", "matmul", [2], 96)], name="big", workspace=GIB + 8)


def test_roundtrip_arena_of_8_gib_and_more():
    """Version 3: an arena, offsets and node sizes beyond 32 bits round-trip exactly
    (a Jetson-class budget used to be refused at 1 GiB)."""
    for frac in (None, 0.6):
        budget = None if frac is None else int(checkpoint_all_peak(BIG) * frac)
        program = budget_program(BIG, budget, seed=2)
        assert program.arena_bytes >= 8 * GIB
        assert max(i.offset for i in program if i.offset is not None) >= 1 << 32
        for strip in (True, False):
            report: dict = {}
            data = encode(program, BIG, strip=strip, report=report)
            d = decode(data)
            assert d.version == 3 and d.program == program
            assert d.sizes == tuple(n.output_bytes for n in BIG.nodes)
            assert d.workspace == tuple(n.workspace_bytes for n in BIG.nodes)
            assert d.program.arena_bytes == program.arena_bytes
            assert len(data) == report["total_bytes"]
            # prefix 10, file length 1 (2 with the node table), nodes 1, instructions 1, arena 5
            assert report["header_bytes"] == (18 if strip else 19)
        text = disassemble(encode(program, BIG))
        assert f"arena {program.arena_bytes} B" in text


def test_version_2_is_version_3_with_narrower_limits():
    """encode(version=2) writes the previous format; the bytes differ from version 3's only
    in the version byte and the CRC, and both decode to the same program."""
    for graph, program in ((RESNET, budget_program(RESNET, RESNET_CA // 2)),
                           (chain_graph(7), budget_program(chain_graph(7), 2600, seed=3))):
        v2, v3 = encode(program, graph, version=2), encode(program, graph)
        assert (v2[4], v3[4]) == (2, 3)
        assert v2[:4] + v2[5:6] + v2[10:] == v3[:4] + v3[5:6] + v3[10:] and v2[6:10] != v3[6:10]
        assert decode(v2).program == decode(v3).program == program
        assert decode(v2).version == 2
    big = budget_program(BIG, None)
    with pytest.raises(BytecodeFormatError, match="format version 2") as err:
        encode(big, BIG, version=2)
    assert err.value.code == "POET_E_OFFSET"
    with pytest.raises(BytecodeFormatError) as err:
        encode(big, BIG, version=1)
    assert err.value.code == "POET_E_VERSION"


# chain_graph(3) at a 2600 B budget (2 recomputes, 2 page-outs, 2 page-ins, 4 fences),
# stripped: 53 B. Version 2 wrote the same bytes but for byte 4 (02) and the CRC
# (bytes 6-9: 52ad65b1); the version-2 writer of commit 3a20652 gives GOLDEN_V2 exactly.
GOLDEN_V3 = ("504f4554030d1e85f31235071b9030042a2b6a22e4060008180b180b250703060107180b3a0118112b0b"
             "250703060307284b0b080b")
GOLDEN_V2 = ("504f4554020d52ad65b135071b9030042a2b6a22e4060008180b180b250703060107180b3a0118112b0b"
             "250703060307284b0b080b")


def test_golden_bytes_of_a_small_file():
    """Byte-exact: any change to these bytes is a format change and needs a version bump
    (docs/bytecode.md)."""
    g = chain_graph(3)
    program = budget_program(g, 2600, seed=0)
    assert encode(program, g, strip=True).hex() == GOLDEN_V3
    assert encode(program, g, strip=True, version=2).hex() == GOLDEN_V2
    assert decode(bytes.fromhex(GOLDEN_V2)).program == decode(bytes.fromhex(GOLDEN_V3)).program == program


def test_sizes_past_the_format_limit_are_refused():
    huge = training_graph([("a", "elementwise", [], 1 << 59)], name="huge")
    with pytest.raises(BytecodeFormatError, match="59 bits") as err:
        encode(budget_program(huge, None, offsets=False), huge)
    assert err.value.code == "POET_E_COUNT"

