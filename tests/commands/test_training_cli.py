"""``--optimizer`` and ``--train`` through the installed console script: bad input is one
line and exit 2; a compiled step with the update verifies bitwise against torch.optim."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.commands.test_usage_errors import run_poetc

BAD = [
    (["compile", "mlp", "-d", "m4", "--train", "net.0.*,head.*"], "pattern 'head.*' matches no parameter of MLP"),
    (["compile", "mlp", "-d", "m4", "--train", "classifier"], "pattern 'classifier' matches no parameter"),
    (["compile", "mlp", "-d", "m4", "--optimizer", "sgd:momentum=0.9"], "sgd needs lr"),
    (["compile", "mlp", "-d", "m4", "--optimizer", "adam:lr=1e-3,beta3=2"], "beta3=2"),
    (["trace", "mlp", "--optimizer", "nadam:lr=1"], "unknown optimizer 'nadam'"),
]


@pytest.mark.parametrize(("args", "says"), BAD, ids=[" ".join(a[2:] if a[0] == "compile" else a) for a, _ in BAD])
def test_bad_training_options_are_one_line_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    proc = run_poetc(*args, cwd=tmp_path)
    err = proc.stderr.strip()
    assert proc.returncode == 2, proc.stderr
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err, err
    assert says in err, err
    assert list(tmp_path.iterdir()) == []


def test_graph_file_refuses_training_options(tmp_path: Path) -> None:
    graph = tmp_path / "g.json"
    assert run_poetc("trace", "mlp", "-o", str(graph), cwd=tmp_path).returncode == 0
    proc = run_poetc("compile", str(graph), "-d", "m4", "--optimizer", "sgd:lr=0.1", cwd=tmp_path)
    assert proc.returncode == 2 and "applies to traced models" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_compile_and_verify_with_update_and_subset(tmp_path: Path) -> None:
    out = tmp_path / "s.poet"
    proc = run_poetc("compile", "mlp", "-d", "m4", "--ram", "100%", "--strategy", "chen_greedy", "-q", "--json",
                     "--optimizer", "sgd:lr=0.05,momentum=0.9", "--train", "net.4.*,bias", "-o", str(out),
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    assert rep["optimizer"] == "sgd:lr=0.05,momentum=0.9" and rep["train"] == "net.4.*,bias"
    split = rep["ram_split"]
    assert rep["activations_only"] is False and split["optimizer_state"] > 0 and split["grads"] == 0
    assert rep["ram_budget_bytes"] == sum(v for k, v in split.items() if k not in ("arena", "total")) \
        + rep["checkpoint_all_peak_bytes"]   # 100 %: the fixed bytes plus the whole activation peak
    side = json.loads(out.with_suffix(".json").read_text())
    assert side["optimizer"] == rep["optimizer"]
    proc = run_poetc("verify", "mlp", "-s", str(out), "--steps", "3", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads(proc.stdout)
    assert res["ok"] and res["params_bitwise"] and res["state_bitwise"] and res["loss_bitwise"]
    assert res["steps"] == 3 and res["n_params"] == 6 and res["optimizer"] == "sgd:lr=0.05,momentum=0.9"
    # Traced again with the sidecar's options: 4 trained parameters, 4 update nodes.
    proc = run_poetc("trace", "mlp", "--optimizer", "sgd:lr=0.05,momentum=0.9", "--train", "net.4.*,bias",
                     "-o", str(tmp_path / "g.json"), cwd=tmp_path)
    graph = json.loads((tmp_path / "g.json").read_text())
    updates = [n for n in graph["nodes"] if n["kind"] == "update"]
    assert sorted(n["name"] for n in updates) == sorted(
        f"update.{p}" for p in ("net.0.bias", "net.2.bias", "net.4.weight", "net.4.bias"))
    assert all(n["output_bytes"] == 0 and n["after"] for n in updates)
