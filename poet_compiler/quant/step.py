"""The whole int8 training step: forward, loss, backward, update (docs/int8.md, "The step").

:class:`Trainer` holds what persists between steps besides the parameters: the step
counter (the random draws' counter), the seed, the delayed gradient exponents (in the
model) and the per-layer update rules. One :meth:`Trainer.step` is the reference the C
runtime must equal bit for bit: its loss (Q16) and the parameters it leaves.

Delayed gradient exponents: a convolution's input gradient is requantized with the
exponent held from earlier steps, and the largest magnitude it met before saturation,
amax, sets the next step's: E <- E + GRAD_TARGET_BITS - nbits(amax) (unchanged when amax is
0). Exponents change only between steps, so a schedule that recomputes or pages gives the
same bits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from poet_compiler.quant import conv, elementwise, exponents, loss, pool, update
from poet_compiler.quant.exponents import Seen
from poet_compiler.quant.fixedpoint import as_i64, nbits, saturate
from poet_compiler.quant.prng import DEFAULT_SEED
from poet_compiler.quant.qmodel import Add, AvgPool, Conv, MaxPool, QModel, View

GRAD_TARGET_BITS = 7


def forward(model: QModel, x: np.ndarray, seen: dict[str, Seen] | None = None) -> dict[str, np.ndarray]:
    """Every tensor of the forward pass (int8), keyed by name; ``x`` is the int8 batch.
    With ``seen``, the range of every requantized output is merged into it."""
    t: dict[str, np.ndarray] = {model.input: x}
    z = {name: q.zero_point for name, q in model.qparams.items()}
    for node in model.nodes:
        v = None
        if isinstance(node, Conv):
            offset = exponents.k(model, node.input) - exponents.k(model, node.output)
            t[node.output], v = conv.forward(node, t[node.input], z[node.input], z[node.output], offset)
        elif isinstance(node, MaxPool):
            t[node.output] = pool.maxpool_forward(node, t[node.input])
        elif isinstance(node, AvgPool):
            offset = exponents.k(model, node.input) - exponents.k(model, node.output)
            t[node.output], v = pool.avgpool_forward(node, t[node.input], z[node.input], z[node.output], offset)
        elif isinstance(node, Add):
            a, b = node.inputs
            ks = (exponents.k(model, a), exponents.k(model, b), exponents.k(model, node.output))
            t[node.output], v = elementwise.add_forward(node, t[a], t[b], (z[a], z[b], z[node.output]), ks)
        else:
            t[node.output] = t[node.input].reshape(x.shape[0], *node.shape)
        if seen is not None and v is not None:
            seen.setdefault(node.output, Seen(int(v.min()), int(v.max()))).merge(v)
    return t


def logits(model: QModel, x: np.ndarray) -> np.ndarray:
    return forward(model, x)[model.output]


def loss_integers(model: QModel) -> tuple[int, int]:
    """(M_e, n) of the loss's exponential at the logits' present exponent."""
    return model.logit_multiplier, loss.exp_shift(model.logit_shift, exponents.k(model, model.output))


@dataclass
class StepResult:
    loss_q16: int
    weights_updated: int = 0        # weight elements given an update (trained layers)
    weights_changed: int = 0        # of those, the ones whose int8 code changed
    sub_lsb: int = 0                # updates smaller than one LSB (|u| < 2**16)
    saturated_logits: int = 0       # logits at -128 or 127
    grad_amax: dict[str, int] = field(default_factory=dict)  # layer -> max |v| of its input gradient
    grad_exponents: dict[str, int] = field(default_factory=dict)


@dataclass
class Trainer:
    model: QModel
    lr: float
    batch: int
    seed: int = DEFAULT_SEED
    step_count: int = 0
    momentum: float = 0.0
    rounding: update.Rounding = update.Rounding.RESIDUAL
    rules: dict[str, update.UpdateRule] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for node in self.model.convs():
            s_x = self.model.qparams[node.input].scale
            self.rules[node.name] = update.update_rule(node.weight_scale, s_x, self.lr, self.batch)

    def step(self, x: np.ndarray, labels: np.ndarray) -> StepResult:
        seen: dict[str, Seen] = {}
        t = forward(self.model, x, seen)
        z = t[self.model.output]
        m_e, n_e = loss_integers(self.model)
        result = StepResult(loss.loss_q16(z, labels, m_e, n_e))
        result.saturated_logits = int(np.count_nonzero((z == -128) | (z == 127)))
        g, e = loss.loss_grad(z, labels, m_e, n_e)
        grads: dict[str, list[tuple[np.ndarray, int]]] = {self.model.output: [(g, e)]}
        pending: dict[str, int] = {}
        for node in reversed(self.model.nodes):
            if node.output not in grads:
                continue
            g_y, e_y = elementwise.grad_sum(grads[node.output]) if len(grads[node.output]) > 1 \
                else grads[node.output][0]
            for name, contrib in self._backward(node, t, g_y, e_y, result, pending):
                grads.setdefault(name, []).append(contrib)
        for name, amax in pending.items():
            if amax > 0:
                self.model.grad_exponent[name] += GRAD_TARGET_BITS - int(nbits(amax))
        exponents.adapt(self.model, seen)
        result.grad_amax = pending
        result.grad_exponents = dict(self.model.grad_exponent)
        self.step_count += 1
        return result

    def _backward(self, node: Conv | MaxPool | AvgPool | Add | View, t: dict[str, np.ndarray], g_y: np.ndarray,
                  e_y: int, result: StepResult, pending: dict[str, int]) -> list[tuple[str, tuple[np.ndarray, int]]]:
        b = g_y.shape[0]
        if isinstance(node, View):
            return [(node.input, (g_y.reshape(t[node.input].shape), e_y))]
        if isinstance(node, MaxPool):
            return [(node.input, (pool.maxpool_backward(node, g_y, t[node.input]), e_y))]
        if isinstance(node, AvgPool):
            k = pool.avgpool_grad_shift(node, t[node.input].shape)
            return [(node.input, (pool.avgpool_backward(node, g_y, t[node.input].shape), e_y + k))]
        if isinstance(node, Add):
            g = elementwise.add_backward(node, g_y, t[node.output])
            return [(name, (g, e_y)) for name in node.inputs]
        g = conv.masked_grad(node, g_y, t[node.output])
        out: list[tuple[str, tuple[np.ndarray, int]]] = []
        if node.input != self.model.input:
            e_x = self.model.grad_exponent[node.name]
            g_x, amax = conv.input_grad(node, g, self.model.shapes[node.input], e_y, e_x)
            pending[node.name] = amax
            out.append((node.input, (g_x.reshape(b, *self.model.shapes[node.input]), e_x)))
        self._update(node, g, t[node.input], e_y, result)
        return out

    def _update(self, node: Conv, g: np.ndarray, x: np.ndarray, e_y: int, result: StepResult) -> None:
        if not (node.train_weight or node.train_bias):
            return
        gw, gb = conv.weight_grad(node, g, x, self.model.qparams[node.input].zero_point)
        mu = int(np.floor(self.momentum * (1 << 15) + 0.5))
        draws = Draws(self.seed, self.step_count, self.model.convs().index(node))
        update_conv(node, self.rules[node.name], (gw, gb), (exponents.k(self.model, node.input), e_y, mu), result,
                    self.rounding, draws)


@dataclass(frozen=True)
class Draws:
    """Where stochastic rounding's draws come from (a measured alternative, not the
    device's rule): the seed, the step counter and the layer's index among the convs."""

    seed: int = DEFAULT_SEED
    step: int = 0
    index: int = 0


def update_conv(node: Conv, rule: update.UpdateRule, grads: tuple[np.ndarray, np.ndarray],
                exps: tuple[int, int, int], result: StepResult,
                rounding: update.Rounding = update.Rounding.RESIDUAL, draws: Draws = Draws()) -> None:
    """One layer's bias update, then its weight update with the channel rule (docs/int8.md,
    "Update"), from its gradients (GW, Gb) and (k_x, E_y, mu_q15): what the C kernels
    update_bias and update_weight compute, in that order."""
    gw, gb = grads
    k_x, e_y, mu = exps
    k_w = node.weight_exponent.astype(np.int64)
    if node.train_bias:
        u = update.scaled_update(gb, rule.bias_multiplier, rule.bias_shift - k_x - k_w, e_y)
        if mu:
            node.bias_momentum = update.momentum(node.bias_momentum, u, mu, (1 << 31) - 1).astype(np.int32)
            u = as_i64(node.bias_momentum) << (update.FRACTION_BITS - update.MOMENTUM_BITS)
        node.bias = update.apply(node.bias, u, seed=draws.seed, step=draws.step, tensor=2 * draws.index + 1,
                                 limit=update.BIAS_LIMIT, rounding=rounding).astype(np.int32)
    if node.train_weight:
        u = update.scaled_update(gw, rule.weight_multiplier, rule.weight_shift + k_x - k_w, e_y)
        if mu:
            node.weight_momentum = update.momentum(node.weight_momentum, u, mu, (1 << 15) - 1).astype(np.int16)
            u = as_i64(node.weight_momentum) << (update.FRACTION_BITS - update.MOMENTUM_BITS)
        result.sub_lsb += int(np.count_nonzero(np.abs(u) < (1 << update.FRACTION_BITS)))
        _apply_weight(node, u, rounding, draws, result)


def _apply_weight(node: Conv, u: np.ndarray, rounding: update.Rounding, draws: Draws, result: StepResult) -> None:
    if rounding is update.Rounding.RESIDUAL:
        w = update.with_residual(node.weight, node.weight_residual, u)
        new, residual = update.split(exponents.rescale_channels(node, w, update.RESIDUAL_BITS))
        node.weight_residual = residual.astype(np.int8)
    else:
        new = update.apply(node.weight, u, seed=draws.seed, step=draws.step, tensor=2 * draws.index,
                           limit=update.UNCLAMPED, rounding=rounding)
        new = saturate(exponents.rescale_channels(node, new), -update.WEIGHT_LIMIT, update.WEIGHT_LIMIT)
    result.weights_updated += new.size
    result.weights_changed += int(np.count_nonzero(new != node.weight))
    node.weight = new.astype(np.int8)
