"""Cost model: roofline figures by hand, paging with sector rounding, and precedence."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from poet_compiler.cli import main
from poet_compiler.devices.cost_model import costs_for, step_cost
from poet_compiler.devices.profile import DeviceProfile, load_profile
from poet_compiler.errors import ProfileError
from poet_compiler.graph.io import graph_from_dict


def _graph(cost0: dict | None = None, sig1: str = "aten.relu(f32[1,8])", cost_all: bool = False):
    full = {"compute_s": 1.0, "compute_j": 2.0, "page_in_s": 3.0, "page_in_j": 4.0, "page_out_s": 5.0, "page_out_j": 6.0}
    nodes = [
        {"id": 0, "name": "conv", "kind": "forward", "op": "aten.convolution", "op_class": "conv", "inputs": [],
         "output_bytes": 1000, "flops": 1_000_000, "bytes_accessed": 3000},
        {"id": 1, "name": "relu", "kind": "forward", "op": "aten.relu", "op_class": "elementwise", "inputs": [0],
         "output_bytes": 1000, "flops": 250, "extra": {"signature": sig1}},
        {"id": 2, "name": "copy", "kind": "backward", "op": "aten.clone", "op_class": "data", "inputs": [1],
         "output_bytes": 513, "flops": 0},
    ]
    if cost0 is not None:
        nodes[0]["cost"] = cost0
    if cost_all:
        for n in nodes:
            n["cost"] = dict(full)
    return graph_from_dict({"format": "poet-graph/1", "name": "t", "nodes": nodes}, "t")


def _with_op_table(p: DeviceProfile, table: dict) -> DeviceProfile:
    data = p.model_dump(mode="json", exclude_none=True)
    data["op_table"] = table
    data["sources"]["op_table"] = {"kind": "measurement", "ref": "test"}
    return DeviceProfile.model_validate(data)


def test_analytic_roofline_by_hand() -> None:
    p = load_profile("m4")
    g = _graph()
    t = costs_for(g, p)
    thr, e_flop = p.compute.conv.throughput_flops, p.compute.conv.energy_j_per_flop
    bw, e_byte = p.memory.bandwidth_bps, p.memory.energy_j_per_byte
    # m4 has a fixed time per class (fitted to its kernels, bench/device_icount.py)
    conv_o, data_o = p.compute.conv.op_overhead_s, p.compute.data.op_overhead_s
    assert conv_o is not None and data_o is not None and conv_o != data_o
    assert t.compute_s[0] == pytest.approx(conv_o + max(1e6 / thr, 3000 / bw))
    assert t.compute_j[0] == pytest.approx(1e6 * e_flop + 3000 * e_byte)
    # zero-FLOP node with no bytes_accessed: charged its inputs + output traffic, never free
    assert t.compute_s[2] == pytest.approx(data_o + (1000 + 513) / bw)
    assert t.compute_j[2] == pytest.approx((1000 + 513) * e_byte) and t.compute_j[2] > 0
    # paging: 513 bytes round up to two 512-byte sectors
    assert t.page_in_s[2] == pytest.approx(p.page_in.latency_s + 1024 / p.page_in.bandwidth_bps)
    assert t.page_out_j[2] == pytest.approx((p.page_out.latency_s + 1024 / p.page_out.bandwidth_bps) * p.page_out.power_w)
    assert (t.static_w, t.dma, t.device, t.ram_bytes) == (p.static_power_w, p.dma, "m4", p.ram_bytes)


def test_class_without_its_own_overhead_takes_the_profiles() -> None:
    p = load_profile("m4")
    data = p.model_dump(mode="json", exclude_none=True)
    del data["compute"]["conv"]["op_overhead_s"]
    bare = DeviceProfile.model_validate(data)
    t = costs_for(_graph(), bare)
    assert t.compute_s[0] == pytest.approx(bare.op_overhead_s + max(1e6 / bare.compute.conv.throughput_flops,
                                                                    3000 / bare.memory.bandwidth_bps))


def test_memory_bound_node_uses_bandwidth_roof() -> None:
    p = load_profile("a72")
    t = costs_for(_graph(), p)
    relu_traffic = 2000  # no bytes_accessed: input 1000 + output 1000
    assert relu_traffic / p.memory.bandwidth_bps > 250 / p.compute.elementwise.throughput_flops
    assert t.compute_s[1] == pytest.approx(p.op_overhead_s + relu_traffic / p.memory.bandwidth_bps)


def test_precedence_explicit_over_op_table_over_analytic() -> None:
    p = _with_op_table(load_profile("m4"), {"aten.relu(f32[1,8])": {"compute_s": 0.5, "compute_j": 0.25},
                                            "aten.convolution(x)": {"compute_s": 9.0, "compute_j": 9.0}})
    g = _graph(cost0={"compute_s": 7.0, "page_in_j": 8.0})
    t = costs_for(g, p)
    analytic = costs_for(g, load_profile("m4"))
    assert (t.compute_s[0], t.page_in_j[0]) == (7.0, 8.0)          # explicit wins, field by field
    assert t.compute_j[0] == analytic.compute_j[0]                  # not given explicitly: model
    assert (t.compute_s[1], t.compute_j[1]) == (0.5, 0.25)          # op_table beats the model
    assert t.compute_s[2] == analytic.compute_s[2]                  # no signature: model
    g2 = _graph(sig1="aten.relu(f32[2,8])")
    assert costs_for(g2, p).compute_s[1] == analytic.compute_s[1]   # different signature: model


def test_no_profile_needs_complete_explicit_costs() -> None:
    t = costs_for(_graph(cost_all=True), None)
    assert t.device == "explicit" and t.compute_s == (1.0, 1.0, 1.0) and t.ram_bytes is None
    with pytest.raises(ProfileError, match=r"node 0 \('conv'\) has no explicit compute_s, compute_j.*--device"):
        costs_for(_graph(), None)


def test_step_cost_adds_static_energy() -> None:
    p = load_profile("a72")
    t = costs_for(_graph(), p)
    s = step_cost(t)
    assert s["time_s"] == pytest.approx(sum(t.compute_s))
    assert s["energy_j"] == pytest.approx(sum(t.compute_j) + p.static_power_w * s["time_s"])
    assert math.isclose(s["energy_j"], t.compute_only_j)


def test_cost_command_on_a_graph_file(tmp_path: Path, capsys) -> None:
    from poet_compiler.graph.io import write_graph

    f = tmp_path / "g.json"
    write_graph(_graph(), f)
    assert main(["cost", str(f), "--device", "m0", "--device", "tx2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["device"] for r in rows] == ["m0", "tx2"]
    assert rows[0]["time_s"] > rows[1]["time_s"] and rows[0]["energy_j"] > 0
    assert main(["cost", str(f), "--device", "nope"]) == 2
    assert "unknown device 'nope'" in capsys.readouterr().err
