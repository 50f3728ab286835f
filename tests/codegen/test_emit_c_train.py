"""poetc emit-c --train-loop: the training-loop firmware against the same loop in PyTorch.

A few steps of digits_cnn on the first digits of scikit-learn's set, following a
schedule that both recomputes and pages, with the SGD update applied by the driver after
the step (gradients out) or inside the schedule (update nodes): the per-step losses
must equal those of ``torch.optim.SGD`` on plain autograd (train_run.reference_losses)
within float32 tolerance (1e-5 relative: a few steps of float32 rounding, against the
1e-3 ``make device-train`` allows over 100 steps), the final parameters too, and the
device's held-out count of correct predictions must be the one PyTorch gets with the
device's final parameters. Fine-tuning a subset keeps every other parameter
bit-identical. Built for the host always, and for the Cortex-M4 under QEMU when the
tools are present.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import poet_compiler as pc
from poet_compiler.codegen.emit_c import TrainLoop, dataset, emit_c
from poet_compiler.codegen.emit_c import run as runner
from poet_compiler.codegen.emit_c import train_run
from poet_compiler.codegen.emit_c.emit import load_traced
from poet_compiler.schedule.program import Op

pytestmark = pytest.mark.skipif(shutil.which("make") is None or shutil.which("cc") is None,
                                reason="needs make and a C compiler")
pytest.importorskip("sklearn")

LOOP = TrainLoop(epochs=2, lr=0.02, momentum=0.9, log_every=1)
SGD = "sgd:lr=0.02,momentum=0.9"
N_TRAIN, N_TEST = 48, 20  # 3 steps a pass, a partial last evaluation batch


def _compile(tmp_path_factory: pytest.TempPathFactory, name: str, ram: str, deadline: str, **kw: str) -> Path:
    # m4_poet: on POET's published (slower) compute figures paging still pays at these budgets;
    # the kernels' own m4 profile recomputes instead (BENCHMARKS.md "Device training")
    comp = pc.compile("digits_cnn", "m4_poet", ram, deadline=deadline, time_limit_s=30, **kw)
    program = comp.program
    assert program is not None
    assert program.count(Op.PAGE_OUT) > 0 and program.count(Op.COMPUTE) > comp.graph.n
    path, _ = comp.save(tmp_path_factory.mktemp("sched") / f"{name}.poet")
    return path


@pytest.fixture(scope="module")
def schedule(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Gradients out: the driver applies SGD after each step (131k: a 104 KiB arena beside the
    27,236 B of parameters, gradients, batch, outputs and runtime reserve)."""
    return _compile(tmp_path_factory, "digits", "131k", "1.02x")


@pytest.fixture(scope="module")
def sgd_schedule(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The SGD update inside the schedule (parameters and momentum counted in the budget)."""
    return _compile(tmp_path_factory, "digits_sgd", "128k", "1.02x", optimizer=SGD)


def _split() -> dataset.Split:
    s = dataset.digits()
    return dataset.Split(s.x_train[:N_TRAIN], s.y_train[:N_TRAIN], s.x_test[:N_TEST], s.y_test[:N_TEST])


def _check(schedule: Path, tmp_path: Path, qemu: bool, in_schedule: bool = False) -> None:
    emitted = emit_c("digits_cnn", schedule, tmp_path / "emit", LOOP)
    manifest = json.loads((emitted.out_dir / "manifest.json").read_text())
    assert manifest["train"]["update_in_schedule"] is in_schedule
    assert manifest["train"]["optimizer"] == SGD
    split = _split()
    train_run.prepare(tmp_path / "run", split, None, manifest)
    run = train_run.run_firmware(emitted.out_dir, tmp_path / "run", qemu=qemu)
    steps = LOOP.epochs * (N_TRAIN // 16)
    assert run.figures["steps"] == len(run.losses) == steps
    assert len(run.lines) == steps + 1  # a loss line per step, then the summary

    torch.set_num_threads(1)
    module = load_traced("digits_cnn", schedule).module
    ref = train_run.reference_losses(module, split, manifest, steps)
    assert train_run.max_rel_loss_diff(run.losses, ref) <= 1e-5
    for name, p in module.named_parameters():
        got = run.params_out[name]
        assert np.abs(got - p.detach().numpy()).max() <= 1e-5 * max(1.0, float(p.detach().abs().max())), name

    # held-out accuracy: the device's count is PyTorch's argmax count with the device's parameters
    module.load_state_dict({n: torch.from_numpy(v) for n, v in run.params_out.items()}, strict=False)
    with torch.no_grad():
        pred = module(torch.from_numpy(split.x_test)).argmax(1).numpy()
    assert run.figures["total"] == N_TEST
    assert run.figures["correct"] == int((pred == split.y_test).sum())
    assert run.figures["arena"] == run.figures["planned"] == emitted.arena_bytes
    assert run.figures["step_paged_out"] > 0 and run.figures["step_computes"] > emitted.n_nodes


def test_host_training_loop_matches_pytorch(schedule: Path, tmp_path: Path) -> None:
    _check(schedule, tmp_path, qemu=False)


def test_host_training_loop_with_the_update_in_the_schedule(sgd_schedule: Path, tmp_path: Path) -> None:
    _check(sgd_schedule, tmp_path, qemu=False, in_schedule=True)


@pytest.mark.skipif(not runner.tools_for_m4(), reason="needs arm-none-eabi-gcc and qemu-system-arm")
def test_qemu_training_loop_with_the_update_in_the_schedule(sgd_schedule: Path, tmp_path: Path) -> None:
    _check(sgd_schedule, tmp_path, qemu=True, in_schedule=True)


def test_bad_loop_option_is_one_line_exit_2(schedule: Path, tmp_path: Path) -> None:
    poetc = Path(sys.executable).with_name("poetc")
    proc = subprocess.run([str(poetc), "emit-c", "digits_cnn", "-s", str(schedule), "-o", "out", "--train-loop",
                           "--momentum", "1.5"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: --momentum must be in [0, 1), got 1.5"]
    assert not (tmp_path / "out").exists()


def test_a_dataset_of_another_shape_is_refused_by_the_firmware(schedule: Path, tmp_path: Path) -> None:
    emitted = emit_c("digits_cnn", schedule, tmp_path / "emit", LOOP)
    manifest = json.loads((emitted.out_dir / "manifest.json").read_text())
    train_run.prepare(tmp_path / "run", _split(), None, manifest)
    dataset.write(tmp_path / "run" / "test.bin", np.zeros((4, 1, 4, 4), np.float32), np.zeros(4, np.int64))
    with pytest.raises(RuntimeError, match="FAILED accuracy on test.bin"):
        train_run.run_firmware(emitted.out_dir, tmp_path / "run", qemu=False)


FINETUNE = "classifier.*,*.bias"


@pytest.fixture(scope="module")
def finetune_schedule(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The update of the classifier and the biases inside the schedule, the rest frozen."""
    return _compile(tmp_path_factory, "finetune", "121k", "1.03x", optimizer="sgd:lr=0.1,momentum=0.5",
                    train=FINETUNE)


def _finetune(schedule: Path, tmp_path: Path, qemu: bool) -> None:
    """From a start in params.bin (not the compiled-in values), a few fine-tuning steps:
    the frozen parameters come back bit-identical, the trained ones as torch.optim has them."""
    emitted = emit_c("digits_cnn", schedule, tmp_path / "emit", TrainLoop(epochs=1))
    manifest = json.loads((emitted.out_dir / "manifest.json").read_text())
    assert manifest["train"]["update_in_schedule"] and manifest["train"]["optimizer"] == "sgd:lr=0.1,momentum=0.5"
    trained = {p["name"] for p in manifest["train"]["params"] if p["trained"]}
    assert trained == {"classifier.weight", "classifier.bias", "features.0.bias", "features.2.bias",
                       "features.5.bias"}
    module = load_traced("digits_cnn", schedule).module
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in module.parameters():  # a start unlike the compiled-in initialisation
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    start = train_run.initial_params(module)
    split = _split().only(range(5, 10))
    train_run.prepare(tmp_path / "run", split, start, manifest)
    run = train_run.run_firmware(emitted.out_dir, tmp_path / "run", qemu=qemu)
    for name, value in start.items():
        if name not in trained:
            assert run.params_out[name].tobytes() == value.tobytes(), f"frozen {name} changed"
        else:
            assert not np.array_equal(run.params_out[name], value), f"trained {name} did not move"
    torch.set_num_threads(1)
    ref = train_run.reference_losses(module, split, manifest, len(run.losses))
    assert train_run.max_rel_loss_diff(run.losses, ref) <= 1e-5


def test_host_finetuning_keeps_frozen_parameters_bit_identical(finetune_schedule: Path, tmp_path: Path) -> None:
    _finetune(finetune_schedule, tmp_path, qemu=False)


@pytest.mark.skipif(not runner.tools_for_m4(), reason="needs arm-none-eabi-gcc and qemu-system-arm")
def test_qemu_finetuning_keeps_frozen_parameters_bit_identical(finetune_schedule: Path, tmp_path: Path) -> None:
    _finetune(finetune_schedule, tmp_path, qemu=True)
