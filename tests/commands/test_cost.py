"""``poetc cost``: "fits RAM?" is the checkpoint-all peak the simulator computes, not the
sum of every output (activations die at their last use, gradients right after theirs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from poet_compiler.cli import main
from poet_compiler.devices.cost_model import costs_for
from poet_compiler.devices.profile import load_profile
from poet_compiler.graph.io import graph_from_dict
from poet_compiler.solve.budgets import reference
from tests.viz.graphs import chain_dict

M0_RAM = 32768


@pytest.fixture
def graph_file(tmp_path: Path) -> Path:
    data = chain_dict(8, size=2000, name="chain8")
    path = tmp_path / "chain8.json"
    path.write_text(json.dumps(data))
    return path


def test_fits_ram_is_the_checkpoint_all_peak(graph_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph = graph_from_dict(json.loads(graph_file.read_text()), "chain8")
    peak = reference(graph, costs_for(graph, load_profile("m0"))).peak_bytes
    # The case that told them apart: every output together is over m0's RAM, the peak is not.
    assert peak <= M0_RAM < graph.activation_bytes
    assert main(["cost", str(graph_file), "-d", "m0", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["checkpoint_all_peak_bytes"] == peak and row["ram_bytes"] == M0_RAM
    assert row["fits_ram"] is True
    assert main(["cost", str(graph_file), "-d", "m0"]) == 0
    out = capsys.readouterr().out
    assert "yes" in out and "needs remat" not in out


def test_over_ram_says_no(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "big.json"
    path.write_text(json.dumps(chain_dict(8, size=20000, name="big")))
    assert main(["cost", str(path), "-d", "m0", "-d", "a72", "--json"]) == 0
    rows = {r["device"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["m0"]["fits_ram"] is False and rows["a72"]["fits_ram"] is True
    assert rows["m0"]["checkpoint_all_peak_bytes"] > M0_RAM
