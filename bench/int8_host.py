"""int8 training on the host (docs/int8.md, "Accuracy on the host"): digits_cnn trained from
scratch by the reference step with `make device-train`'s data, split, batch, epochs and
optimizer (SGD lr 0.02 momentum 0.9), or the fine-tune set-up of `make device-finetune`
(lr 0.1 momentum 0.5, classifier and biases, digits 5-9 after float pretraining on 0-4);
prints held-out accuracy per epoch, the share of weight updates that change a weight, and
what moved: activation, gradient and weight-channel exponents, saturated gradients and
logits. Another zoo model trains on the digits resized to its input (--model kws_dscnn
--init he).

    PYTHONPATH=. .venv/bin/python bench/int8_host.py [--finetune] [--split N] [--rounding residual]
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import numpy as np
import torch

from poet_compiler.codegen.emit_c import dataset
from poet_compiler.codegen.emit_c.train_demo import pretrain
from poet_compiler.quant import calibrate, exponents, loss, sources, step
from poet_compiler.quant.update import Rounding


def resized(split: dataset.Split, shape: tuple[int, ...]) -> dataset.Split:
    """The digits at a model's input shape (bilinear), for a model made for other inputs
    (kws_dscnn's 1x49x10 MFCC map): real images, the same split."""
    if tuple(split.x_train.shape[1:]) == tuple(shape):
        return split

    def one(x: np.ndarray) -> np.ndarray:
        t = torch.nn.functional.interpolate(torch.from_numpy(x), size=shape[1:], mode="bilinear", align_corners=False)
        return t.numpy().astype(np.float32)

    return dataset.Split(one(split.x_train), split.y_train, one(split.x_test), split.y_test)


def he_init(module: torch.nn.Module) -> None:
    """Kaiming-normal weights (ReLU gain), zero biases, seeded: a net whose batch norm is
    folded at identity statistics trains from scratch only from such an initialisation."""
    torch.manual_seed(0)
    for m in module.modules():
        if isinstance(m, torch.nn.Conv2d | torch.nn.Linear):
            torch.nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            if m.bias is not None:
                torch.nn.init.zeros_(m.bias)


def model_and_data(name: str, split_seed: int, init: str = "default"):
    """(float graph, module, digits split at the model's input shape), batch 16."""
    import models

    spec = models.get(name)
    module = spec.build()
    if init == "he":
        he_init(module)
    example = spec.example_inputs(16)[0]
    graph = sources.from_module(module, example, name)
    return graph, module, resized(dataset.digits(split_seed), tuple(example.shape[1:]))


@dataclass
class EpochDiagnostics:
    """What moved during an epoch of int8 steps (docs/int8.md, "Accuracy on the host")."""

    losses: list[float] = field(default_factory=list)
    updated: int = 0
    changed: int = 0
    sub_lsb: int = 0
    act_up: int = 0                 # activation exponents +1 (a saturated tensor) / -1
    act_down: int = 0
    grad_moves: int = 0             # input-gradient exponents moved
    grad_saturated: int = 0         # (layer, step) pairs whose input gradient saturated (amax > 127)
    weight_grows: int = 0           # channel exponents +1 / -1
    weight_shrinks: int = 0
    saturated_logits: int = 0

    def add(self, r: step.StepResult, before: dict[str, int], model) -> None:
        self.losses.append(loss.loss_float(r.loss_q16))
        self.updated += r.weights_updated
        self.changed += r.weights_changed
        self.sub_lsb += r.sub_lsb
        self.saturated_logits += r.saturated_logits
        self.grad_saturated += sum(a > 127 for a in r.grad_amax.values())
        for name, k in model.act_exponent.items():
            self.act_up += int(k > before.get("k:" + name, 0))
            self.act_down += int(k < before.get("k:" + name, 0))
        self.grad_moves += sum(int(e != before["E:" + n]) for n, e in model.grad_exponent.items())
        for c in model.convs():
            d = c.weight_exponent.astype(int) - before["kW:" + c.name]
            self.weight_grows += int((d > 0).sum())
            self.weight_shrinks += int((d < 0).sum())

    def line(self) -> str:
        n = len(self.losses)
        share = 100.0 * self.changed / self.updated if self.updated else 0.0
        sub = 100.0 * self.sub_lsb / self.updated if self.updated else 0.0
        return (f"loss {np.mean(self.losses):.3f}, weight updates that change a weight {share:.1f} % "
                f"(sub-LSB {sub:.1f} %); exponent moves: activations +{self.act_up}/-{self.act_down}, "
                f"gradients {self.grad_moves} ({self.grad_saturated} saturated), weight channels "
                f"+{self.weight_grows}/-{self.weight_shrinks}; saturated logits {self.saturated_logits / n:.1f}/step")


def trace_line(n: int, r: step.StepResult, model) -> str:
    """One step's state: loss, every activation exponent k (model order), input-gradient
    exponent E (and its amax), each layer's largest weight exponent, saturated logits,
    changed weights."""
    ks = " ".join(str(model.act_exponent.get(n.output, 0)) for n in model.nodes if exponents.adaptive(model, n.output))
    es = " ".join(f"{e}({r.grad_amax.get(name, 0)})" for name, e in model.grad_exponent.items())
    kw = " ".join(str(int(c.weight_exponent.max())) for c in model.convs())
    return (f"step {n}: loss {loss.loss_float(r.loss_q16):.3f} k [{ks}] E(amax) [{es}] kW max [{kw}] "
            f"saturated logits {r.saturated_logits} changed {r.weights_changed}/{r.weights_updated}")


def snapshot(model) -> dict:
    out = {"k:" + n: k for n, k in model.act_exponent.items()}
    out.update({"E:" + n: e for n, e in model.grad_exponent.items()})
    out.update({"kW:" + c.name: c.weight_exponent.astype(int).copy() for c in model.convs()})
    return out


def run(split: dataset.Split, graph, args: argparse.Namespace, train: list[str] | None, names) -> None:
    b = 16
    model = calibrate.quantize(graph, split.x_train[:b], split.y_train[:b])
    calibrate.set_trainable(model, train, names)
    trainer = step.Trainer(model, lr=args.lr, batch=b, momentum=args.momentum, rounding=Rounding(args.rounding),
                           seed=args.seed)
    xq = model.qparams[model.input].quantize(split.x_train)
    xt = model.qparams[model.input].quantize(split.x_test)
    acc0 = 100.0 * float(np.mean(loss.predictions(step.logits(model, xt)) == split.y_test))
    print(f"before: held-out accuracy {acc0:.1f} %")
    for epoch in range(args.epochs):
        diag = EpochDiagnostics()
        for i in range(len(xq) // b):
            before = snapshot(model)
            r = trainer.step(xq[i * b:(i + 1) * b], split.y_train[i * b:(i + 1) * b])
            diag.add(r, before, model)
            if args.trace:
                print(trace_line(trainer.step_count, r, model), flush=True)
        acc = 100.0 * float(np.mean(loss.predictions(step.logits(model, xt)) == split.y_test))
        print(f"epoch {epoch + 1}: held-out accuracy {acc:.1f} %; {diag.line()}", flush=True)


def run_float(split: dataset.Split, module: torch.nn.Module, args: argparse.Namespace) -> None:
    """The same loop in PyTorch float32 (torch.optim.SGD on the mean loss), batch norm
    removed as folding at identity statistics removes it from the int8 model."""
    for child in list(module.modules()):
        for attr, sub in list(child.named_children()):
            if isinstance(sub, torch.nn.BatchNorm2d):
                setattr(child, attr, torch.nn.Identity())
    opt = torch.optim.SGD(module.parameters(), lr=args.lr, momentum=args.momentum)
    x, y = torch.from_numpy(split.x_train), torch.from_numpy(split.y_train)
    b = 16
    for epoch in range(args.epochs):
        for i in range(len(x) // b):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(module(x[i * b:(i + 1) * b]), y[i * b:(i + 1) * b]).backward()
            opt.step()
        with torch.no_grad():
            pred = module(torch.from_numpy(split.x_test)).argmax(1).numpy()
        print(f"epoch {epoch + 1}: held-out accuracy {100.0 * float(np.mean(pred == split.y_test)):.1f} % "
              f"(float32)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lr", type=float, default=None, help="default: make device-train's 0.02 (fine-tune: 0.1)")
    ap.add_argument("--momentum", type=float, default=None, help="default: 0.9 (fine-tune: 0.5)")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--rounding", default="residual", choices=[r.value for r in Rounding])
    ap.add_argument("--finetune", action="store_true", help="pretrain on 0-4 in float, fine-tune on 5-9 in int8")
    ap.add_argument("--model", default="digits_cnn", help="a zoo model; inputs resized to its shape")
    ap.add_argument("--init", default="default", choices=["default", "he"], help="initial weights (he: Kaiming normal)")
    ap.add_argument("--split", type=int, default=0, help="train/test split seed (0: make device-train's)")
    ap.add_argument("--seed", type=int, default=step.DEFAULT_SEED, help="the update's draw seed")
    ap.add_argument("--float", action="store_true", help="the same loop in PyTorch float32 instead")
    ap.add_argument("--trace", action="store_true", help="one line of state per step")
    args = ap.parse_args()
    lr, mu = (0.1, 0.5) if args.finetune else (0.02, 0.9)  # the float loops' rules (Makefile)
    args.lr = lr if args.lr is None else args.lr
    args.momentum = mu if args.momentum is None else args.momentum
    torch.set_num_threads(1)
    graph, module, full = model_and_data(args.model, args.split, args.init)
    if args.float and not args.finetune:
        run_float(full, module, args)
        return
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
