"""int8 training on the host (docs/int8.md, "Accuracy on the host"): digits_cnn trained from
scratch by the reference step with `make device-train`'s data, split, batch and epochs,
and the fine-tune set-up of `make device-finetune`; prints held-out accuracy per epoch and
the share of weight updates that change a weight.

    PYTHONPATH=. .venv/bin/python bench/int8_host.py [--lr 0.05] [--momentum 0] [--finetune]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from poet_compiler.codegen.emit_c import dataset
from poet_compiler.codegen.emit_c.train_demo import pretrain
from poet_compiler.quant import calibrate, loss, sources, step
from poet_compiler.quant.update import Rounding


def run(split: dataset.Split, graph, args: argparse.Namespace, train: list[str] | None, names) -> None:
    b = 16
    model = calibrate.quantize(graph, split.x_train[:b], split.y_train[:b])
    calibrate.set_trainable(model, train, names)
    trainer = step.Trainer(model, lr=args.lr, batch=b, momentum=args.momentum, rounding=Rounding(args.rounding))
    xq = model.qparams[model.input].quantize(split.x_train)
    xt = model.qparams[model.input].quantize(split.x_test)
    acc0 = 100.0 * float(np.mean(loss.predictions(step.logits(model, xt)) == split.y_test))
    print(f"before: held-out accuracy {acc0:.1f} %")
    for epoch in range(args.epochs):
        changed = updated = 0
        for i in range(len(xq) // b):
            r = trainer.step(xq[i * b:(i + 1) * b], split.y_train[i * b:(i + 1) * b])
            changed, updated = changed + r.weights_changed, updated + r.weights_updated
        acc = 100.0 * float(np.mean(loss.predictions(step.logits(model, xt)) == split.y_test))
        share = 100.0 * changed / updated if updated else 0.0
        print(f"epoch {epoch + 1}: loss {loss.loss_float(r.loss_q16):.3f}, held-out accuracy {acc:.1f} %, "
              f"weight updates that change a weight {share:.1f} %", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--rounding", default="stochastic", choices=[r.value for r in Rounding])
    ap.add_argument("--finetune", action="store_true", help="pretrain on 0-4 in float, fine-tune on 5-9 in int8")
    args = ap.parse_args()
    torch.set_num_threads(1)
    full = dataset.digits()
    graph, module = sources.from_zoo("digits_cnn", 16)
    if not args.finetune:
        run(full, graph, args, None, {})
        return
    pretrain(module, full.only(range(5)), 10, 0.02, 16)
    graph = sources.from_module(module, torch.from_numpy(full.x_train[:16]), "digits_cnn")
    names = {n.name: n.param_names for n in graph.nodes if hasattr(n, "param_names")}
    args.epochs = 4
    run(full.only(range(5, 10)), graph, args, ["classifier.*", "*.bias"], names)


if __name__ == "__main__":
    main()
