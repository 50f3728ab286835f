"""Reports: self-contained .html/.md with both plots embedded, deterministic, atomic."""

from __future__ import annotations

import base64
import re

import pytest

import poet_compiler as pc
from poet_compiler.cli import main
from poet_compiler.errors import PoetError
from poet_compiler.reporting import write_report
from tests.viz.graphs import chain

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def compiled():
    c = pc.compile(chain(5), None, "70%", "1.5x", time_limit_s=20, threads=1)
    assert c.result.ok
    return c


def _images(text: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", text)]


@pytest.mark.parametrize("suffix", [".html", ".md"])
def test_report_embeds_both_plots(compiled, tmp_path, suffix):
    path = write_report(compiled, tmp_path / f"r{suffix}")
    text = path.read_text()
    images = _images(text)
    assert len(images) == 2 and all(img.startswith(PNG_MAGIC) for img in images)
    assert "energy_j" in text and compiled.result.status in text
    assert "Schedule grid" in text and "Memory over the program" in text
    assert "COMPUTE 0" in text  # the program listing
    assert write_report(compiled, tmp_path / f"again{suffix}").read_text() == text  # deterministic
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp files left


def test_html_escapes_and_is_complete(compiled, tmp_path):
    text = write_report(compiled, tmp_path / "r.html").read_text()
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert "<script" not in text and "http://" not in text and "https://" not in text  # self-contained


def test_infeasible_report_has_no_plots(tmp_path):
    c = pc.compile(chain(5), None, 100, None, time_limit_s=10, threads=1)
    assert not c.result.ok
    text = write_report(c, tmp_path / "r.md").read_text()
    assert _images(text) == [] and c.result.status in text


def test_unknown_report_format(compiled, tmp_path):
    with pytest.raises(PoetError, match="html or .md"):
        write_report(compiled, tmp_path / "r.pdf")


def test_compile_report_option(tmp_path):
    import json

    from tests.viz.graphs import chain_dict

    g = tmp_path / "g.json"
    g.write_text(json.dumps(chain_dict(4)))
    rep = tmp_path / "out.html"
    assert main(["compile", str(g), "--ram", "80%", "-o", str(tmp_path / "s.poet"), "--report", str(rep),
                 "-q", "--time-limit", "20", "--threads", "1"]) == 0
    assert len(_images(rep.read_text())) == 2
