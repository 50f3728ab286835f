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

from int8_sim import Sim, Stats, Switches  # noqa: E402

from poet_compiler.codegen.emit_c import dataset  # noqa: E402
from poet_compiler.quant import calibrate, sources  # noqa: E402

ALL = Switches(act="delayed", logits="static", loss=True, grad="delayed", weight="int8", rounding="stochastic",
               momentum_q=True)
SINGLE = {
    "float": Switches(),
    "act (delayed k)": Switches(act="delayed"),
    "logits (static)": Switches(logits="static"),
    "logits (static, outward gradient blocked)": Switches(logits="static", block=True),
    "logits (delayed exponent)": Switches(logits="delayed"),
    "loss (integer softmax, static logits)": Switches(logits="static", loss=True),
    "loss (integer softmax, delayed logits)": Switches(logits="delayed", loss=True),
    "grad (delayed E)": Switches(grad="delayed"),
    "weights: float master, int8 in the step": Switches(weight="master"),
    "weights: int8, stochastic rounding": Switches(weight="int8"),
    "weights: int8, nearest rounding": Switches(weight="int8", rounding="nearest"),
    "weights: int8, residual (exact)": Switches(weight="int8", rounding="residual"),
    "weights: int8, stochastic, Q8 momentum": Switches(weight="int8", momentum_q=True),
}
LEAVE_OUT = {
    "all (the spec)": ALL,
    "all but act": dataclasses.replace(ALL, act="float"),
    "all, act dynamic": dataclasses.replace(ALL, act="dynamic"),
    "all but logits/loss": dataclasses.replace(ALL, logits="float", loss=False),
    "all, logits delayed": dataclasses.replace(ALL, logits="delayed"),
    "all, logits blocked": dataclasses.replace(ALL, block=True),
    "all, logits delayed and blocked": dataclasses.replace(ALL, logits="delayed", block=True),
    "all but loss": dataclasses.replace(ALL, loss=False),
    "all but grad": dataclasses.replace(ALL, grad="float"),
    "all, grad dynamic": dataclasses.replace(ALL, grad="dynamic"),
    "all but weights (float)": dataclasses.replace(ALL, weight="float", momentum_q=False),
    "all, weights master": dataclasses.replace(ALL, weight="master", momentum_q=False),
    "all, residual (exact)": dataclasses.replace(ALL, rounding="residual"),
    "all but Q8 momentum": dataclasses.replace(ALL, momentum_q=False),
}


def train(sw: Switches, split: dataset.Split, lr: float, momentum: float, epochs: int, seed: int = 0,
          verbose: bool = False) -> tuple[list[float], list[Stats]]:
    b = 16
    graph, _ = sources.from_zoo("digits_cnn", b)
    model = calibrate.quantize(graph, split.x_train[:b], split.y_train[:b])
    sim = Sim(model, graph, sw, lr, b, momentum, seed)
    qin = model.qparams[model.input]
    x = torch.from_numpy(qin.dequantize(qin.quantize(split.x_train)))
    xt = torch.from_numpy(qin.dequantize(qin.quantize(split.x_test)))
    y = torch.from_numpy(split.y_train)
    accs, stats = [], []
    for epoch in range(epochs):
        for i in range(len(x) // b):
            s = sim.step(x[i * b:(i + 1) * b], y[i * b:(i + 1) * b])
            stats.append(s)
        acc = 100.0 * float(np.mean(sim.predict(xt) == split.y_test))
        accs.append(acc)
        if verbose:
            print(f"  epoch {epoch + 1}: loss {s.loss:.3f} acc {acc:.1f} %", flush=True)
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
    ap.add_argument("--seeds", type=int, default=1, help="rounding seeds per row (stochastic rounding)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    split = dataset.digits()
    rows = {**SINGLE, **LEAVE_OUT}
    print(f"lr {args.lr} momentum {args.momentum}, {args.epochs} epochs; held-out accuracy per epoch")
    for name, sw in rows.items():
        if args.only and name not in args.only:
            continue
        finals, detail = [], ""
        for seed in range(args.seeds):
            accs, stats = train(sw, split, args.lr, args.momentum, args.epochs, seed)
            finals.append(accs[-1])
            detail = " ".join(f"{a:.1f}" for a in accs) + " | " + summary(stats)
        spread = f" (seeds: {' '.join(f'{a:.1f}' for a in finals)})" if len(finals) > 1 else ""
        print(f"{name:45s} {np.mean(finals):5.1f} %{spread}  [{detail}]", flush=True)


if __name__ == "__main__":
    main()
