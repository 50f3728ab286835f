"""MOVE (arena compaction) in the .poet bytecode: format version 4 (docs/bytecode.md)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from poet_compiler.codegen import bytecode as bc
from poet_compiler.codegen.bytecode import BytecodeFormatError, decode, disassemble, encode
from poet_compiler.schedule.program import Instruction, Op, Program
from tests.codegen.move_programs import hand_program, move_cases, with_moves
from tests.codegen.programs import (
    budget_program,
    chain_graph,
    checkpoint_all_peak,
    decoder_verdict,
    fix_crc,
    resnet18_cifar_graph,
    training_graph,
)

I = Instruction  # noqa: E741
GRAPH, PROGRAM = hand_program()
RESNET = resnet18_cifar_graph()
RESNET_CA = checkpoint_all_peak(RESNET)
# hand_program(), stripped: 48 B; its three MOVEs are "0f 01" each (code 7, immediate
# 1 + zz(0): the moved node is the last computed one; placement 1: at 0).
GOLDEN_V4 = "504f4554040db567c85e3007158030042a2b6a22e40600081805070b0f0118280b180b2b0f01060307100b4b0f01180b"


@pytest.mark.parametrize("strip", [True, False])
def test_roundtrip_hand_program(strip):
    report: dict = {}
    data = encode(PROGRAM, GRAPH, strip=strip, report=report)
    d = decode(data)
    assert d.version == 4 == bc.MOVE_VERSION
    assert d.program == PROGRAM
    assert [i for i in d.program if i.op is Op.MOVE] == [I(Op.MOVE, 1, 0), I(Op.MOVE, 4, 0), I(Op.MOVE, 5, 0)]
    assert report["code_bytes"] == 25 and report["offset_table"] == 0   # 21 instructions, 3 of them MOVEs
    assert report["placed"] == report["allocations"] == 11               # 8 allocations + 3 MOVEs


def test_golden_bytes_of_a_move_program():
    """Byte-exact: a change here is a format change (docs/bytecode.md)."""
    data = encode(PROGRAM, GRAPH, strip=True)
    assert data.hex() == GOLDEN_V4
    assert data.count(bytes([bc.C_FENCE | 1 << 3, 1])) == 3
    assert decode(bytes.fromhex(GOLDEN_V4)).program == PROGRAM


@pytest.mark.parametrize("seed", range(4))
def test_roundtrip_random_moves(seed):
    """MOVEs placed every way: at 0, after / below a live buffer, through the offset table."""
    for graph, base in ((RESNET, budget_program(RESNET, int(RESNET_CA * 0.5), seed=seed)),
                        (chain_graph(9), budget_program(chain_graph(9), 2600, seed=seed))):
        program = with_moves(base, graph, seed)
        assert program.n_move > 20
        for strip in (True, False):
            data = encode(program, graph, strip=strip)
            assert data[4] == 4 and decode(data).program == program
        # Without the graph (no sizes): every MOVE offset goes through the offset table.
        assert decode(encode(program)).program == program


def test_roundtrip_without_offsets_and_far_nodes():
    g = chain_graph(9)   # 19 nodes
    bare = Program(g.n, (I(Op.COMPUTE, 0), I(Op.COMPUTE, 1), I(Op.MOVE, 1), I(Op.FENCE), I(Op.MOVE, 0)))
    assert decode(encode(bare)).program == bare
    assert decode(encode(bare, g)).program == bare
    # A node 17 below the last compute: zz(-17) = 33, immediate 34 takes the escape varint.
    steps = [I(Op.COMPUTE, 0, 0)] + [x for k in range(1, 18) for x in (I(Op.COMPUTE, k, 4096),
                                                                        I(Op.FREE, k, 4096))]
    far = Program(g.n, (*steps, I(Op.MOVE, 0, 8192), I(Op.MOVE, 0, 100)), arena_bytes=16384)
    data = encode(far, g, strip=True)
    assert decode(data).program == far
    assert bytes([bc.C_FENCE | 31 << 3, 34 - 31, 0]) in data     # escape; placement 0: explicit slot


def test_move_free_programs_keep_version_3_bytes():
    """The encoder writes the lowest version that holds the program: without MOVE, the
    bytes version 3 always had; version=4 changes only the version byte and the CRC."""
    cases = [(RESNET, budget_program(RESNET, RESNET_CA // 2)),
             (chain_graph(7), budget_program(chain_graph(7), 2600, seed=3)),
             (GRAPH, budget_program(GRAPH, 2600, seed=0))]
    for graph, program in cases:
        assert program.n_move == 0
        for strip in (True, False):
            v3 = encode(program, graph, strip=strip)
            assert v3[4] == 3 and v3 == encode(program, graph, strip=strip, version=3)
            v4 = encode(program, graph, strip=strip, version=4)
            assert v4[4] == 4 and v4[:4] + v4[5:6] + v4[10:] == v3[:4] + v3[5:6] + v3[10:]
            assert decode(v4).program == decode(v3).program == program


def test_zoo_program_keeps_version_3_bytes():
    from poet_compiler.api import compile

    c = compile("resnet18_cifar", "m4", ram="50%", strategy="chen_greedy")
    program = c.result.program
    if program.n_move:
        pytest.skip("the scheduler now compacts: see test_roundtrip_random_moves")
    data = c.bytecode(strip=True)
    assert data[4] == 3 and data == encode(program, c.graph, strip=True, version=3)


@pytest.mark.parametrize("bad, code", [
    # MOVE of a node not in RAM, never computed, out of range
    (Program(3, (I(Op.COMPUTE, 0, 0), I(Op.FREE, 0, 0), I(Op.MOVE, 0, 0)), arena_bytes=64), "POET_E_STATE"),
    (Program(3, (I(Op.MOVE, 1, 0),), arena_bytes=64), "POET_E_STATE"),
    (Program(3, (I(Op.COMPUTE, 0, 0), I(Op.MOVE, 3, 0)), arena_bytes=64), "POET_E_NODE"),
    # in flight: PAGE_OUT without a FENCE since
    (Program(3, (I(Op.COMPUTE, 0, 0), I(Op.PAGE_OUT, 0, 0), I(Op.MOVE, 0, 32)), arena_bytes=64), "POET_E_STATE"),
    (Program(3, (I(Op.COMPUTE, 0, 0), I(Op.PAGE_OUT, 0, 0), I(Op.FREE, 0, 0), I(Op.PAGE_IN, 0, 16),
                 I(Op.MOVE, 0, 32)), arena_bytes=64), "POET_E_STATE"),
    # past the arena; onto a live buffer; no offset in a planned program; a FREE at the old offset
    (Program(3, (I(Op.COMPUTE, 0, 0), I(Op.MOVE, 0, 40)), arena_bytes=64), "POET_E_OFFSET"),
    (Program(3, (I(Op.COMPUTE, 0, 0), I(Op.COMPUTE, 1, 32), I(Op.MOVE, 0, 16)), arena_bytes=64), "POET_E_OVERLAP"),
    (Program(3, (I(Op.COMPUTE, 0, 0), I(Op.MOVE, 0)), arena_bytes=64), "POET_E_OFFSET"),
    (Program(3, (I(Op.COMPUTE, 0, 0), I(Op.MOVE, 0, 8), I(Op.FREE, 0, 0)), arena_bytes=64), "POET_E_OFFSET"),
])
def test_encode_refuses_bad_moves(bad, code):
    g = training_graph([("a", "elementwise", [], 32)], name="t")   # a 32, loss 4, a_bwd 32
    with pytest.raises(BytecodeFormatError) as err:
        encode(bad, g)
    assert err.value.code == code


def test_moves_that_are_fine():
    g = training_graph([("a", "elementwise", [], 32)], name="t")
    ok = Program(3, (I(Op.COMPUTE, 0, 16), I(Op.MOVE, 0, 0), I(Op.MOVE, 0, 8), I(Op.PAGE_OUT, 0, 8), I(Op.FENCE),
                     I(Op.MOVE, 0, 32), I(Op.FREE, 0, 32), I(Op.PAGE_IN, 0, 0), I(Op.FENCE), I(Op.MOVE, 0, 32)),
                 arena_bytes=64)
    assert decode(encode(ok, g)).program == ok


def test_encode_refuses_move_below_version_4():
    for version in (2, 3):
        with pytest.raises(BytecodeFormatError, match="MOVE") as err:
            encode(PROGRAM, GRAPH, version=version)
        assert err.value.code == "POET_E_VERSION"
    assert encode(PROGRAM, GRAPH, version=4) == encode(PROGRAM, GRAPH)


@pytest.mark.parametrize("name", sorted(move_cases()))
def test_every_move_rule_has_its_code(name):
    data, code = move_cases()[name]
    assert decoder_verdict(data) == code


def test_move_in_a_version_3_file_is_a_fence_with_an_operand():
    """Both decoders give POET_E_OPCODE (tests/runtime/test_runtime_move.py for C)."""
    data = encode(PROGRAM, GRAPH, strip=True)
    for version in (2, 3):
        old = fix_crc(data[:4] + bytes([version]) + data[5:])
        with pytest.raises(BytecodeFormatError, match="version 4") as err:
            decode(old)
        assert err.value.code == "POET_E_OPCODE"


def test_disassemble_lists_moves():
    text = disassemble(encode(PROGRAM, GRAPH))
    assert "; .poet v4" in text and "move 3" in text
    assert "MOVE 1 @0 (2048 B)  ; l1" in text
    assert bc.header_figures(decode(encode(PROGRAM, GRAPH)))["move"] == 3
    assert "move" not in disassemble(encode(budget_program(GRAPH, 2600), GRAPH)).splitlines()[3]


FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FILES = [encode(PROGRAM, GRAPH, strip=True), encode(with_moves(budget_program(chain_graph(7), 3000, seed=1),
                                                               chain_graph(7), 1), chain_graph(7), strip=True)]


def test_every_truncation_and_bit_flip_is_refused():
    for data in FILES:
        for cut in range(len(data)):
            assert decoder_verdict(data[:cut]) == "POET_E_TRUNCATED"
    data = FILES[0]
    for bit in range(len(data) * 8):
        bad = bytearray(data)
        bad[bit // 8] ^= 1 << (bit % 8)
        assert decoder_verdict(bytes(bad)) != "POET_OK"


@FAST
@given(st.sampled_from(FILES), st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1,
                                        max_size=6))
def test_random_edits_of_move_files(data, edits):
    bad = bytearray(data)
    for pos, value in edits:
        bad[pos % len(bad)] = value
    assert decoder_verdict(fix_crc(bytes(bad))) in {v for k, v in vars(bc).items() if k.startswith("E_")} | {"POET_OK"}
