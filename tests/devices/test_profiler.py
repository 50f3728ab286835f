"""Host profiler: a quick real run writes a valid profile that the cost model can use."""

from __future__ import annotations

from pathlib import Path

import pytest

from poet_compiler.cli import main
from poet_compiler.devices.cost_model import costs_for
from poet_compiler.devices.profile import load_profile
from poet_compiler.devices.profiler import RaplMeter, op_table_from_times, profile_host, time_fx_nodes
from poet_compiler.errors import ProfileError
from poet_compiler.graph.io import graph_from_dict

NO_RAPL = Path("/nonexistent-powercap")


def _graph():
    nodes = [
        {"id": 0, "name": "mm", "kind": "forward", "op": "aten.mm", "op_class": "matmul", "inputs": [],
         "output_bytes": 4096, "flops": 2 * 32**3, "extra": {"signature": "aten.mm(f32[32,32],f32[32,32])"}},
        {"id": 1, "name": "relu", "kind": "forward", "op": "aten.relu", "op_class": "elementwise", "inputs": [0],
         "output_bytes": 4096, "flops": 1024, "extra": {"signature": "aten.relu(f32[32,32])"}},
        {"id": 2, "name": "relu2", "kind": "forward", "op": "aten.relu", "op_class": "elementwise", "inputs": [1],
         "output_bytes": 4096, "flops": 1024, "extra": {"signature": "aten.relu(f32[32,32])"}},
    ]
    return graph_from_dict({"format": "poet-graph/1", "name": "tiny", "nodes": nodes}, "tiny")


def test_quick_cli_run_writes_a_usable_profile(tmp_path: Path) -> None:
    out = tmp_path / "host.json"
    rc = main(["profile", "-o", str(out), "--quick", "--power-w", "15", "--idle-w", "5",
               "--page-file", str(tmp_path / "paging.bin")])
    assert rc == 0
    p = load_profile(out)
    assert p.measurement is not None and p.measurement.energy_from == "power-w"
    assert p.static_power_w == 5.0 and p.page_in.power_w == 15.0
    assert not (tmp_path / "paging.bin").exists()  # the paging file is cleaned up
    for c in ("conv", "matmul", "elementwise", "norm", "reduction", "data", "other"):
        assert getattr(p.compute, c).throughput_flops > 0
    assert p.compute.other.throughput_flops == min(
        getattr(p.compute, c).throughput_flops for c in ("conv", "matmul", "elementwise", "norm", "reduction", "data"))
    assert p.page_in.bandwidth_bps > 0 and p.page_out.latency_s >= 0 and p.memory.bandwidth_bps > 0
    t = costs_for(_graph(), p)
    assert all(s > 0 for s in t.compute_s) and t.device == "host" and t.static_w == 5.0


def test_refuses_without_an_energy_source() -> None:
    with pytest.raises(ProfileError, match="no readable RAPL.*--power-w"):
        profile_host(quick=True, rapl_root=NO_RAPL)
    with pytest.raises(ProfileError, match="--power-w must be positive"):
        profile_host(quick=True, power_w=-1.0, rapl_root=NO_RAPL)


def test_rapl_meter_reads_package_counters_with_wraparound(tmp_path: Path) -> None:
    pkg = tmp_path / "intel-rapl:0"
    sub = tmp_path / "intel-rapl:0:0"
    for d in (pkg, sub):
        d.mkdir()
        (d / "max_energy_range_uj").write_text("1000\n")
    (pkg / "energy_uj").write_text("900\n")
    (sub / "energy_uj").write_text("5\n")
    m = RaplMeter(tmp_path)
    assert m.available and len(m.domains) == 1  # the sub-domain is inside the package: not counted twice
    start = m.read_uj()
    (pkg / "energy_uj").write_text("100\n")  # wrapped: 900 -> 1000 -> 100 = 200 uJ
    assert m.joules_since(start) == pytest.approx(200e-6)
    assert not RaplMeter(NO_RAPL).available


def test_op_table_from_fx_times() -> None:
    import torch
    import torch.fx

    class M(torch.nn.Module):
        def forward(self, a, b):
            return torch.relu(torch.relu(torch.mm(a, b)))

    gm = torch.fx.symbolic_trace(M())
    times = time_fx_nodes(gm, [torch.randn(32, 32), torch.randn(32, 32)])
    names = [n.name for n in gm.graph.nodes if n.op == "call_function"]
    assert set(names) <= set(times) and all(times[n] > 0 for n in names)
    table = op_table_from_times(_graph(), [[names[0]], [names[1]], [names[2]]], times, overhead_s=1e-9)
    assert set(table) == {"aten.mm(f32[32,32],f32[32,32])", "aten.relu(f32[32,32])"}
    assert table["aten.mm(f32[32,32],f32[32,32])"] == pytest.approx(times[names[0]])


def test_fx_times_are_taken_as_the_step_runs_each_op_once_per_run() -> None:
    """Each op runs once per run of the graph (a warm-up and ``passes`` timed runs), not
    again right after itself: its time is the one the step pays."""
    import torch
    import torch.fx

    calls: list[int] = []

    def counted(x):
        calls.append(1)
        return x + 1

    g = torch.fx.Graph()
    g.output(g.call_function(counted, (g.call_function(torch.relu, (g.placeholder("a"),)),)))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    times = time_fx_nodes(gm, [torch.randn(8)], passes=3)
    assert len(calls) == 4
    assert {n.name for n in gm.graph.nodes if n.op == "call_function"} == set(times)


def test_profile_with_model_times_every_op_signature(tmp_path: Path) -> None:
    """``poetc profile --model NAME``: the per-op table covers the model's signatures, and
    the cost model uses it for the model's nodes (it failed on every model before)."""
    from poet_compiler.frontends import load_model

    out = tmp_path / "host.json"
    rc = main(["profile", "-o", str(out), "--quick", "--power-w", "15", "--model", "mlp",
               "--page-file", str(tmp_path / "paging.bin")])
    assert rc == 0
    p = load_profile(out)
    graph = load_model("mlp").graph
    sigs = {n.extra["signature"] for n in graph.nodes if isinstance(n.extra.get("signature"), str)}
    assert sigs and set(p.op_table) == sigs
    assert all(v.compute_s > 0 and v.compute_j > 0 for v in p.op_table.values())
    assert p.measurement is not None and p.measurement.model == "mlp"
    t = costs_for(graph, p)
    for i, node in enumerate(graph.nodes):
        assert t.compute_s[i] == p.op_table[node.extra["signature"]].compute_s


def test_profile_refuses_an_unknown_model_before_measuring(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import poet_compiler.devices.profiler as profiler

    def measured(*args: object, **kwargs: object) -> None:
        raise AssertionError("benchmarks ran before the model name was checked")

    monkeypatch.setattr(profiler, "_overhead_s", measured)
    rc = main(["profile", "-o", str(tmp_path / "host.json"), "--quick", "--power-w", "15", "--model", "no_such_model",
               "--page-file", str(tmp_path / "paging.bin")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "no_such_model" in err, err
    assert not (tmp_path / "paging.bin").exists() and not (tmp_path / "host.json").exists()
