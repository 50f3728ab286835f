"""The .poet bytecode on the real model zoo: round trips at 30/50/70 % budgets
through ``poet_compiler.api.compile`` and the ResNet-18-CIFAR size target."""

from __future__ import annotations

import pytest

from poet_compiler.api import compile
from poet_compiler.codegen.bytecode import decode, encode
from tests.codegen.zoo_cases import CASES, zoo_case


@pytest.mark.parametrize("model, ram", CASES)
def test_zoo_roundtrip(model, ram):
    case = zoo_case(model, ram)
    c = case.compilation
    program = c.result.program
    assert program.arena_bytes is not None      # arena-planned: every allocation has an offset
    for strip in (True, False):
        data = c.bytecode(strip=strip)
        decoded = decode(data)
        assert decoded.program == program
        assert decoded.sizes == tuple(n.output_bytes for n in c.graph.nodes)
        assert decoded.workspace in (None, tuple(n.workspace_bytes for n in c.graph.nodes))
        assert decoded.stripped is strip
    assert data == encode(program, c.graph)     # deterministic


@pytest.mark.parametrize("strategy", ["chen_greedy", "capuchin"])
def test_zoo_resnet18_size_target(strategy):
    """The size target: zoo ResNet-18-CIFAR (162 op nodes) at a 50 % budget, stripped:
    < 1 KiB and <= 2 bytes per instruction, counting the whole file."""
    c = compile("resnet18_cifar", "m4", ram="50%", strategy=strategy)
    assert c.result.status == "feasible"
    report: dict = {}
    data = encode(c.result.program, c.graph, strip=True, report=report)
    assert len(data) < 1024
    assert len(data) / len(c.result.program) <= 2.0
    # Most allocations are placed relative to live buffers, not through the offset table.
    assert report["placed"] > 0.75 * report["allocations"]
    assert decode(data).program == c.result.program
