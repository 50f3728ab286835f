"""Schemas of the sidecar report and sweep rows: exported current, written reports match,
malformed files read back are one line and exit 2."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

import poet_compiler as pc
from poet_compiler import schemas
from poet_compiler.cli import main
from poet_compiler.errors import PoetError
from poet_compiler.schemas import SidecarReport, SweepRow, read_sweep_csv, validate_report
from poet_compiler.solve.result import FIELD_NAMES, Result
from tests.viz.graphs import chain, chain_dict

ROOT = Path(__file__).resolve().parents[2]


def test_committed_schemas_are_current():
    assert schemas.SCHEMA_DIR == ROOT / "docs" / "schemas"
    assert schemas.main(["--check"]) == 0, "run: python -m poet_compiler.schemas"
    for name in schemas.SCHEMAS:
        data = json.loads((schemas.SCHEMA_DIR / name).read_text())
        assert data["required"] == ["status"] and data["additionalProperties"] is False


def test_stale_schema_is_reported(tmp_path, capsys):
    assert schemas.main(["--dir", str(tmp_path)]) == 0
    (tmp_path / "report.schema.json").write_text("{}\n")
    assert schemas.main(["--check", "--dir", str(tmp_path)]) == 1
    assert "report.schema.json" in capsys.readouterr().err


def test_schema_covers_every_report_key():
    keys = {*Result.REPORT_KEYS, "arena_bytes", "message", *FIELD_NAMES, *schemas.COMPILE_FIELDS}
    assert set(SidecarReport.model_fields) == keys
    assert {"stage_s", "model", "ram", "deadline"} <= set(SweepRow.model_fields)


def test_shipped_sidecars_match():
    for path in sorted((ROOT / "schedules").glob("*.json")):
        validate_report(json.loads(path.read_text()), str(path))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    d = tmp_path_factory.mktemp("schema")
    c = pc.compile(chain(5), None, "70%", "1.5x", time_limit_s=10, threads=1)
    assert c.result.ok
    poet, side = c.save(d / "tiny.poet")
    return c, poet, side


def test_written_sidecar_matches_and_inspect_reads_it(compiled, capsys):
    _, poet, side = compiled
    validate_report(json.loads(side.read_text()), str(side))
    assert main(["inspect", str(poet), "--no-listing"]) == 0
    assert "energy_j" in capsys.readouterr().out


def test_infeasible_report_matches():
    c = pc.compile(chain(5), None, "1k", time_limit_s=10, threads=1)
    assert c.result.status == "infeasible" and "min_ram_bytes" in c.result.notes.names()
    validate_report(json.loads(json.dumps(c.report())), "report")


@pytest.mark.parametrize("mutate", [
    lambda d: d.update(energy_j="lots"),
    lambda d: d.update(status="great"),
    lambda d: d.update(not_a_figure=1),
    lambda d: d.update(family_energy_j={"stage": "x"}),
    lambda d: d.pop("status"),
])
@pytest.mark.parametrize("command", ["inspect", "plot"])
def test_malformed_sidecar_is_one_line_exit_2(compiled, tmp_path, capsys, mutate, command):
    _, poet, side = compiled
    copy = tmp_path / "s.poet"
    copy.write_bytes(poet.read_bytes())
    data = json.loads(side.read_text())
    mutate(data)
    (tmp_path / "s.json").write_text(json.dumps(data))
    argv = ["inspect", str(copy)] if command == "inspect" else ["plot", str(copy), "-o", str(tmp_path / "p.png")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "report schema" in err[0], err


@pytest.fixture(scope="module")
def sweep_csv(tmp_path_factory):
    d = tmp_path_factory.mktemp("sweep")
    graph = d / "g.json"
    graph.write_text(json.dumps(chain_dict(4)))
    out = d / "s.csv"
    assert main(["sweep", str(graph), "--ram", "1k,80%,100%", "--strategies", "optimal,checkmate", "-o", str(out),
                 "-j", "1", "--no-cache", "-q", "--time-limit", "10"]) == 0
    return out


def test_sweep_rows_match(sweep_csv):
    rows = read_sweep_csv(sweep_csv)
    assert len(rows) == 6 and {r["status"] for r in rows} >= {"infeasible", "optimal"}
    df = pc.read_sweep(sweep_csv)
    assert len(df) == 6


def _rewrite(src: Path, dst: Path, edit) -> None:
    with src.open(newline="") as fh:
        rows = list(csv.reader(fh))
    edit(rows)
    with dst.open("w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows(rows)


@pytest.mark.parametrize("edit,says", [
    (lambda rows: rows[2].__setitem__(rows[0].index("status"), "great"), "line 3: status"),
    (lambda rows: rows[1].__setitem__(rows[0].index("n_nodes"), "four"), "line 2: n_nodes"),
    (lambda rows: (rows[0].append("bogus"), [r.append("1") for r in rows[1:]]), "bogus: unknown key"),
    (lambda rows: rows[1].append("spare"), "more cells than the header"),
])
def test_malformed_sweep_csv_is_one_line_exit_2(sweep_csv, tmp_path, capsys, edit, says):
    bad = tmp_path / "bad.csv"
    _rewrite(sweep_csv, bad, edit)
    with pytest.raises(PoetError, match=says):
        read_sweep_csv(bad)
    assert main(["plot", str(bad), "--kind", "ram", "-o", str(tmp_path / "p.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and says in err[0], err
    assert not (tmp_path / "p.png").exists()
