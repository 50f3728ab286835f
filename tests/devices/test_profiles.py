"""Shipped profiles validate, are physically sane, and bad profiles fail with one clear line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from poet_compiler.cli import main
from poet_compiler.devices.cost_model import paging_cost
from poet_compiler.devices.profile import (
    SCHEMA_FILE,
    dumps_profile,
    list_profiles,
    load_profile,
    profile_from_json,
    schema_text,
)
from poet_compiler.errors import ProfileError
from poet_compiler.graph.ir import OP_CLASSES

PROFILES_DIR = Path(__file__).resolve().parents[2] / "profiles"
PAPER = ["m0", "m4_poet", "a72", "tx2"]  # POET's published figures (m4: fitted to poetc's kernels)


def test_all_expected_profiles_ship() -> None:
    names = list_profiles()
    assert set(PAPER) <= set(names)
    assert len(set(names) - set(PAPER)) >= 2  # current devices too
    assert "schema" not in names


@pytest.mark.parametrize("name", list_profiles())
def test_profile_is_physically_sane(name: str) -> None:
    p = load_profile(name)
    assert p.name == name
    assert p.ram_bytes > 0 and p.flash_bytes > p.ram_bytes and p.page_size_bytes >= 1
    for c in OP_CLASSES:
        fig = getattr(p.compute, c)
        assert fig.throughput_flops > 0 and fig.energy_j_per_flop > 0
        if p.clock_hz is not None and p.ram_bytes < (16 << 20):
            # a microcontroller cannot exceed a few FLOP per cycle
            assert fig.throughput_flops <= 4 * p.clock_hz
    assert p.memory.bandwidth_bps > 0 and p.memory.energy_j_per_byte > 0
    assert p.op_overhead_s > 0 and p.static_power_w > 0
    for d in (p.page_in, p.page_out):
        assert d.latency_s > 0 and d.bandwidth_bps > 0 and d.power_w > 0
        # paging is far slower than RAM on every device
        assert d.bandwidth_bps < p.memory.bandwidth_bps
        one_byte_s, one_byte_j = paging_cost(1, d, p.page_size_bytes)
        assert one_byte_s >= d.latency_s and one_byte_j > 0
        # sector rounding: 1 byte costs a whole sector, one byte more than a sector costs two
        assert one_byte_s == pytest.approx(paging_cost(p.page_size_bytes, d, p.page_size_bytes)[0])
        two = paging_cost(p.page_size_bytes + 1, d, p.page_size_bytes)[0]
        assert two == pytest.approx(d.latency_s + 2 * p.page_size_bytes / d.bandwidth_bps)
    # every number has a citation (the schema enforces it; check the lookup works too)
    assert p.citation("page_in.latency_s") is not None and p.citation("compute.conv.throughput_flops") is not None


def test_shipped_files_are_canonical() -> None:
    """Files are exactly what the writer produces: deterministic bytes, no hand-format drift."""
    for name in list_profiles():
        text = (PROFILES_DIR / f"{name}.json").read_text(encoding="utf-8")
        assert dumps_profile(profile_from_json(text, name)) == text, name


def test_throughput_ordering_of_paper_devices() -> None:
    conv = [load_profile(n).compute.conv.throughput_flops for n in PAPER]
    assert conv == sorted(conv) and len(set(conv)) == 4
    # energy per FLOP falls as devices get more capable
    e = [load_profile(n).compute.conv.energy_j_per_flop for n in PAPER]
    assert e == sorted(e, reverse=True)


def test_paper_figures_match_poet_repository() -> None:
    m0, m4, a72, tx2 = (load_profile(n) for n in PAPER)
    assert m0.compute.conv.throughput_flops == pytest.approx(166.7e3, rel=1e-3)
    assert m0.compute.conv.energy_j_per_flop == pytest.approx(396e-9, rel=1e-3)
    assert m4.compute.conv.throughput_flops == pytest.approx(6.37e6, rel=1e-3)
    assert m4.compute.conv.energy_j_per_flop == pytest.approx(1.72e-9, rel=1e-2)
    assert m0.page_in.latency_s == pytest.approx(0.109e-3) and m0.page_out.bandwidth_bps == pytest.approx(4.44e6)
    assert a72.page_out.latency_s == pytest.approx(18.5314e-6) and a72.page_in.bandwidth_bps == pytest.approx(45.5e6)
    assert tx2.page_out.latency_s == pytest.approx(2.396e-3) and tx2.page_in.power_w == pytest.approx(0.309)


def test_schema_file_is_up_to_date() -> None:
    on_disk = (PROFILES_DIR / SCHEMA_FILE).read_text(encoding="utf-8")
    assert on_disk == schema_text(), "run: python -m poet_compiler.devices.profile"


def test_unknown_device_names_the_known_ones() -> None:
    with pytest.raises(ProfileError, match="unknown device 'm5'.*m4"):
        load_profile("m5")


# ---- bad profiles ------------------------------------------------------------------------
def _m4() -> dict:
    return json.loads((PROFILES_DIR / "m4.json").read_text(encoding="utf-8"))


def _missing(d: dict) -> None:
    del d["page_in"]["latency_s"]


def _negative_bw(d: dict) -> None:
    d["page_out"]["bandwidth_bps"] = -5.0


def _string_unit(d: dict) -> None:
    d["memory"]["bandwidth_bps"] = "10 MB/s"


def _misspelled_unit(d: dict) -> None:
    d["page_in"]["bandwidth_mbps"] = d["page_in"].pop("bandwidth_bps")


def _unknown_key(d: dict) -> None:
    d["colour"] = "blue"


def _uncited(d: dict) -> None:
    del d["sources"]["op_overhead_s"]


def _bad_citation_path(d: dict) -> None:
    d["sources"]["page_in.latency_ms"] = {"kind": "datasheet", "ref": "somewhere"}


BAD = [
    (_missing, "page_in.latency_s", "missing"),
    (_negative_bw, "page_out.bandwidth_bps", "greater than 0"),
    (_string_unit, "memory.bandwidth_bps", "expected a number in bytes per second"),
    (_misspelled_unit, "page_in.bandwidth_mbps", "did you mean 'bandwidth_bps'"),
    (_unknown_key, "colour", "unknown key"),
    (_uncited, "op_overhead_s", "no citation"),
    (_bad_citation_path, "page_in.latency_ms", "does not exist"),
]


@pytest.mark.parametrize("mutate,path,what", BAD, ids=[b[0].__name__.strip("_") for b in BAD])
def test_bad_profile_is_one_line_naming_file_and_field(tmp_path: Path, capsys, mutate, path: str, what: str) -> None:
    d = _m4()
    mutate(d)
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(d), encoding="utf-8")
    with pytest.raises(ProfileError) as info:
        load_profile(f)
    msg = str(info.value)
    assert "\n" not in msg and str(f) in msg and path in msg and what in msg, msg
    assert main(["devices", str(f)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and path in err


def test_non_json_profile(tmp_path: Path, capsys) -> None:
    f = tmp_path / "broken.json"
    f.write_text('{"format": "poet-profile/1", ', encoding="utf-8")
    with pytest.raises(ProfileError, match=r"broken\.json: not JSON"):
        load_profile(f)
    assert main(["devices", str(f)]) == 2
    assert "not JSON" in capsys.readouterr().err


def test_profile_not_utf8(tmp_path: Path, capsys) -> None:
    """A profile that is not UTF-8 is a bad file (exit 2), not a crash on its decode error."""
    f = tmp_path / "latin1.json"
    f.write_bytes(b'{"format": "poet-profile/1", "name": "caf\xe9"}')
    with pytest.raises(ProfileError, match=r"latin1\.json: cannot read \(UnicodeDecodeError: "):
        load_profile(f)
    assert main(["devices", str(f)]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_wrong_format_tag(tmp_path: Path) -> None:
    d = _m4()
    d["format"] = "poet-profile/0"
    f = tmp_path / "old.json"
    f.write_text(json.dumps(d), encoding="utf-8")
    with pytest.raises(ProfileError, match="format: must be 'poet-profile/1'"):
        load_profile(f)


def test_devices_command_lists_and_shows(capsys) -> None:
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    for n in PAPER:
        assert n in out
    assert main(["devices", "m4"]) == 0
    out = capsys.readouterr().out
    assert "nRF52840" in out and "measurement" in out and "page_in.latency_s" in out
