"""poetc trace / poetc models and the frontend dispatcher."""

from __future__ import annotations

from pathlib import Path

import pytest

from poet_compiler.cli import main
from poet_compiler.errors import FrontendError
from poet_compiler.frontends import load_graph, load_model
from poet_compiler.graph.io import read_graph


def test_trace_writes_graph_that_reads_back_equal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "g.json"
    assert main(["trace", "cifar_cnn_tiny", "-o", str(out), "--batch", "2"]) == 0
    assert "backward" in capsys.readouterr().out
    assert read_graph(out) == load_graph("cifar_cnn_tiny", batch=2)
    assert load_graph(str(out)) == read_graph(out)


def test_trace_module_granularity_json_roundtrip(tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    assert main(["trace", "kws_dscnn", "-o", str(out), "--granularity", "module", "--batch", "2"]) == 0
    g = read_graph(out)
    assert g == load_graph("kws_dscnn", granularity="module", batch=2)
    assert g.n < load_graph("kws_dscnn", batch=2).n


@pytest.mark.parametrize("argv", [["trace", "no_such_model"], ["trace", "mlp", "--granularity", "block"],
                                  ["trace", str(Path("/nonexistent/x.json"))], ["trace", "mlp", "--batch", "0"]])
def test_bad_input_exits_2_with_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_dispatcher() -> None:
    with pytest.raises(FrontendError, match="resnet18_cifar"):
        load_graph("resnet_19")
    assert load_model("mlp", batch=2) is not None
