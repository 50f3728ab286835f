"""ONNX files through the CLI: ``poetc trace/compile`` with ``--loss`` and
``--input-shape``, the Python API's ``onnx_loss``/``input_shapes``, and ``poetc verify``
of a compiled ONNX model (gradients bitwise equal to autograd on the converted module)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper

from poet_compiler.api import compile as compile_model
from poet_compiler.cli import main
from poet_compiler.frontends import load_graph, load_model
from poet_compiler.frontends.onnx import export_module, load_onnx_module, trace_onnx
from poet_compiler.graph.io import read_graph

from . import small_models as sm


def _symbolic_mlp(tmp_path: Path) -> Path:
    """x[N, 6] -> Gemm -> Relu -> Gemm -> [N, 3]; the batch dim is symbolic."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w1", (8, 6)), ("b1", (8,)), ("w2", (3, 8)), ("b2", (3,)))]
    nodes = [oh.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1), oh.make_node("Relu", ["h"], ["r"]),
             oh.make_node("Gemm", ["r", "w2", "b2"], ["y"], transB=1)]
    graph = oh.make_graph(nodes, "sym", [oh.make_tensor_value_info("x", TP.FLOAT, ["N", 6])],
                          [oh.make_tensor_value_info("y", TP.FLOAT, ["N", 3])], initializer=inits)
    path = tmp_path / "sym.onnx"
    path.write_bytes(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]).SerializeToString())
    return path


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def test_trace_with_input_shape_and_loss(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _symbolic_mlp(tmp_path)
    out = tmp_path / "g.json"
    assert main(["trace", str(src), "--input-shape", "x=4,6", "--loss", "mse", "-o", str(out)]) == 0
    assert "backward" in capsys.readouterr().out
    g = read_graph(out)
    assert g == trace_onnx(src, input_shapes={"x": (4, 6)}, loss="mse").graph
    assert g == load_graph(str(src), input_shapes={"x": (4, 6)}, onnx_loss="mse")
    assert any(n.op == "aten.mse_loss" for n in g.nodes)
    assert g.input_bytes == 4 * 6 * 4 + 4 * 3 * 4  # x [4, 6] and the MSE target [4, 3]
    # The default loss for [N, C] scores is cross-entropy; a different batch, other bytes.
    ce = load_graph(str(src), input_shapes={"x": (2, 6)})
    assert not any(n.op == "aten.mse_loss" for n in ce.nodes)
    assert ce.input_bytes == 2 * 6 * 4 + 2 * 8  # x [2, 6] and int64 class targets [2]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["trace", "{sym}"], "dim 0 is symbolic ('N'); give a shape with --input-shape x="),
        (["trace", "{sym}", "--input-shape", "x=4"], "rank 2, but its given shape [4] has rank 1"),
        (["trace", "{sym}", "--input-shape", "y=4,6"], "names 'y', which is not an input"),
        (["trace", "{sym}", "--input-shape", "x=4,6", "--loss", "hinge"], "unknown loss 'hinge'"),
        (["trace", "{sym}", "--input-shape", "x=4,6", "--batch", "2"], "--batch applies to zoo models"),
        (["trace", "mlp", "--loss", "mse"], "--loss applies to .onnx models only"),
        (["compile", "mlp", "--input-shape", "x=1,784", "--loss", "sum"], "--input-shape and --loss apply to .onnx"),
        (["compile", "{sym}", "--device", "m4", "--input-shape", "x=0,6"], "dimensions must be positive integers"),
    ],
)
def test_bad_onnx_options_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    sym = _symbolic_mlp(tmp_path)
    out = tmp_path / "out.poet"
    argv = [a.format(sym=sym) for a in argv] + (["-o", str(out)] if argv[0] == "compile" else [])
    assert main(argv) == 2
    assert needle in _one_line_error(capsys)
    assert not out.exists()


def test_api_compile_threads_onnx_options(tmp_path: Path) -> None:
    src = _symbolic_mlp(tmp_path)
    c = compile_model(str(src), "m4", onnx_loss="sum", input_shapes={"x": (3, 6)}, time_limit_s=20)
    assert c.result.ok and c.graph == load_graph(str(src), input_shapes={"x": (3, 6)}, onnx_loss="sum")
    assert c.graph.input_bytes == 3 * 6 * 4 + 4  # x and the (unused, scalar) target


def test_load_model_traces_onnx_files(tmp_path: Path) -> None:
    src = _symbolic_mlp(tmp_path)
    tm = load_model(str(src), input_shapes={"x": (4, 6)})
    assert tm is not None and tm.graph == load_graph(str(src), input_shapes={"x": (4, 6)})
    om = load_onnx_module(src, input_shapes={"x": (4, 6)})
    assert tm.param_names == tuple(n for n, _ in om.module.named_parameters())


@pytest.mark.parametrize(("name", "training"), [("kws", False), pytest.param("gpt", True, marks=pytest.mark.slow)])
def test_compile_then_verify_onnx(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, training: bool) -> None:
    """An exported model compiles under a budget that forces rematerialization, and
    ``poetc verify`` runs the schedule: gradients bitwise equal to autograd on the
    converted module, measured peak within the budget."""
    model, inputs = sm.build(name)
    src = tmp_path / f"{name}.onnx"
    export_module(model, inputs, src, opset=17, training=training)
    sched = tmp_path / f"{name}.poet"
    rc = main(["compile", str(src), "--device", "m4", "--ram", "85%", "--mode", "remat", "--time-limit", "15",
               "-o", str(sched), "--json", "--quiet"])
    out = capsys.readouterr().out
    assert rc == 0, out
    rep = json.loads(out)
    assert rep["status"] in ("optimal", "feasible") and rep["peak_ram_bytes"] <= rep["ram_budget_bytes"]
    # 85 %: the arena gets 85 % of checkpoint-all's peak beside what the budget counts with it.
    beside = sum(v for k, v in rep["ram_split"].items() if k not in ("arena", "total"))
    assert rep["ram_budget_bytes"] - beside < rep["checkpoint_all_peak_bytes"]
    assert sched.is_file() and sched.with_suffix(".json").is_file()

    rc = main(["verify", str(src), "--schedule", str(sched), "--json"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 0, res
    assert res["grads_bitwise"] and res["loss_bitwise"] and res["n_grads"] > 0
    assert res["measured_peak_bytes"] <= res["ram_budget_bytes"]
