"""Programs with MOVE (arena compaction, format version 4) for the bytecode and runtime tests.

``hand_program``: a hand-built schedule of ``chain_graph(3)`` in which three buffers are
moved down to offset 0 (two of the moves overlap their own old region). ``with_moves``:
any valid planned Program with MOVEs inserted at random that keep it valid.
``move_cases``: hand-assembled version-4 files, one per MOVE rule, with the code both
decoders give.
"""

from __future__ import annotations

import random

from poet_compiler.graph.ir import TrainingGraph
from poet_compiler.schedule.program import Instruction, Op, Program
from tests.codegen.programs import assemble, chain_graph, op

I = Instruction  # noqa: E741


def hand_program() -> tuple[TrainingGraph, Program]:
    """chain_graph(3): l0 1024 B, l1 2048, l2 3072, loss 4, l2_bwd 3072, l1_bwd 2048, l0_bwd 1024."""
    g = chain_graph(3)
    p = Program(g.n, (
        I(Op.COMPUTE, 0, 0), I(Op.COMPUTE, 1, 1024), I(Op.PAGE_OUT, 0, 0), I(Op.FENCE), I(Op.FREE, 0, 0),
        I(Op.MOVE, 1, 0),                                   # [1024, 3072) -> [0, 2048): overlaps itself
        I(Op.COMPUTE, 2, 2048), I(Op.COMPUTE, 3, 5120), I(Op.FREE, 2, 2048),
        I(Op.COMPUTE, 4, 2048), I(Op.FREE, 3, 5120), I(Op.FREE, 1, 0),
        I(Op.MOVE, 4, 0),                                   # [2048, 5120) -> [0, 3072): overlaps itself
        I(Op.PAGE_IN, 0, 3072), I(Op.FENCE), I(Op.COMPUTE, 5, 4096), I(Op.FREE, 4, 0), I(Op.FREE, 0, 3072),
        I(Op.MOVE, 5, 0),                                   # [4096, 6144) -> [0, 2048)
        I(Op.COMPUTE, 6, 2048), I(Op.FREE, 5, 0)), arena_bytes=6144)
    return g, p


def _overlaps(a: int, asize: int, b: int, bsize: int) -> bool:
    return asize > 0 and bsize > 0 and a < b + bsize and b < a + asize


def with_moves(program: Program, graph: TrainingGraph, seed: int, rate: float = 0.3) -> Program:
    """``program`` (planned, valid) with MOVEs inserted that keep it valid.

    At most one buffer is displaced at a time: a resident, not-in-flight buffer moves to a
    free region (right after a live buffer, at 0, right below one, or a few bytes off
    such a spot, so that some offsets need the offset table), and moves back to its
    planned offset (free in the original layout while the node lives) before anything
    would touch that region, before its PAGE_OUT, and never while in flight. Its FREE
    then names where it is.
    """
    assert program.arena_bytes is not None
    rng = random.Random(seed)
    arena = program.arena_bytes
    size = [n.output_bytes for n in graph.nodes]
    work = [n.workspace_bytes for n in graph.nodes]
    planned: dict[int, int] = {}     # resident node -> planned offset
    moved: tuple[int, int] | None = None   # (node, current offset) of the displaced one
    in_flight: set[int] = set()
    out: list[Instruction] = []

    def back() -> None:
        nonlocal moved
        assert moved is not None and moved[0] not in in_flight
        out.append(I(Op.MOVE, moved[0], planned[moved[0]]))
        moved = None

    for ins in program:
        if ins.op in (Op.COMPUTE, Op.PAGE_IN):
            assert ins.offset is not None
            extent = size[ins.node] + (work[ins.node] if ins.op is Op.COMPUTE else 0)
            if moved is not None and _overlaps(ins.offset, extent, moved[1], size[moved[0]]):
                back()
        elif ins.op is Op.PAGE_OUT and moved is not None and moved[0] == ins.node:
            back()
        if ins.op is Op.FREE and moved is not None and moved[0] == ins.node:
            out.append(I(Op.FREE, ins.node, moved[1]))
            moved = None
        else:
            out.append(ins)
        if ins.op in (Op.COMPUTE, Op.PAGE_IN):
            planned[ins.node] = ins.offset  # type: ignore[assignment]
        if ins.op is Op.FREE:
            planned.pop(ins.node, None)
        if ins.op in (Op.PAGE_IN, Op.PAGE_OUT):
            in_flight.add(ins.node)
        if ins.op is Op.FENCE:
            in_flight.clear()
        if rng.random() >= rate:
            continue
        # Displace one more buffer (moving the displaced one again is fine too).
        cands = [n for n in planned if n not in in_flight and size[n] and (moved is None or moved[0] == n)]
        if not cands:
            continue
        node = rng.choice(sorted(cands))
        here = moved[1] if moved is not None else planned[node]
        others = [(planned[j], size[j]) for j in planned if j != node]
        spots = {0} | {at + s for at, s in others} | {at - size[node] for at, _ in others} | {arena - size[node]}
        spots |= {x + d for x in list(spots) for d in (8, 24)}
        fits = sorted(x for x in spots if 0 <= x and x + size[node] <= arena and x != here
                      and not any(_overlaps(x, size[node], at, s) for at, s in others))
        if not fits:
            continue
        to = rng.choice(fits)
        out.append(I(Op.MOVE, node, to))
        moved = None if to == planned[node] else (node, to)
    return Program(program.n_nodes, tuple(out), program.arena_bytes)


def move_cases() -> dict[str, tuple[bytes, str]]:
    """Version-4 files around one MOVE each, with the code both decoders give.

    Base: three 16-byte nodes, a 48-byte arena; offsets 0/16/24/32/40 (24 and 40 only for
    the bad moves). MOVE = code 7, immediate 1 + zz(node - prev_compute), then a place.
    """
    sizes, offs = [16, 16, 16], [0, 16, 24, 32, 40]
    # COMPUTE 0 @0 (slot 0), COMPUTE 1 @16 (slot +1), FREE 0 (FREE_C, zz(-1) = 1)
    head = op(0, 0) + b"\x00" + op(0, 0) + b"\x02" + op(3, 1)
    # MOVE 1 -> @0 (immediate 1 + zz(0), placement 1: "above", rank 0 = offset 0),
    # COMPUTE 2 @32 (explicit: slot 1 -> 3, zz(+2) = 4)
    good = head + op(7, 1) + b"\x01" + op(0, 0) + b"\x04"

    def f(code: bytes, n_instr: int, version: int = 4, **kw) -> bytes:
        args = dict(sizes=sizes, arena=48, offsets=offs)
        args.update(kw)
        # Trailing FENCEs keep n_instr >= the offset-table size (never reached on errors).
        return assemble(code=code + op(7, 0) * 3, n_instr=n_instr + 3, version=version,  # type: ignore[arg-type]
                        **args)

    # head leaves node 1 at 16 (prev_compute 1); MOVE 1 with an explicit slot:
    # prev_slot is 1 (offset 16): zz(+1) = 2 -> offset 24, zz(+3) = 6 -> offset 40.
    return {
        "move_ok": (f(good, 5), "POET_OK"),
        "move_v3": (f(good, 5, version=3), "POET_E_OPCODE"),
        "move_v2": (f(good, 5, version=2), "POET_E_OPCODE"),
        "move_absent": (f(head + op(7, 1 + 1) + b"\x01", 4), "POET_E_STATE"),        # MOVE 0: freed
        "move_node": (f(head + op(7, 1 + 20) + b"\x01", 4), "POET_E_NODE"),          # MOVE 11
        "move_node_negative": (f(head + op(7, 1 + 3) + b"\x01", 4), "POET_E_NODE"),  # MOVE -1
        "move_rank": (f(head + op(7, 1) + b"\x05", 4), "POET_E_OFFSET"),             # above, rank 2 of 1
        "move_slot": (f(head + op(7, 1) + b"\x00\x10", 4), "POET_E_OFFSET"),         # slot 9 of 5
        "move_past_arena": (f(head + op(7, 1) + b"\x00\x06", 4), "POET_E_OFFSET"),   # @40 + 16 > 48
        # COMPUTE 0 @0, COMPUTE 1 @16, MOVE 0 (zz(-1) = 1) -> slot 1 + 1 = @24: overlaps node 1
        "move_overlap": (f(op(0, 0) + b"\x00" + op(0, 0) + b"\x02" + op(7, 2) + b"\x00\x02", 3),
                         "POET_E_OVERLAP"),
        "move_truncated": (assemble(sizes=sizes, arena=48, offsets=[0], code=op(0, 0) + b"\x00" + op(7, 1),
                                    n_instr=2, version=4), "POET_E_TRUNCATED"),
        "move_below": (f(head + op(7, 1) + b"\x02", 4), "POET_OK"),                 # below the arena end: @32
        # "below", rank 1: node 1's own start (16) is no candidate for its MOVE
        "move_below_skips_itself": (f(head + op(7, 1) + b"\x04", 4), "POET_E_OFFSET"),
    }
