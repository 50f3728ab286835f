"""Program: the flat instruction list a schedule linearizes into (see docs/model.md).

A Program is what every output is generated from — the bytecode, the PyTorch executor,
the C runtime — and what the simulator replays. Instructions carry a node id and, once
the arena planner has run, the arena offset of the buffer they touch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any


class Op(IntEnum):
    """Instruction opcodes; the numbers are the bytecode's opcodes."""

    COMPUTE = 0
    PAGE_OUT = 1
    PAGE_IN = 2
    FREE = 3
    FENCE = 4
    MOVE = 5    # copy a resident buffer to a new arena offset (compaction; docs/model.md)


@dataclass(frozen=True)
class Instruction:
    op: Op
    node: int = -1          # -1 for FENCE
    offset: int | None = None  # arena offset of the node's buffer (None before planning);
    # for MOVE, the buffer's new offset (it was at the offset its last placement gave)

    def __str__(self) -> str:
        if self.op is Op.FENCE:
            return "FENCE"
        at = "" if self.offset is None else f" @{self.offset}"
        return f"{self.op.name} {self.node}{at}"


@dataclass(frozen=True)
class Program:
    """Instructions in execution order, for a graph of ``n_nodes`` nodes."""

    n_nodes: int
    instructions: tuple[Instruction, ...]
    arena_bytes: int | None = None  # set by the arena planner
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __iter__(self):
        return iter(self.instructions)

    def __len__(self) -> int:
        return len(self.instructions)

    def count(self, op: Op) -> int:
        return sum(1 for ins in self.instructions if ins.op is op)

    @property
    def n_compute(self) -> int:
        return self.count(Op.COMPUTE)

    @property
    def n_recompute(self) -> int:
        return self.n_compute - self.n_nodes

    @property
    def n_page_in(self) -> int:
        return self.count(Op.PAGE_IN)

    @property
    def n_page_out(self) -> int:
        return self.count(Op.PAGE_OUT)

    @property
    def n_move(self) -> int:
        return self.count(Op.MOVE)

    def listing(self) -> str:
        return "\n".join(f"{k:5d}  {ins}" for k, ins in enumerate(self.instructions))
