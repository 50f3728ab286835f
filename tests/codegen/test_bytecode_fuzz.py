"""Hypothesis fuzzing of the .poet decoder: corrupted input gives a BytecodeError with a
documented code, never another exception, a crash or a hang."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from poet_compiler.codegen import bytecode as bc
from poet_compiler.codegen.bytecode import decode
from tests.codegen.programs import assemble, budget_program, chain_graph, decoder_verdict, fix_crc

CODES = {v for k, v in vars(bc).items() if k.startswith("E_")}
GRAPH = chain_graph(7)
FILES = [bc.encode(budget_program(GRAPH, 3000, seed=s), GRAPH, strip=strip) for s in range(3) for strip in (0, 1)]
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_every_truncation_is_refused():
    for data in FILES:
        for cut in range(len(data)):
            assert decoder_verdict(data[:cut]) == "POET_E_TRUNCATED"


def test_every_single_bit_flip_is_refused():
    data = FILES[0]
    for bit in range(len(data) * 8):
        bad = bytearray(data)
        bad[bit // 8] ^= 1 << (bit % 8)
        assert decoder_verdict(bytes(bad)) != "POET_OK"


@FAST
@given(st.sampled_from(FILES), st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1, max_size=8),
       st.booleans())
def test_random_byte_edits_behind_a_valid_crc(data, edits, keep_length):
    bad = bytearray(data)
    for pos, value in edits:
        if keep_length or pos % 2:
            bad[pos % len(bad)] = value
        else:
            del bad[pos % len(bad)]
    code = decoder_verdict(fix_crc(bytes(bad)))
    assert code in CODES | {"POET_OK"}


@FAST
@given(st.binary(max_size=300))
def test_arbitrary_bytes(blob):
    assert decoder_verdict(blob) in CODES | {"POET_OK"}
    assert decoder_verdict(fix_crc(b"POET\x01" + blob)) in CODES | {"POET_OK"}


@FAST
@given(st.integers(0, 255), st.integers(0, 255))
def test_wrong_magic_or_version(magic_byte, version):
    data = FILES[0]
    if magic_byte != data[0]:
        assert decoder_verdict(bytes([magic_byte]) + data[1:]) == "POET_E_MAGIC"
    changed = data[:4] + bytes([version]) + data[5:]
    if version not in bc.READ_VERSIONS:
        assert decoder_verdict(changed) == "POET_E_VERSION"
    else:  # version 2 reads as version 3 (same layout); the CRC covers the version byte
        assert decoder_verdict(changed) == ("POET_OK" if version == data[4] else "POET_E_CRC")
        assert decode(fix_crc(changed)).program == decode(data).program


@FAST
@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.sampled_from([2, 3]))
def test_wide_arena_and_offsets(arena, offset, version):
    """Arena and offset-table varints of up to 64 bits, in version 2 and 3 files (read by the
    same rules): accepted below 2^59, POET_E_OFFSET at or above it, MALFORMED past 2^64."""
    data = assemble(sizes=[16], arena=arena, offsets=[offset], code=bc._first_byte(0, 0) + b"\x00",
                    n_instr=1, version=version)
    lim = bc.LIMITS[bc.VERSION]
    gap_code = 0 if offset == 16 else offset + 1     # palette entry 0 is 16; else 1 + gap
    code = decoder_verdict(data)
    if arena > lim.max_wide:
        assert code == "POET_E_MALFORMED"
    elif arena >= lim.max_bytes:
        assert code == "POET_E_OFFSET"
    elif gap_code > lim.max_wide:
        assert code == "POET_E_MALFORMED"
    elif offset >= lim.max_bytes or offset + 16 > arena:
        assert code == "POET_E_OFFSET"
    else:
        assert code == "POET_OK"
        assert decode(data).program.instructions[0].offset == offset


@FAST
@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
def test_huge_counts(n_nodes, n_instr, arena):
    data = assemble(sizes=[16], n_nodes=n_nodes, arena=arena, offsets=None, code=b"", n_instr=n_instr,
                    flags=bc.F_SIZES | bc.F_ARENA)
    code = decoder_verdict(data)
    if arena >= bc.MAX_ARENA:
        assert code == "POET_E_OFFSET"
    elif n_nodes > bc.MAX_NODES or n_instr > 0 or n_nodes == 0:  # 0 nodes: palette too big
        assert code == "POET_E_COUNT"
    else:
        assert code == "POET_OK"
