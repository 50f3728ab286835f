"""Which part of the int8 step costs digits_cnn its accuracy: bench/int8_sim.py's float
simulation with one quantization switched on at a time, then all but one
(docs/int8.md, "Ablation"). `make device-train`'s data, split, batch 16 and 5 epochs.

    PYTHONPATH=. .venv/bin/python bench/int8_ablation.py [--lr 0.02 --momentum 0.9] [--only NAME]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from int8_host import model_and_data  # noqa: E402
from int8_sim import Sim, Stats, Switches  # noqa: E402

from poet_compiler.quant import calibrate  # noqa: E402

ALL = Switches(act="delayed", logits="delayed", loss=True, grad="delayed", weight="int8", rounding="residual8",
               momentum_q=True)
SINGLE = {
    "float": Switches(),
    "act, delayed k": Switches(act="delayed"),
    "act, dynamic k": Switches(act="dynamic"),
    "logits, static scale": Switches(logits="static"),
    "logits, static, outward gradient dropped": Switches(logits="static", block=True),
    "logits, delayed k": Switches(logits="delayed"),
    "loss (integer softmax), logits delayed": Switches(logits="delayed", loss=True),
    "grad, delayed E": Switches(grad="delayed"),
    "grad, dynamic E": Switches(grad="dynamic"),
    "weights: float master, int8 in the step": Switches(weight="master"),
    "weights int8: stochastic rounding": Switches(weight="int8"),
    "weights int8: nearest": Switches(weight="int8", rounding="nearest"),
    "weights int8: truncate": Switches(weight="int8", rounding="truncate"),
    "weights int8: int8 residual": Switches(weight="int8", rounding="residual8"),
    "weights int8: int16 residual": Switches(weight="int8", rounding="residual16"),
    "weights int8: int8 residual, Q8 momentum": Switches(weight="int8", rounding="residual8", momentum_q=True),
}
LEAVE_OUT = {
    "all (the spec)": ALL,
    "all, logits static": dataclasses.replace(ALL, logits="static"),
    "all, act float": dataclasses.replace(ALL, act="float"),
    "all, act dynamic": dataclasses.replace(ALL, act="dynamic"),
    "all, loss float": dataclasses.replace(ALL, loss=False),
    "all, grad float": dataclasses.replace(ALL, grad="float"),
    "all, grad dynamic": dataclasses.replace(ALL, grad="dynamic"),
    "all, weights float": dataclasses.replace(ALL, weight="float", momentum_q=False),
    "all, weights master": dataclasses.replace(ALL, weight="master", momentum_q=False),
    "all, nearest": dataclasses.replace(ALL, rounding="nearest"),
    "all, truncate": dataclasses.replace(ALL, rounding="truncate"),
    "all, stochastic rounding": dataclasses.replace(ALL, rounding="stochastic"),
    "all, int16 residual": dataclasses.replace(ALL, rounding="residual16"),
    "all, momentum float": dataclasses.replace(ALL, momentum_q=False),
    "all, exact channel scales in the input gradient": dataclasses.replace(ALL, exact_rescale=True),
}


def train(sw: Switches, name: str, split_seed: int, lr: float, momentum: float, epochs: int,
          init: str = "default") -> tuple[list[float], list[Stats]]:
    b = 16
    graph, _, split = model_and_data(name, split_seed, init)
    model = calibrate.quantize(graph, split.x_train[:b], split.y_train[:b])
    sim = Sim(model, graph, sw, lr, b, momentum, split_seed)
    qin = model.qparams[model.input]
    x = torch.from_numpy(qin.dequantize(qin.quantize(split.x_train)))
    xt = torch.from_numpy(qin.dequantize(qin.quantize(split.x_test)))
    y = torch.from_numpy(split.y_train)
    accs, stats = [], []
    for _ in range(epochs):
        for i in range(len(x) // b):
            s = sim.step(x[i * b:(i + 1) * b], y[i * b:(i + 1) * b])
            stats.append(s)
        acc = 100.0 * float(np.mean(sim.predict(xt) == split.y_test))
        accs.append(acc)
    return accs, stats


def summary(stats: list[Stats]) -> str:
    tot = Stats()
    for s in stats:
        for f in dataclasses.fields(Stats):
            if f.name != "loss":
                setattr(tot, f.name, getattr(tot, f.name) + getattr(s, f.name))
    losses = [s.loss for s in stats]
    nan = next((i for i, v in enumerate(losses) if not np.isfinite(v) or v > 20), None)
    parts = [f"loss last 20 {np.mean(losses[-20:]):.3f}"]
    if tot.updated:
        parts.append(f"changed {100.0 * tot.changed / tot.updated:.1f} %")
    if tot.act_values:
        parts.append(f"act sat {100.0 * tot.act_saturated / tot.act_values:.3f} %")
    if tot.grad_values:
        parts.append(f"grad sat {100.0 * tot.grad_saturated / tot.grad_values:.3f} % "
                     f"zeroed {100.0 * tot.grad_zero / tot.grad_values:.1f} %")
    parts.append(f"logit sat/step {tot.logit_saturated / len(stats):.1f}")
    parts.append(f"moves act {tot.act_moves} grad {tot.grad_moves} w +{tot.weight_grows}/-{tot.weight_shrinks}")
    if nan is not None:
        parts.append(f"blow-up at step {nan}")
    return ", ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--only", action="append", default=None, help="row name(s) to run")
    ap.add_argument("--splits", type=int, default=1, help="train/test split seeds 0..N-1 per row (0: the device's)")
    ap.add_argument("--model", default="digits_cnn", help="a zoo model; the digits resized to its input")
    ap.add_argument("--init", default="default", choices=["default", "he"], help="initial weights (he: Kaiming normal)")
    ap.add_argument("--part", default="0/1", help="run every N-th row from the I-th: I/N")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = {**SINGLE, **LEAVE_OUT}
    part, parts = (int(v) for v in args.part.split("/"))
    print(f"{args.model}: lr {args.lr} momentum {args.momentum}, {args.epochs} epochs; held-out accuracy per epoch")
    for i, (name, sw) in enumerate(rows.items()):
        if (args.only and name not in args.only) or i % parts != part:
            continue
        finals, detail = [], ""
        for seed in range(args.splits):
            accs, stats = train(sw, args.model, seed, args.lr, args.momentum, args.epochs, args.init)
            finals.append(accs[-1])
            if seed == 0:
                detail = " ".join(f"{a:.1f}" for a in accs) + " | " + summary(stats)
        spread = f" (splits: {' '.join(f'{a:.1f}' for a in finals)})" if len(finals) > 1 else ""
        print(f"{name:45s} {np.mean(finals):5.1f} %{spread}  [{detail}]", flush=True)


if __name__ == "__main__":
    main()
