"""The firmware fits the budget it was compiled for: built with arm-none-eabi-gcc, its RAM
(.data + .bss + .stack of the linked ELF) is at most what ``poetc compile`` counted (the
arena plus parameters, gradients, optimizer state, batch, outputs and the m4 profile's
runtime reserve), which is at most ``--ram``. Skipped without arm-none-eabi-gcc."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

import poet_compiler as pc
from poet_compiler.codegen.emit_c import emit_c
from poet_compiler.codegen.emit_c import run as runner
from poet_compiler.codegen.emit_c.ram_map import NRF52840_RAM, firmware_ram, ram_map
from poet_compiler.codegen.emit_c.train import TrainLoop
from poet_compiler.devices.profile import load_profile

pytestmark = pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None, reason="needs arm-none-eabi-gcc")


@dataclass(frozen=True)
class Fit:
    model: str
    ram: str
    strategy: str
    optimizer: str | None = None
    loop: bool = False


FITS = [
    # The README's headline budget (`make demo`), with a quick strategy: the same accounting.
    Fit("models/kws_dscnn.onnx", "256k", "belady"),
    # BatchNorm's new running statistics are outputs beside the arena.
    Fit("cifar_cnn_tiny", "70%", "capuchin"),
    # The training loop of `make device-train` at its budget, the update in the schedule.
    Fit("digits_cnn", "128k", "belady", optimizer="sgd:lr=0.02,momentum=0.9", loop=True),
]


@pytest.mark.parametrize("fit", FITS, ids=[f"{f.model}-{f.ram}" for f in FITS])
def test_firmware_ram_is_within_what_compile_counted(tmp_path: Path, fit: Fit) -> None:
    comp = pc.compile(fit.model, "m4", fit.ram, strategy=fit.strategy, optimizer=fit.optimizer)
    assert comp.result.ok, comp.result.message
    schedule, _ = comp.save(tmp_path / "s.poet")
    emitted = emit_c(fit.model, schedule, tmp_path / "emit", TrainLoop() if fit.loop else None)
    elf = runner.build(emitted.out_dir, "m4")
    measured = firmware_ram(elf)
    counted = comp.ram_split
    reserve = load_profile("m4").reserve
    assert reserve is not None and measured[".stack"] == emitted.stack_bytes == reserve.stack_bytes
    assert counted["total"] is not None
    assert measured["total"] <= counted["total"] <= comp.problem.ram_budget_bytes, (measured, counted,
                                                                                   ram_map(elf, emitted.out_dir /
                                                                                           "manifest.json"))
    if fit.ram == "256k":
        assert measured["total"] <= NRF52840_RAM
