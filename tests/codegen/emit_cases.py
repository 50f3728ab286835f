"""Schedules the emit-c tests run: two budgets per MCU model, one that recomputes and
one that pages, from fast heuristic strategies (the optimizer is not under test here)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import poet_compiler as pc
from poet_compiler.schedule.program import Op


@dataclass(frozen=True)
class Case:
    model: str
    ram: str
    strategy: str
    pages: bool       # the schedule must page (else: it must recompute)

    @property
    def id(self) -> str:
        return f"{self.model}-{self.ram}-{self.strategy}"


CASES = (
    Case("kws_dscnn", "60%", "chen_greedy", pages=False),
    Case("kws_dscnn", "35%", "capuchin", pages=True),
    Case("cifar_cnn_tiny", "60%", "chen_greedy", pages=False),
    Case("cifar_cnn_tiny", "70%", "capuchin", pages=True),
)


def compile_case(case: Case, out_dir: Path) -> Path:
    """Compile ``case`` to ``out_dir/<id>.poet`` (+ sidecar) and check it exercises what it claims."""
    comp = pc.compile(case.model, "m4", case.ram, strategy=case.strategy)
    program = comp.program
    assert program is not None, f"{case.id}: no schedule"
    if case.pages:
        assert program.count(Op.PAGE_OUT) > 0 and program.count(Op.PAGE_IN) > 0, f"{case.id} does not page"
    else:
        assert program.count(Op.COMPUTE) > comp.graph.n, f"{case.id} does not recompute"
    path, _ = comp.save(out_dir / f"{case.id}.poet")
    return path
