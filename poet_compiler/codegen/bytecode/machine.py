"""Where every node lives while a program runs: the rules encoder and decoder share."""

from __future__ import annotations

from poet_compiler.codegen.bytecode.format import E_NODE, E_OFFSET, E_OVERLAP, E_STATE, BytecodeFormatError
from poet_compiler.schedule.program import Op


class _Machine:
    """Tracks where every node lives; shared by encoder and decoder so both apply the
    same rules as the C runtime's validation pass (docs/bytecode.md, "Validation")."""

    def __init__(self, n_nodes: int, sizes: tuple[int, ...] | None, arena: int | None,
                 check_offsets: bool, workspace: tuple[int, ...] | None = None) -> None:
        self.n = n_nodes
        self.sizes = sizes
        self.workspace = workspace
        self.arena = arena
        self.check_offsets = check_offsets
        self.where: dict[int, int | None] = {}   # resident node -> offset (None: no offsets)
        self.flash: set[int] = set()

    def _node(self, k: int, node: int) -> None:
        if not 0 <= node < self.n:
            raise BytecodeFormatError(E_NODE, f"instruction {k}: node {node} out of range 0..{self.n - 1}")

    def alloc(self, k: int, op: Op, node: int, offset: int | None) -> None:
        self._node(k, node)
        if node in self.where:
            raise BytecodeFormatError(E_STATE, f"instruction {k}: {op.name} {node} but node {node} is already in RAM")
        if op is Op.PAGE_IN and node not in self.flash:
            raise BytecodeFormatError(E_STATE, f"instruction {k}: PAGE_IN {node} but node {node} was never paged out")
        # A compute's workspace lies right after its output, for that compute only.
        self._check_region(k, f"{op.name} {node}", node, offset, op)
        self.where[node] = offset

    def _check_region(self, k: int, what: str, node: int, offset: int | None, op: Op) -> None:
        """``node``'s region at ``offset`` (``extent`` bytes) lies in the arena and
        overlaps no live buffer but the node's own (a MOVE's old place)."""
        if not self.check_offsets or offset is None:
            return
        if self.sizes is None:
            if self.arena is not None and offset > self.arena:
                raise BytecodeFormatError(E_OFFSET, f"instruction {k}: {what} @{offset} is past the "
                                                    f"{self.arena} B arena")
            return
        size = self.extent(op, node)
        if self.arena is not None and offset + size > self.arena:
            raise BytecodeFormatError(
                E_OFFSET, f"instruction {k}: {what} @{offset} + {size} B overruns the {self.arena} B arena")
        if size:
            for other, at in self.where.items():
                osize = self.sizes[other]
                if other != node and osize and at is not None and offset < at + osize and at < offset + size:
                    raise BytecodeFormatError(
                        E_OVERLAP, f"instruction {k}: {what} @{offset}+{size} overlaps live node {other} @{at}+{osize}")

    def extent(self, op: Op, node: int) -> int:
        """Bytes an allocation (or a MOVE) occupies while it happens: output, plus workspace for a COMPUTE."""
        assert self.sizes is not None
        return self.sizes[node] + (self.workspace[node] if self.workspace and op is Op.COMPUTE else 0)

    def ends(self, skip: int | None = None) -> list[int]:
        """"Above" candidates, ascending: 0 and the end of every resident buffer but ``skip``'s."""
        assert self.sizes is not None
        return sorted({0} | {at + self.sizes[j] for j, at in self.where.items() if at is not None and j != skip})

    def starts(self, skip: int | None = None) -> list[int]:
        """"Below" candidates, descending: the arena's end and the start of every resident
        buffer but ``skip``'s."""
        assert self.arena is not None
        return sorted({self.arena} | {at for j, at in self.where.items() if at is not None and j != skip},
                      reverse=True)

    def place_code(self, op: Op, node: int, offset: int) -> int | None:
        """Smallest placement code that yields ``offset`` (docs/bytecode.md), or None. A
        MOVE's candidates leave out the moved buffer itself (its old region may overlap the new)."""
        if self.sizes is None:
            return None
        # A candidate's rank is how many distinct candidates come before it: counted, not
        # sorted (the encoder asks for every allocation; sorting took 0.1 s on gpt2_large).
        best: int | None = None
        skip = node if op is Op.MOVE else None
        live = [(at, self.sizes[j]) for j, at in self.where.items() if at is not None and j != skip]
        ends = {0} | {at + size for at, size in live}
        if offset in ends:
            best = 2 * sum(1 for e in ends if e < offset) + 1
        if self.arena is not None:
            target = offset + self.extent(op, node)
            starts = {self.arena} | {at for at, _ in live}
            if target in starts:
                code = 2 * sum(1 for s in starts if s > target) + 2
                best = code if best is None else min(best, code)
        return best

    def place(self, k: int, op: Op, node: int, code: int) -> int:
        """Offset of placement code ``code`` >= 1 for ``node`` (range-checked by the caller)."""
        if self.sizes is None or (code % 2 == 0 and self.arena is None):
            raise BytecodeFormatError(E_OFFSET, f"instruction {k}: placement code {code} needs the "
                                                f"{'size table' if self.sizes is None else 'arena size'}")
        rank = (code - 1) // 2
        skip = node if op is Op.MOVE else None
        cands = self.ends(skip) if code % 2 else self.starts(skip)
        if rank >= len(cands):
            raise BytecodeFormatError(E_OFFSET, f"instruction {k}: placement code {code} asks for candidate "
                                                f"{rank} of {len(cands)}")
        if code % 2:
            return cands[rank]
        offset = cands[rank] - self.extent(op, node)
        if offset < 0:
            raise BytecodeFormatError(E_OFFSET, f"instruction {k}: {op.name} {node} placed below "
                                                f"@{cands[rank]} starts before the arena")
        return offset

    def touch(self, k: int, op: Op, node: int) -> int | None:
        """FREE / PAGE_OUT: the node must be resident; returns its offset."""
        self._node(k, node)
        if node not in self.where:
            raise BytecodeFormatError(E_STATE, f"instruction {k}: {op.name} {node} but node {node} is not in RAM")
        at = self.where[node]
        if op is Op.FREE:
            del self.where[node]
        else:
            self.flash.add(node)
        return at

    def move(self, k: int, node: int, offset: int | None) -> None:
        """MOVE (version 4): the node must be resident; its new region must lie in the arena
        and overlap no other live buffer (its own old region may overlap: memmove)."""
        self._node(k, node)
        if node not in self.where:
            raise BytecodeFormatError(E_STATE, f"instruction {k}: MOVE {node} but node {node} is not in RAM")
        self._check_region(k, f"MOVE {node} to", node, offset, Op.MOVE)
        self.where[node] = offset
