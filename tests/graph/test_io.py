"""poet-graph/1 reading, writing and the rules of the format."""

from __future__ import annotations

import copy
import json

import pytest

from poet_compiler.cli import main
from poet_compiler.errors import GraphError
from poet_compiler.graph import graph_from_dict, graph_to_dict, loads, read_graph, write_graph

BASE = {
    "format": "poet-graph/1",
    "name": "tiny",
    "nodes": [
        {"id": 0, "name": "conv1", "kind": "forward", "op": "aten.convolution", "op_class": "conv",
         "inputs": [], "output_bytes": 1024, "flops": 5000, "bytes_accessed": 2048,
         "extra": {"provenance": "conv1"}},
        {"id": 1, "name": "relu", "kind": "forward", "op": "aten.relu", "op_class": "elementwise",
         "inputs": [0], "output_bytes": 1024},
        {"id": 2, "name": "loss", "kind": "loss", "op": "aten.sum", "op_class": "reduction",
         "inputs": [1], "output_bytes": 4},
        {"id": 3, "name": "grad", "kind": "backward", "op": "aten.threshold_backward",
         "op_class": "elementwise", "inputs": [2, 1], "output_bytes": 1024, "pinned": False,
         "cost": {"compute_s": 0.001, "compute_j": 2e-6, "page_in_s": 1, "page_in_j": 0,
                  "page_out_s": 0.5, "page_out_j": 0.1}},
    ],
    "param_bytes": 100,
    "input_bytes": 12,
}


def mutated(fn) -> dict:
    d = copy.deepcopy(BASE)
    fn(d)
    return d


def test_round_trip_is_equal_and_deterministic(tmp_path):
    g = graph_from_dict(BASE)
    path = tmp_path / "g.json"
    write_graph(g, path)
    g2 = read_graph(path)
    assert g2 == g
    write_graph(g2, tmp_path / "g2.json")
    assert path.read_bytes() == (tmp_path / "g2.json").read_bytes()
    assert g2.nodes[3].cost is not None and g2.nodes[3].cost.complete
    assert g2.nodes[0].provenance == "conv1"


def test_structure():
    g = graph_from_dict(BASE)
    assert g.consumers[1] == (2, 3)
    assert g.sinks == (3,)
    assert (1, 3) in g.edges
    assert g.summary()["backward"] == 1


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda d: d["nodes"][1].update(inputs=[7]), "dangling"),
        (lambda d: (d["nodes"][1].update(inputs=[]), d["nodes"][0].update(inputs=[1])), "topological"),
        (lambda d: d["nodes"][1].update(name="conv1"), "duplicate name"),
        (lambda d: d["nodes"][2].update(outptu_bytes=3), "nodes[2] ('loss').outptu_bytes: unknown key"),
        (lambda d: d.update(colour="red"), "colour: unknown key"),
        (lambda d: d["nodes"][0].update(output_bytes=-1), "output_bytes"),
        (lambda d: d["nodes"][0].update(kind="sideways"), "kind"),
        (lambda d: d.update(format="poet-graph/2"), "format"),
        (lambda d: d["nodes"][0].update(inputs=[1]), "not a DAG: cycle"),
        (lambda d: d["nodes"][3]["cost"].update(compute_s="fast"), "compute_s"),
    ],
)
def test_rule_violations_are_named(mutate, needle):
    with pytest.raises(GraphError) as exc:
        graph_from_dict(mutated(mutate), "g.json")
    assert needle in str(exc.value)
    assert "\n" not in str(exc.value)


def test_extra_is_free_form():
    g = graph_from_dict(mutated(lambda d: d.update(extra={"anything": [1, 2]})))
    assert graph_to_dict(g)["extra"] == {"anything": [1, 2]}


def test_not_json():
    with pytest.raises(GraphError, match="not JSON"):
        loads("{nope", "x.json")


def test_cli_check_bad_file_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(mutated(lambda d: d["nodes"][1].update(inputs=[9]))))
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    good = tmp_path / "good.json"
    good.write_text(json.dumps(BASE))
    assert main(["check", str(good)]) == 0
