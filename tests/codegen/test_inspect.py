"""``poetc inspect``: figures, disassembly, sidecar report, one-line errors."""

from __future__ import annotations

import json

from poet_compiler.cli import main
from poet_compiler.codegen.bytecode import encode
from tests.codegen.programs import budget_program, chain_graph


def test_inspect_prints_figures_listing_and_sidecar(tmp_path, capsys):
    g = chain_graph(5)
    p = budget_program(g, 2500, seed=2)
    path = tmp_path / "s.poet"
    path.write_bytes(encode(p, g))
    (tmp_path / "s.json").write_text(json.dumps({"energy_j": 0.125, "status": "optimal"}))
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "instructions" in out and f"{len(p)}" in out
    assert "energy_j" in out and "0.125" in out and "optimal" in out
    for ins in p:
        assert str(ins) in out


def test_inspect_json(tmp_path, capsys):
    g = chain_graph(4)
    path = tmp_path / "s.poet"
    p = budget_program(g, None)
    path.write_bytes(encode(p, g, strip=True))
    assert main(["inspect", str(path), "--json"]) == 0
    figs = json.loads(capsys.readouterr().out)
    assert figs["report"] is None
    assert figs["bytecode"]["instructions"] == len(p)
    assert figs["bytecode"]["file_bytes"] == path.stat().st_size
    assert figs["bytecode"]["section_node_table_bytes"] == 0


def test_inspect_bad_file_is_one_line_exit_2(tmp_path, capsys):
    path = tmp_path / "bad.poet"
    path.write_bytes(b"NOPE" + bytes(20))
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "POET_E_MAGIC" in err
    assert main(["inspect", str(tmp_path / "missing.poet")]) == 2
