"""The README's example file ``models/kws_dscnn.onnx`` is exactly what
``poetc export kws_dscnn --training -o models/kws_dscnn.onnx`` writes today (so it can
never silently drift from the zoo model), and it converts to the zoo model's graph."""

from __future__ import annotations

from pathlib import Path

from poet_compiler.cli import main
from poet_compiler.frontends import load_graph

EXAMPLE = Path(__file__).resolve().parents[3] / "models" / "kws_dscnn.onnx"


def test_shipped_example_is_a_fresh_export(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "kws_dscnn.onnx"
    assert main(["export", "kws_dscnn", "--training", "-o", str(out)]) == 0
    assert "training mode" in capsys.readouterr().out
    assert EXAMPLE.is_file(), f"{EXAMPLE} is missing"
    assert out.read_bytes() == EXAMPLE.read_bytes(), (
        "models/kws_dscnn.onnx is stale: regenerate it with "
        "`poetc export kws_dscnn --training -o models/kws_dscnn.onnx`"
    )
    assert EXAMPLE.stat().st_size < 512 * 1024  # small enough to ship


def test_example_traces_like_the_zoo_model() -> None:
    via, direct = load_graph(str(EXAMPLE)), load_graph("kws_dscnn")
    assert via.n == direct.n
    fwd = lambda g: sum(n.output_bytes for n in g.nodes if n.kind == "forward")  # noqa: E731
    assert abs(fwd(via) - fwd(direct)) <= 0.01 * fwd(direct)
