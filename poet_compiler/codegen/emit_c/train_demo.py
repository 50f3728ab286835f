"""``make device-train``: train a model on the emulated Cortex-M4 on real data, checked.

``python -m poet_compiler.codegen.emit_c.train_demo MODEL SCHEDULE [options]`` emits the
training-loop firmware (``emit-c --train-loop``), writes scikit-learn's 8x8 digits split
80/20 with a fixed seed as data set files, runs the loop under ``qemu-system-arm -M
mps2-an386`` (or the host build with ``--host``), runs the same loop in PyTorch
(:func:`~.train_run.reference_losses`) and ends with one line::

    device training on mps2-an386 (Cortex-M4): S steps, held-out accuracy A %,
    max rel loss diff D, firmware RAM R B of 262144 B

A: held-out accuracy computed on the device after training; D: the largest
|loss_dev - loss_torch| / |loss_torch| over the first ``--compare-steps`` steps; R:
.data + .bss + .stack of the linked ELF. With ``--pretrain-classes`` the model is first
trained on the host on those digits and the device fine-tunes it on ``--classes``
(``device fine-tuning ...`` line, accuracy before -> after, and every parameter the
schedule does not train must come back bit-identical).

Exit code 1 when A < --min-accuracy, D > --tolerance, R > 262,144 B, the stack's
high-water mark reaches the stack reserved, the arena is not the planned one, a frozen
parameter changed, or a --require-* property of the schedule does not hold; 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from poet_compiler.codegen.emit_c import dataset, train_run
from poet_compiler.codegen.emit_c import run as runner
from poet_compiler.codegen.emit_c.emit import EmitResult, emit_c, load_traced
from poet_compiler.codegen.emit_c.ram_map import NRF52840_RAM, firmware_ram, ram_line, ram_map, ram_problems
from poet_compiler.codegen.emit_c.train import TrainLoop
from poet_compiler.errors import PoetError


def _classes(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    try:
        return list(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a digit range such as 0-4, got {text!r}") from None


def pretrain(module: torch.nn.Module, split: dataset.Split, epochs: int, lr: float, batch: int) -> None:
    """Train every parameter on the host (SGD, momentum 0.9), in place; the parameters the
    schedule freezes (``requires_grad=False`` in the traced module) are trained here too."""
    frozen = [p for p in module.parameters() if not p.requires_grad]
    for p in frozen:
        p.requires_grad_(True)
    opt = torch.optim.SGD(module.parameters(), lr=lr, momentum=0.9)
    x, y = torch.from_numpy(split.x_train), torch.from_numpy(split.y_train)
    for _ in range(epochs):
        for b in range(len(x) // batch):
            opt.zero_grad()
            rows = slice(b * batch, (b + 1) * batch)
            torch.nn.functional.cross_entropy(module(x[rows]), y[rows]).backward()
            opt.step()
    for p in frozen:
        p.requires_grad_(False)
        p.grad = None


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="device-train", description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("schedule", type=Path)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--lr", type=float, default=0.02, help="SGD learning rate (when the driver applies the update)")
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--classes", type=_classes, default=list(range(10)), help="digits to train on (e.g. 5-9)")
    ap.add_argument("--pretrain-classes", type=_classes, default=None,
                    help="first train on the host on these digits, then fine-tune on the device")
    ap.add_argument("--pretrain-epochs", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0, help="seed of the 80/20 split")
    ap.add_argument("--compare-steps", type=int, default=100)
    ap.add_argument("--tolerance", type=float, default=1e-3)
    ap.add_argument("--min-accuracy", type=float, default=90.0)
    ap.add_argument("--require-remat", action="store_true")
    ap.add_argument("--require-paging", action="store_true")
    ap.add_argument("--host", action="store_true", help="run the host build instead of QEMU")
    ap.add_argument("--work", type=Path, default=None, help="working directory (default: a temporary one)")
    ap.add_argument("--timeout", type=float, default=900.0, help="time limit of the run in seconds")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not args.host and not runner.tools_for_m4():
        print("error: device-train needs arm-none-eabi-gcc and qemu-system-arm "
              "(apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm)", file=sys.stderr)
        return 2
    torch.set_num_threads(1)  # the reference loop: same result on any machine load
    with tempfile.TemporaryDirectory(prefix="poet-train-") as tmp:
        work = args.work or Path(tmp)
        try:
            loop = TrainLoop(epochs=args.epochs, lr=args.lr, momentum=args.momentum, log_every=args.log_every)
            emitted = emit_c(args.model, args.schedule, work / "emit", loop)
            tm = load_traced(args.model, args.schedule)
            full = dataset.digits(seed=args.seed)
        except PoetError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        manifest = json.loads((emitted.out_dir / "manifest.json").read_text())
        split = full.only(args.classes)
        module = tm.module  # the traced module: the weights compiled into the firmware
        init = None
        if args.pretrain_classes is not None:
            pretrain(module, full.only(args.pretrain_classes), args.pretrain_epochs, 0.02, manifest["train"]["batch"])
            init = train_run.initial_params(module)
        start = train_run.initial_params(module)
        train_run.prepare(work / "sd", split, init, manifest)
        try:
            run = train_run.run_firmware(emitted.out_dir, work / "sd", qemu=not args.host, timeout=args.timeout)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"FAIL: the training loop did not complete: {' '.join(str(exc).split())[:300]}", file=sys.stderr)
            return 1
        for line in run.lines[:-1]:
            print(line)
        return _judge(args, emitted, manifest, run, train_run.reference_losses(
            module, split, manifest, min(args.compare_steps, len(run.losses))), start)


def _judge(args: argparse.Namespace, emitted: EmitResult, manifest: dict, run: train_run.TrainRun,
           ref: np.ndarray, start: dict[str, np.ndarray]) -> int:
    """Print the run's figures against the reference loop's losses ``ref`` and the
    parameters it started from (``start``), and the checks that failed: 1 if any did."""
    fig = run.figures
    diff = train_run.max_rel_loss_diff(run.losses, ref)
    acc = 100.0 * fig["correct"] / fig["total"]
    frozen = [p["name"] for p in manifest["train"]["params"] if not p["trained"]]
    changed = [n for n in frozen if not np.array_equal(run.params_out[n].view(np.uint32), start[n].view(np.uint32))]
    problems, ram_total = ([], 0) if args.host else _device_figures(args, emitted, run)
    n_ref = min(args.compare_steps, len(run.losses))
    print(f"  loss: first {run.losses[0]:.6f}, last {run.losses[-1]:.6f}; PyTorch float32 over the first {n_ref} "
          f"steps: max rel diff {diff:.2e}")
    if fig["arena"] != fig["planned"] or fig["arena"] != emitted.arena_bytes:
        problems.append(f"arena {fig['arena']} B is not the planned {emitted.arena_bytes} B")
    if args.require_paging and not fig["step_paged_out"]:
        problems.append("the schedule does not page")
    if args.require_remat and not fig["step_computes"] > emitted.n_nodes:
        problems.append("the schedule does not recompute")
    if not diff <= args.tolerance:
        problems.append(f"max rel loss diff {diff:.3g} > {args.tolerance}")
    if not acc >= args.min_accuracy:
        problems.append(f"held-out accuracy {acc:.1f} % < {args.min_accuracy} %")
    if changed:
        problems.append(f"frozen parameters changed: {', '.join(changed)}")
    for p in problems:
        print(f"  FAIL: {p}")
    where = f"{runner.BOARD} (Cortex-M4)" if not args.host else "the host build"
    ram_part = f", firmware RAM {ram_total} B of {NRF52840_RAM} B" if not args.host else ""
    if args.pretrain_classes is None:
        print(f"device training on {where}: {fig['steps']} steps, held-out accuracy {acc:.1f} %, "
              f"max rel loss diff {diff:.2e}{ram_part}")
    else:
        digits = f"{args.classes[0]}-{args.classes[-1]}"
        acc_before = 100.0 * fig["correct_before"] / fig["total"]
        print(f"device fine-tuning on {where}: {fig['steps']} steps on digits {digits}, held-out accuracy "
              f"{acc_before:.1f} % -> {acc:.1f} %, {len(frozen)} of {len(manifest['train']['params'])} parameters "
              f"frozen ({len(frozen) - len(changed)} bit-identical), max rel loss diff {diff:.2e}{ram_part}")
    return 1 if problems else 0


def _device_figures(args: argparse.Namespace, emitted: EmitResult, run: train_run.TrainRun) -> tuple[list[str], int]:
    """Print what the Cortex-M4 run took (computes, paging, instructions, the RAM map);
    the checks of its RAM that failed, and the firmware's RAM."""
    fig = run.figures
    elf = emitted.out_dir / "build" / "step_m4.elf"
    sections = firmware_ram(elf)
    ram_total = sections["total"]
    ram = ram_map(elf, emitted.out_dir / "manifest.json")
    ipt = runner.instructions_per_tick()
    recomputed = fig["step_computes"] - emitted.n_nodes
    print(f"{args.model} with {args.schedule.name}: {emitted.n_nodes} nodes, {fig['step_computes']} computes "
          f"a step ({recomputed} recomputed), paged out {fig['step_paged_out']} B / "
          f"in {fig['step_paged_in']} B a step; stack high-water {fig['stack']} B of {sections['.stack']} B")
    print(f"  instructions: {round(fig['train_ticks'] * ipt):,} training ({round(fig['step_ticks'] * ipt):,} "
          f"the first step), {round(fig['eval_ticks'] * ipt):,} held-out accuracy (twice); "
          f"QEMU wall {run.wall_s:.1f} s")
    print(ram_line(ram, sections))
    problems = ram_problems(fig["stack"], sections)
    return problems, ram_total


if __name__ == "__main__":
    sys.exit(main())
