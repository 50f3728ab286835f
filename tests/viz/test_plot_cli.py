"""``poetc plot`` on a compiled schedule, its report and a sweep CSV; bad input exits 2."""

from __future__ import annotations

import json

import pytest

import poet_compiler as pc
from poet_compiler.cli import main
from tests.viz.graphs import chain, chain_dict

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    d = tmp_path_factory.mktemp("plot")
    c = pc.compile(chain(5), None, "70%", "1.5x", time_limit_s=10, threads=1)
    assert c.result.ok
    poet, side = c.save(d / "tiny.poet")
    return c, poet, side


@pytest.mark.parametrize("kind", ["grid", "memory"])
@pytest.mark.parametrize("which", ["poet", "json"])
def test_plot_schedule(compiled, tmp_path, kind, which):
    _, poet, side = compiled
    out = tmp_path / f"{kind}.png"
    assert main(["plot", str(poet if which == "poet" else side), "--kind", kind, "-o", str(out)]) == 0
    assert out.read_bytes().startswith(PNG_MAGIC)


def test_plot_grid_default_output_name(compiled, tmp_path):
    _, poet, _ = compiled
    copy = tmp_path / "x.poet"
    copy.write_bytes(poet.read_bytes())
    assert main(["plot", str(copy)]) == 0  # no sidecar: still drawable from the node table
    assert (tmp_path / "x-grid.png").read_bytes().startswith(PNG_MAGIC)


def test_plot_stripped_schedule(compiled, tmp_path):
    c, _, _ = compiled
    poet, _ = c.save(tmp_path / "s.poet", strip=True)
    assert main(["plot", str(poet), "--kind", "memory", "-o", str(tmp_path / "m.png")]) == 0
    assert main(["plot", str(poet), "--kind", "grid", "-o", str(tmp_path / "g.png")]) == 0


def test_plot_sweep_csv(tmp_path):
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps(chain_dict(4)))
    csv = tmp_path / "s.csv"
    assert main(["sweep", str(graph), "--ram", "80%,100%", "--strategies", "optimal,checkmate", "-o", str(csv),
                 "-j", "1", "--no-cache", "-q", "--time-limit", "10"]) == 0
    out = tmp_path / "e.png"
    assert main(["plot", str(csv), "--kind", "ram", "-o", str(out)]) == 0
    assert out.read_bytes().startswith(PNG_MAGIC)


@pytest.mark.parametrize("args", [
    ["plot", "{dir}/missing.poet"],
    ["plot", "{poet}", "--kind", "nonsense"],
    ["plot", "{poet}", "--kind", "ram"],
    ["plot", "{dir}/lonely.json"],
])
def test_plot_bad_input_exits_2(compiled, tmp_path, capsys, args):
    _, poet, _ = compiled
    (tmp_path / "lonely.json").write_text("{}")
    argv = [a.format(dir=tmp_path, poet=poet) for a in args]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
