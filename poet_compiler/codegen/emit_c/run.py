"""Build an emitted directory, run its training step (host or QEMU), compare with PyTorch.

The comparison metric, used by the tests, ``make device-demo`` and the benchmark:

* **max rel grad diff** = max over parameters p of
  ``||g_dev(p) - g_ref(p)||_inf / max(||g_ref(p)||_inf, FLOOR * G)``, with
  ``G = max_q ||g_ref(q)||_inf`` the step's largest gradient element and FLOOR = 1e-3:
  the worst element error of each gradient relative to that gradient's own largest
  magnitude, so a near-zero element cannot blow the figure up. ``g_ref`` is PyTorch's
  float32 gradient of the same step (same weights, same batch: the traced joint graph
  run by PyTorch's CPU kernels). The floor exists for gradients that are almost zero by
  symmetry: a BatchNorm gamma feeding ReLU -> depthwise conv -> BatchNorm is invariant
  to its scale up to eps, so its gradient (~1e-6 where G ~ 0.2) is what is left after
  terms of ~1e-2 cancel, and float32 cannot carry it to 1e-4 relative: PyTorch's own
  float32 result differs from float64 by ~3e-3 relative there (``float64_reference``
  measures it). Those parameters are judged against 1e-3 of the step's gradient scale;
  every other parameter against its own magnitude;
* **loss diff** = ``|loss_dev - loss_ref|``;
* **max rel update diff**: the same as the grad figure over the float buffer updates
  (BatchNorm running statistics); int64 updates must be equal.

With an optimizer in the step (docs/training.md) the parameters and optimizer state are
the outputs, written in place, and two figures replace the gradient one:

* **max rel param diff** = max over parameters p of
  ``||p_dev - p_ref||_inf / max(||p_ref - p_0||_inf, FLOOR * U)``, ``p_0`` the parameter
  before the step and ``U`` the step's largest update element: the error of each update
  relative to that update's own magnitude (the parameter's magnitude would hide it), with
  the same floor as the gradients for updates that are almost zero;
* **max rel state diff** = max over state tensors s of
  ``||s_dev - s_ref||_inf / max(||s_ref||_inf, FLOOR * S)``, ``S`` the largest state
  element of its kind (momentum buffer, exp_avg, exp_avg_sq); Adam's step counts must be
  equal.

Adam's parameter figure leaves out the elements whose gradient is below
``ADAM_CONDITION * eps`` (100 eps = 1e-6 by default), counted in ``n_ill_conditioned``.
Their update ``lr * m/(sqrt(v) + eps)`` is ``lr * g/(|g| + eps)`` on the first step, whose
derivative in g, ``lr * eps/(|g| + eps)^2``, reaches lr/eps = 1e5 lr there: a gradient
that is float32 rounding noise (a BatchNorm gamma whose gradient vanishes by symmetry:
``g`` = -5.7e-9 in PyTorch and -6.7e-9 in C on kws_dscnn, where the step's largest
gradient is ~0.2 and 0.2 * 2^-24 = 1.2e-8) gets an update of any size up to lr in
either. Above 100 eps the derivative is below lr/(100 |g|), so the gradient's error is
damped, not amplified, and the figure is held to the same bound as SGD's. The state
figure covers every element (the moments are linear in g).

QEMU runs with ``-icount shift=ICOUNT_SHIFT``: the virtual clock advances 2^shift ns per
guest instruction, and the timer the firmware reads (CMSDK APB timer 0) runs at the
board's 25 MHz, so instructions = ticks * 40 ns / 2^shift ns (shift 6: 0.625
instructions per tick, i.e. to within one instruction).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from poet_compiler.frontends.torch.traced import TracedModel

ICOUNT_SHIFT = 6
TIMER_HZ = 25_000_000
BOARD = "mps2-an386"
_NP = {"float": "<f4", "int32_t": "<i4", "int64_t": "<i8"}


def instructions_per_tick(shift: int = ICOUNT_SHIFT) -> float:
    return (1e9 / TIMER_HZ) / (1 << shift)


@dataclass
class StepRun:
    """What one run of the emitted step reported."""

    line: str
    outputs: dict[str, np.ndarray]
    node_ticks: np.ndarray
    node_runs: np.ndarray
    step_ticks: int
    figures: dict[str, int] = field(default_factory=dict)  # arena, planned, paged_out, paged_in, computes, ...


def tools_for_m4() -> bool:
    return all(shutil.which(t) for t in ("arm-none-eabi-gcc", "qemu-system-arm"))


def build(out_dir: Path, target: str) -> Path:
    """``make host`` or ``make m4`` in the emitted directory; the binary's path."""
    proc = subprocess.run(["make", "-s", "-C", str(out_dir), target], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"make {target} failed:\n{proc.stdout}\n{proc.stderr}")
    return Path(out_dir) / "build" / ("step_host" if target == "host" else "step_m4.elf")


def _parse(line: str) -> dict[str, int]:
    out = {}
    for tok in line.split():
        if "=" in tok:
            k, v = tok.split("=", 1)
            if v.isdigit():
                out[k] = int(v)
    return out


def _collect(out_dir: Path, work: Path, stdout: str) -> StepRun:
    manifest = json.loads((Path(out_dir) / "manifest.json").read_text())
    lines = [ln for ln in stdout.splitlines() if ln.startswith("poet-step:")]
    if not lines or " ok " not in lines[-1] + " ":
        raise RuntimeError(f"the step failed: {stdout.strip()[-500:]}")
    raw = (work / "outputs.bin").read_bytes()
    outputs: dict[str, np.ndarray] = {}
    pos = 0
    for o in manifest["outputs"]:
        n = o["bytes"]
        outputs[o["name"]] = np.frombuffer(raw[pos:pos + n], dtype=_NP[o["ctype"]]).reshape(o["shape"]).copy()
        pos += n
    if pos != len(raw):
        raise RuntimeError(f"outputs.bin holds {len(raw)} B, the manifest {pos} B")
    prof = (work / "profile.bin").read_bytes()
    nn = manifest["n_nodes"]
    ticks = np.frombuffer(prof[:4 * nn], dtype="<u4").copy()
    runs = np.frombuffer(prof[4 * nn:8 * nn], dtype="<u4").copy()
    step = int(np.frombuffer(prof[8 * nn:8 * nn + 8], dtype="<u8")[0])
    return StepRun(lines[-1], outputs, ticks, runs, step, _parse(lines[-1]))


def run_host(out_dir: Path, work: Path, timeout: float = 120) -> StepRun:
    binary = build(out_dir, "host").resolve()
    work.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(out_dir) / "input.bin", work / "input.bin")
    proc = subprocess.run([str(binary)], cwd=work, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"host step exited {proc.returncode}: {proc.stdout}{proc.stderr}")
    return _collect(out_dir, work, proc.stdout)


def run_qemu(out_dir: Path, work: Path, timeout: float = 600, shift: int = ICOUNT_SHIFT) -> StepRun:
    elf = build(out_dir, "m4").resolve()
    work.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(out_dir) / "input.bin", work / "input.bin")
    proc = subprocess.run(qemu_command(elf, shift), cwd=work, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"qemu exited {proc.returncode}: {proc.stdout[-500:]}{proc.stderr[-500:]}")
    # QEMU writes the semihosting console (SYS_WRITE0) to stderr
    return _collect(out_dir, work, proc.stdout + proc.stderr)


def qemu_command(elf: Path, shift: int = ICOUNT_SHIFT) -> list[str]:
    """Run ``elf`` on the emulated board, semihosting files relative to the working directory."""
    return ["qemu-system-arm", "-M", BOARD, "-nographic", "-monitor", "none", "-serial", "none",
            "-semihosting-config", "enable=on,target=native", "-icount", f"shift={shift}", "-kernel", str(elf)]


@dataclass(frozen=True)
class Comparison:
    max_rel_grad_diff: float
    worst_grad: str
    loss_dev: float
    loss_ref: float
    max_rel_update_diff: float
    n_grads: int
    max_rel_param_diff: float | None = None   # with an optimizer in the step
    worst_param: str = ""
    max_rel_state_diff: float | None = None
    n_ill_conditioned: int = 0                # Adam: elements left out of the param figure

    @property
    def loss_diff(self) -> float:
        return abs(self.loss_dev - self.loss_ref)


def rel_inf(dev: np.ndarray, ref: np.ndarray) -> float:
    """||dev - ref||_inf / max(||ref||_inf, 1e-12)."""
    ref = np.asarray(ref, dtype=np.float64)
    return float(
        np.abs(np.asarray(dev, dtype=np.float64) - ref).max(initial=0.0) / max(np.abs(ref).max(initial=0.0), 1e-12)
    )


def reference(tm: TracedModel) -> list[np.ndarray]:
    """PyTorch's outputs of the step (loss, grads, buffer updates) for the example batch."""
    import torch

    with torch.no_grad():
        outs = tm.gm(*tm.flat_args())
    return [o.detach().cpu().numpy() for o in outs]


FLOOR = 1e-3
ADAM_CONDITION = 100.0


def float64_reference(tm: TracedModel) -> list[np.ndarray]:
    """The same step's outputs in float64 (weights and batch converted exactly): how far
    PyTorch's float32 gradients are from the exact ones, for context."""
    import torch

    args = [a.double() if a.dtype == torch.float32 else a for a in tm.flat_args()]
    with torch.no_grad():
        outs = tm.gm(*args)
    return [o.detach().cpu().numpy() for o in outs]


def grad_diffs(tm: TracedModel, outputs: dict[str, np.ndarray], ref: list[np.ndarray]) -> dict[str, float]:
    """Per parameter: ||dev - ref||_inf / max(||ref||_inf, FLOOR * G) (see the module docstring)."""
    names = list(outputs)
    g = len(tm.grad_names)
    scale = max(float(np.abs(ref[k]).max(initial=0.0)) for k in range(1, 1 + g))
    out = {}
    for k in range(1, 1 + g):
        dev, want = np.asarray(outputs[names[k]], np.float64), np.asarray(ref[k], np.float64)
        denom = max(float(np.abs(want).max(initial=0.0)), FLOOR * scale, 1e-30)
        out[names[k]] = float(np.abs(dev.reshape(want.shape) - want).max(initial=0.0)) / denom
    return out


def _rel_floor(dev: np.ndarray, want: np.ndarray, base: np.ndarray, floor: float) -> float:
    d = np.asarray(dev, np.float64).reshape(want.shape) - np.asarray(want, np.float64)
    scale = float(np.abs(np.asarray(want, np.float64) - base).max(initial=0.0))
    return float(np.abs(d).max(initial=0.0)) / max(scale, floor, 1e-30)


def _compare_updates(tm: TracedModel, run: StepRun, ref: list[np.ndarray]) -> Comparison:
    """The figures of a step with an optimizer (module docstring)."""
    assert tm.optimizer is not None
    start = {n: a.detach().cpu().numpy() for n, a in zip(tm.placeholder_names, tm.flat_args())}
    placeholder_of = {**dict(zip(tm.param_names, tm.placeholder_names)),
                      **dict(zip(tm.buffer_names, tm.placeholder_names[len(tm.param_names):]))}
    names = list(run.outputs)
    items = list(zip(tm.update_names, ref[1:], names[1:]))
    params = [(n, w, d) for n, w, d in items if n in tm.param_names]
    states = [(n, w, d) for n, w, d in items if n in tm.state_names]
    base = {n: start[placeholder_of[n]] for n, _, _ in params}
    u = max((float(np.abs(w - base[n]).max(initial=0.0)) for n, w, _ in params), default=0.0)
    worst, worst_name, ill = 0.0, "", 0
    grads = _autograd_grads(tm) if tm.optimizer.kind != "sgd" else {}
    for n, want, dev in params:
        got = np.asarray(run.outputs[dev], np.float64).reshape(want.shape)
        if n in grads:
            noisy = np.abs(grads[n]) < ADAM_CONDITION * tm.optimizer.eps
            ill += int(noisy.sum())
            got = np.where(noisy, want, got)
        d = _rel_floor(got, want, base[n], FLOOR * u)
        if d >= worst:
            worst, worst_name = d, n
    kinds: dict[str, float] = {}
    for n, want, _ in states:
        kind = n.rpartition("@")[2]
        kinds[kind] = max(kinds.get(kind, 0.0), float(np.abs(want).max(initial=0.0)))
    state = 0.0
    for n, want, dev in states:
        kind = n.rpartition("@")[2]
        if kind == "step":
            state = max(state, 0.0 if np.array_equal(run.outputs[dev].reshape(want.shape), want) else float("inf"))
        else:
            state = max(state, _rel_floor(run.outputs[dev], want, np.zeros_like(want), FLOOR * kinds[kind]))
    upd = 0.0
    for n, want, dev in items:
        if n in tm.param_names or n in tm.state_names:
            continue
        got = run.outputs[dev]
        if want.dtype == np.int64:
            upd = max(upd, 0.0 if np.array_equal(got.reshape(want.shape), want) else float("inf"))
        else:
            upd = max(upd, rel_inf(got, want))
    return Comparison(0.0, "", float(run.outputs[names[0]].reshape(-1)[0]), float(ref[0].reshape(-1)[0]), upd, 0,
                      max_rel_param_diff=worst, worst_param=worst_name, max_rel_state_diff=state,
                      n_ill_conditioned=ill)


def _autograd_grads(tm: TracedModel) -> dict[str, np.ndarray]:
    """PyTorch's gradients of the step's trained parameters (plain autograd on a copy)."""
    import copy

    model = copy.deepcopy(tm.module)
    loss = tm.loss_fn(model(*tm.example_inputs), tm.target)
    loss.backward()
    return {n: p.grad.detach().cpu().numpy() for n, p in model.named_parameters() if p.grad is not None}


def compare(tm: TracedModel, run: StepRun) -> Comparison:
    ref = reference(tm)
    if tm.optimizer is not None:
        return _compare_updates(tm, run, ref)
    names = list(run.outputs)
    g = len(tm.grad_names)
    worst, worst_name = 0.0, ""
    diffs = grad_diffs(tm, run.outputs, ref)
    for k in range(1, 1 + g):
        d = diffs[names[k]]
        if d >= worst:
            worst, worst_name = d, names[k]
    upd = 0.0
    for k in range(1 + g, len(ref)):
        dev, want = run.outputs[names[k]], ref[k]
        if want.dtype == np.int64:
            upd = max(upd, 0.0 if np.array_equal(dev.reshape(want.shape), want) else float("inf"))
        else:
            upd = max(upd, rel_inf(dev, want))
    return Comparison(worst, worst_name, float(run.outputs[names[0]].reshape(-1)[0]), float(ref[0].reshape(-1)[0]),
                      upd, g)
