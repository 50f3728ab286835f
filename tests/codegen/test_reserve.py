"""The runtime reserve's rule (``make measure-reserve``) and its place in the m4 profile.
The measurement itself runs QEMU; tests/runtime/test_device_qemu.py checks that the stack
it sizes holds a step, and tests/runtime/test_firmware_ram.py that a firmware fits."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from poet_compiler.codegen.emit_c.reserve import (
    STACK_MARGIN,
    STACK_ROUND,
    STATE_SLACK,
    Measured,
    citation,
    record,
    reserve_from,
)
from poet_compiler.devices.profile import _shipped_dir, dumps_profile, load_profile

FOUND = [Measured("a", 75, 956, 12, 192, 400_000), Measured("b", 41, 1124, 4, 188, 160_000)]


def test_the_stack_is_twice_the_deepest_high_water_mark_rounded_up() -> None:
    r = reserve_from(FOUND)
    assert r["stack_high_water_bytes"] == 1124
    assert r["stack_bytes"] == 2560 >= STACK_MARGIN * 1124 and r["stack_bytes"] % STACK_ROUND == 0
    assert r["state_bytes"] == 192 + STATE_SLACK and r["per_node_bytes"] == 12


def test_record_writes_a_canonical_profile_that_cites_the_command(tmp_path: Path) -> None:
    path = tmp_path / "m4.json"
    shutil.copyfile(_shipped_dir() / "m4.json", path)
    r = reserve_from(FOUND)
    record(path, r, citation(r, FOUND))
    prof = load_profile(path)
    assert prof.reserve is not None and prof.reserve.bytes_for(10) == 2560 + 256 + 120
    cite = prof.citation("reserve.stack_bytes")
    assert cite is not None and cite.kind == "measurement" and "make measure-reserve" in cite.ref
    assert path.read_text() == dumps_profile(prof)
    # Every other field is the shipped profile's.
    shipped = json.loads((_shipped_dir() / "m4.json").read_text())
    written = json.loads(path.read_text())
    assert {k: v for k, v in written.items() if k not in ("reserve", "sources")} == \
        {k: v for k, v in shipped.items() if k not in ("reserve", "sources")}


def test_the_shipped_m4_profile_has_a_measured_reserve() -> None:
    reserve = load_profile("m4").reserve
    assert reserve is not None and reserve.stack_bytes >= STACK_MARGIN * reserve.stack_high_water_bytes
    assert reserve.per_node_bytes == 12      # a 4-byte where word and two 4-byte profiling counters
