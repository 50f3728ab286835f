"""Run the training-loop firmware (host or QEMU) and the same loop in plain PyTorch.

:func:`run_firmware` builds an emitted ``--train-loop`` directory, runs it in a working
directory holding ``train.bin``/``test.bin`` (and ``params.bin`` for a pretrained start)
and collects its losses, final parameters and summary figures. :func:`reference_losses`
is the independent oracle: the module built and initialised the same way, its frozen
parameters ``requires_grad=False``, the firmware's optimizer as a ``torch.optim`` instance
(``torch.optim.SGD``, single-tensor path) over the trained ones, the same
batches in the same order (file order, the last partial batch dropped), float32 on the
CPU; it shares no code with the emitted C or the schedule.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from poet_compiler.codegen.emit_c import dataset
from poet_compiler.codegen.emit_c.run import build, qemu_command
from poet_compiler.frontends.torch.optimizer import parse_optimizer


@dataclass
class TrainRun:
    lines: list[str]                  # every poet-train line the firmware printed
    losses: np.ndarray                # float32, one per step
    params_out: dict[str, np.ndarray]
    figures: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0


def _figures(line: str) -> dict[str, int]:
    out = {}
    for tok in line.split():
        k, _, v = tok.partition("=")
        if v.isdigit():
            out[k] = int(v)
    return out


def params_bytes(manifest: dict, values: dict[str, np.ndarray]) -> bytes:
    """``params.bin``: every parameter in the manifest's order, float32."""
    return b"".join(np.ascontiguousarray(values[p["name"]], dtype="<f4").tobytes()
                    for p in manifest["train"]["params"])


def read_params(manifest: dict, raw: bytes) -> dict[str, np.ndarray]:
    out, pos = {}, 0
    for p in manifest["train"]["params"]:
        out[p["name"]] = np.frombuffer(raw[pos:pos + p["bytes"]], dtype="<f4").reshape(p["shape"]).copy()
        pos += p["bytes"]
    if pos != len(raw):
        raise RuntimeError(f"params_out.bin holds {len(raw)} B, the manifest {pos} B")
    return out


def prepare(work: Path, split: dataset.Split, init: dict[str, np.ndarray] | None, manifest: dict) -> None:
    """The firmware's files in ``work``: the data sets and, for a pretrained start, params.bin."""
    work.mkdir(parents=True, exist_ok=True)
    dataset.write(work / "train.bin", split.x_train, split.y_train)
    dataset.write(work / "test.bin", split.x_test, split.y_test)
    (work / "params.bin").unlink(missing_ok=True)
    if init is not None:
        (work / "params.bin").write_bytes(params_bytes(manifest, init))


def run_firmware(out_dir: Path, work: Path, *, qemu: bool, timeout: float = 900) -> TrainRun:
    """Build and run the loop in ``work`` (prepared by :func:`prepare`)."""
    binary = build(out_dir, "m4" if qemu else "host").resolve()
    cmd = qemu_command(binary) if qemu else [str(binary)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    text = proc.stdout + proc.stderr  # QEMU writes the semihosting console to stderr
    lines = [ln for ln in text.splitlines() if ln.startswith("poet-train:")]
    if proc.returncode != 0 or not lines or not lines[-1].startswith("poet-train: ok "):
        raise RuntimeError(f"the training loop failed (exit {proc.returncode}): {text.strip()[-500:]}")
    manifest = json.loads((Path(out_dir) / "manifest.json").read_text())
    losses = np.frombuffer((work / "losses.bin").read_bytes(), dtype="<f4").copy()
    params = read_params(manifest, (work / "params_out.bin").read_bytes())
    return TrainRun(lines, losses, params, _figures(lines[-1]), wall)


def initial_params(module: nn.Module) -> dict[str, np.ndarray]:
    return {n: p.detach().cpu().numpy().astype(np.float32).copy() for n, p in module.named_parameters()}


def reference_losses(module: nn.Module, split: dataset.Split, manifest: dict, steps: int,
                     loss_fn: object = nn.functional.cross_entropy) -> np.ndarray:
    """The first ``steps`` losses of the same loop in PyTorch float32 (``module`` is changed)."""
    train = manifest["train"]
    trained = {p["name"] for p in train["params"] if p["trained"]}
    for name, p in module.named_parameters():
        p.requires_grad_(name in trained)
    opt = parse_optimizer(train["optimizer"]).to_torch([p for p in module.parameters() if p.requires_grad])
    x, y = torch.from_numpy(split.x_train), torch.from_numpy(split.y_train)
    batch: int = train["batch"]
    out: list[float] = []
    module.train()
    for _ in range(train["epochs"]):
        for b in range(len(x) // batch):
            if len(out) == steps:
                return np.array(out, dtype=np.float32)
            opt.zero_grad()
            loss = loss_fn(module(x[b * batch:(b + 1) * batch]), y[b * batch:(b + 1) * batch])  # type: ignore[operator]
            loss.backward()
            opt.step()
            out.append(float(loss.detach()))
    return np.array(out, dtype=np.float32)


def max_rel_loss_diff(dev: np.ndarray, ref: np.ndarray) -> float:
    """max over steps of |l_dev - l_ref| / |l_ref| (the first len(ref) steps)."""
    n = len(ref)
    if len(dev) < n:
        raise RuntimeError(f"the device ran {len(dev)} steps, fewer than the {n} compared")
    d = np.abs(dev[:n].astype(np.float64) - ref.astype(np.float64)) / np.abs(ref.astype(np.float64))
    return float(d.max(initial=0.0))
