"""Bad ONNX input: one-line error, exit code 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh

from poet_compiler.cli import main
from poet_compiler.frontends.onnx import export_module

from . import small_models as sm


def _save(tmp_path: Path, nodes, inputs, outputs, opset: int = 17, inits=()) -> Path:  # noqa: ANN001
    graph = oh.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    path = tmp_path / "bad.onnx"
    path.write_bytes(oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)]).SerializeToString())
    return path


def _run_export(capsys, src: Path, out: Path, *extra: str) -> str:
    rc = main(["export", str(src), "-o", str(out), *extra])
    err = capsys.readouterr().err
    assert rc == 2
    assert not out.exists()
    assert not list(out.parent.glob(f".{out.name}.*"))  # no temporary left behind
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


def test_not_onnx(tmp_path, capsys) -> None:
    src = tmp_path / "model.onnx"
    src.write_text("this is a text file, not a protobuf\n" * 3)
    msg = _run_export(capsys, src, tmp_path / "out.onnx")
    assert "not an ONNX model" in msg and str(src) in msg


def test_empty_and_missing(tmp_path, capsys) -> None:
    src = tmp_path / "empty.onnx"
    src.write_bytes(b"")
    assert "empty file" in _run_export(capsys, src, tmp_path / "out.onnx")
    assert "no such file" in _run_export(capsys, tmp_path / "missing.onnx", tmp_path / "out.onnx")


def test_truncated(tmp_path, capsys) -> None:
    model, inputs = sm.build("mlp")
    good = tmp_path / "good.onnx"
    export_module(model, inputs, good, opset=17)
    data = good.read_bytes()
    src = tmp_path / "truncated.onnx"
    src.write_bytes(data[: len(data) * 2 // 3])
    msg = _run_export(capsys, src, tmp_path / "out.onnx")
    assert "not an ONNX model" in msg or "fails the ONNX checker" in msg


def test_fails_checker(tmp_path, capsys) -> None:
    # Add reads 'w', which nothing defines.
    src = _save(
        tmp_path,
        [oh.make_node("Add", ["x", "w"], ["y"])],
        [oh.make_tensor_value_info("x", TP.FLOAT, [2, 3])],
        [oh.make_tensor_value_info("y", TP.FLOAT, [2, 3])],
    )
    assert "fails the ONNX checker" in _run_export(capsys, src, tmp_path / "out.onnx")


def test_unsupported_op_names_op_node_and_opset(tmp_path, capsys) -> None:
    src = _save(
        tmp_path,
        [oh.make_node("Relu", ["x"], ["r"], name="ok"), oh.make_node("Hardmax", ["r"], ["y"], name="the_hardmax")],
        [oh.make_tensor_value_info("x", TP.FLOAT, [2, 3])],
        [oh.make_tensor_value_info("y", TP.FLOAT, [2, 3])],
        opset=15,
    )
    msg = _run_export(capsys, src, tmp_path / "out.onnx")
    assert "unsupported ONNX op 'Hardmax'" in msg and "'the_hardmax'" in msg and "opset 15" in msg


def test_no_float_output(tmp_path, capsys) -> None:
    src = _save(
        tmp_path,
        [oh.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=0)],
        [oh.make_tensor_value_info("x", TP.FLOAT, [2, 3])],
        [oh.make_tensor_value_info("y", TP.INT64, [2])],
    )
    assert "no float output" in _run_export(capsys, src, tmp_path / "out.onnx")


def test_symbolic_dim_without_shape(tmp_path, capsys) -> None:
    src = _save(
        tmp_path,
        [oh.make_node("Relu", ["x"], ["y"])],
        [oh.make_tensor_value_info("x", TP.FLOAT, ["N", 3])],
        [oh.make_tensor_value_info("y", TP.FLOAT, ["N", 3])],
    )
    msg = _run_export(capsys, src, tmp_path / "out.onnx")
    assert "input 'x' dim 0 is symbolic ('N')" in msg and "--input-shape" in msg
    _run_export(capsys, src, tmp_path / "out.onnx", "--input-shape", "x=2")  # wrong rank
    _run_export(capsys, src, tmp_path / "out.onnx", "--input-shape", "y=2,3")  # not an input
    _run_export(capsys, src, tmp_path / "out.onnx", "--input-shape", "x=2,zz")  # not a number
    out = tmp_path / "fixed.onnx"
    assert main(["export", str(src), "-o", str(out), "--input-shape", "x=4,3"]) == 0
    fixed = onnx.load(str(out))
    assert [d.dim_value for d in fixed.graph.input[0].type.tensor_type.shape.dim] == [4, 3]


def test_run_time_value_where_a_constant_is_needed(tmp_path, capsys) -> None:
    """A Reshape whose shape comes from the data (not from shapes) cannot be made static."""
    src = _save(
        tmp_path,
        [oh.make_node("Cast", ["s"], ["si"], to=TP.INT64), oh.make_node("Reshape", ["x", "si"], ["y"], name="dyn")],
        [oh.make_tensor_value_info("x", TP.FLOAT, [2, 3]), oh.make_tensor_value_info("s", TP.FLOAT, [2])],
        [oh.make_tensor_value_info("y", TP.FLOAT, ["a", "b"])],
    )
    msg = _run_export(capsys, src, tmp_path / "out.onnx")
    assert "node 'dyn'" in msg and "run-time data" in msg


@pytest.mark.parametrize("opset", ["12", "21"])
def test_export_bad_opset(tmp_path, capsys, opset: str) -> None:
    model, inputs = sm.build("mlp")
    good = tmp_path / "good.onnx"
    export_module(model, inputs, good, opset=17)
    assert "opset" in _run_export(capsys, good, tmp_path / "out.onnx", "--opset", opset)


def test_reexport_roundtrip(tmp_path) -> None:
    """poetc export FILE.onnx re-exports the converted module; it computes the same."""
    from poet_compiler.frontends.onnx import load_onnx_module

    model, inputs = sm.build("resnet")
    src = tmp_path / "src.onnx"
    export_module(model, inputs, src, opset=17, training=True)
    out = tmp_path / "again.onnx"
    assert main(["export", str(src), "-o", str(out), "--opset", "14", "--training"]) == 0
    a, b = load_onnx_module(src), load_onnx_module(out)
    assert b.opset == 14
    ya, yb = a.module(*a.example_inputs), b.module(*b.example_inputs)
    assert float((ya - yb).detach().abs().max()) <= 1e-5
