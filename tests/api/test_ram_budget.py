"""What ``--ram`` covers: by default everything the step keeps in RAM on the device (the
arena, parameters, gradients, optimizer state, batch, outputs and the runtime's reserve);
with ``activations_only`` the arena alone (POET's convention). Relative budgets give the
arena the same bytes under both conventions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import poet_compiler as pc
from poet_compiler.devices.profile import load_profile
from poet_compiler.solve.ram import FixedRam
from tests.commands.test_usage_errors import run_poetc

M4 = load_profile("m4")


def test_the_budget_covers_the_arena_and_everything_beside_it() -> None:
    c = pc.compile("digits_cnn", "m4", "192k", strategy="chen_greedy")
    g, ram = c.graph, c.ram
    reserve = M4.reserve
    assert reserve is not None
    assert ram == FixedRam(params=g.param_bytes, grads=g.grad_bytes, optimizer_state=0, batch=g.input_bytes,
                           outputs=g.step_output_bytes, reserve=reserve.bytes_for(g.n))
    assert ram.grads > 0 and ram.outputs > 0 and ram.reserve == reserve.stack_bytes + reserve.state_bytes \
        + reserve.per_node_bytes * g.n
    assert c.problem.fixed == ram and c.problem.activation_budget == 192 * 1024 - ram.total
    rep = c.report()
    split = rep["ram_split"]
    assert rep["activations_only"] is False and rep["device_ram_bytes"] == M4.ram_bytes
    assert split["arena"] == c.result.arena_bytes and split["total"] == c.result.arena_bytes + ram.total
    assert split["total"] <= rep["ram_budget_bytes"] == 192 * 1024


def test_the_default_budget_is_the_device_ram() -> None:
    c = pc.compile("digits_cnn", "m4", strategy="checkpoint_all")
    assert c.problem.ram_budget_bytes == M4.ram_bytes
    assert c.ram_split["total"] is not None and c.ram_split["total"] <= M4.ram_bytes


def test_activations_only_is_poets_convention() -> None:
    c = pc.compile("digits_cnn", "m4", "160k", strategy="chen_greedy", activations_only=True)
    assert c.problem.fixed == FixedRam() and c.problem.activation_budget == 160 * 1024
    rep = c.report()
    assert rep["activations_only"] is True
    # The split is still reported: what the firmware needs beside the arena.
    assert rep["ram_split"]["params"] == c.graph.param_bytes and rep["ram_split"]["reserve"] > 0


def test_a_relative_budget_gives_the_arena_the_same_bytes_under_both_conventions() -> None:
    full = pc.compile("digits_cnn", "m4", "50%", strategy="checkpoint_all")
    only = pc.compile("digits_cnn", "m4", "50%", strategy="checkpoint_all", activations_only=True)
    assert full.problem.activation_budget == only.problem.activation_budget == only.problem.ram_budget_bytes
    assert full.problem.ram_budget_bytes == only.problem.ram_budget_bytes + full.ram.total


def test_optimizer_state_counts_and_gradients_live_in_the_arena() -> None:
    c = pc.compile("digits_cnn", "m4", "100%", strategy="checkpoint_all", optimizer="sgd:lr=0.1,momentum=0.9")
    assert c.ram.grads == 0 and c.ram.optimizer_state == c.graph.optimizer_state_bytes > 0
    assert c.problem.activation_budget == c.reference.peak_bytes


def test_a_graph_without_device_counts_its_own_figures_and_no_reserve() -> None:
    from poet_compiler.graph.io import graph_from_dict
    from tests.viz.graphs import chain_dict

    d = chain_dict()
    d["param_bytes"], d["input_bytes"] = 100, 20
    g = graph_from_dict(d)
    c = pc.compile(g, None, "100%", strategy="checkpoint_all")
    assert c.ram == FixedRam(params=100, batch=20) and c.problem.activation_budget == c.reference.peak_bytes


def test_compare_and_sweep_use_the_same_meaning() -> None:
    df = pc.compare("digits_cnn", "m4", ram=["192k", "80%"], strategies=["chen_greedy"])
    one = pc.compile("digits_cnn", "m4", "192k", strategy="chen_greedy")
    row = df.iloc[0]
    assert row["ram_budget_bytes"] == 192 * 1024 and not row["activations_only"]
    assert row["arena_bytes"] == one.result.arena_bytes and row["energy_j"] == one.result.energy_j
    assert json.loads(row["ram_split"]) == one.ram_split
    only = pc.compare("digits_cnn", "m4", ram=["80%"], strategies=["chen_greedy"], activations_only=True)
    assert only.iloc[0]["ram_budget_bytes"] == df.iloc[1]["ram_budget_bytes"] - one.ram.total
    assert df.iloc[1]["status"] != "infeasible"
    assert only.iloc[0]["energy_j"] == df.iloc[1]["energy_j"]   # the arena's budget is the same


@pytest.mark.smoke
def test_a_budget_below_the_fixed_bytes_is_one_line_with_the_split_exit_1(tmp_path: Path) -> None:
    """Through the installed console script: the split and the smallest RAM that can work."""
    proc = run_poetc("compile", "digits_cnn", "-d", "m4", "--ram", "20k", "--json", "-o", str(tmp_path / "d.poet"),
                     cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("infeasible: RAM 20.0 KiB is below the "), err
    for part in ("parameters", "gradients", "batch", "outputs", "runtime reserve", "smallest RAM that can work is"):
        assert part in err, (part, err)
    assert not (tmp_path / "d.poet").exists()
    # The smallest budget named (exact on this small graph) is one that works.
    need = json.loads(proc.stdout)["min_ram_bytes"]
    assert need is not None and need > 20 * 1024
    assert pc.compile("digits_cnn", "m4", need).result.ok
    assert not pc.compile("digits_cnn", "m4", need - 1).result.ok
