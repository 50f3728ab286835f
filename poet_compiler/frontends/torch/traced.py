"""TracedModel: a TrainingGraph plus everything an executor needs to run it op by op.

How to execute a schedule against a TracedModel ``tm``:

* ``tm.gm`` is the functional joint FX GraphModule of the training step. Its
  placeholders, in order, are ``tm.param_names`` (trainable parameters), then
  ``tm.buffer_names`` (buffers and frozen parameters), then ``tm.n_inputs`` model
  inputs, then the target: see :meth:`TracedModel.flat_args`. Its outputs are
  ``(loss, *grads in tm.grad_names order, *new buffer values in tm.update_names order)``.
* Keep an environment ``env: dict[fx node name -> value]``. Put the placeholders in it,
  then run every FX node of ``tm.prelude_fx`` once (views of parameters such as
  ``t(weight)``, scalar updates such as ``num_batches_tracked + 1``): they own no
  activation memory and only read placeholders.
* ``COMPUTE i``: run, in order, the FX nodes ``tm.node_fx[i]`` (first the op itself,
  then the ``getitem``s and views of its outputs that fold into it); node ``i``'s
  buffer is the value of its first FX node. For a *select* node (op ``getitem``) the
  list holds the ``getitem``s that pick the saved outputs out of its input node's
  result. Every FX input of those nodes is either in the prelude/placeholders or owned
  (``tm.fx_owner``) by a node listed in ``graph.nodes[i].inputs``.
* ``FREE i`` drops the values of ``tm.node_fx[i]`` from the environment; after a page-in
  the folded views must be re-run on the restored buffer.
* Graph outputs (loss, gradients, buffer updates) are FX nodes owned by some node: take
  them when that node is computed (``tm.output_owner``).
* With an optimizer (``tm.optimizer``, docs/training.md) there are no gradient outputs:
  ``tm.update_names`` names the new parameters and optimizer state, then the buffers.
  The state's current values live in ``tm.opt_state`` (placeholders ``tm.state_names``,
  the tail of ``tm.buffer_names``); :meth:`TracedModel.apply_updates` writes a step's
  new values back into the module and ``tm.opt_state``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from torch import nn

from poet_compiler.errors import FrontendError
from poet_compiler.frontends.torch.optimizer import OptimizerSpec
from poet_compiler.graph.ir import TrainingGraph


@dataclass
class TracedModel:
    graph: TrainingGraph
    gm: torch.fx.GraphModule
    module: nn.Module
    example_inputs: tuple[torch.Tensor, ...]
    target: torch.Tensor
    loss_fn: Callable[[Any, torch.Tensor], torch.Tensor]
    param_names: tuple[str, ...]
    buffer_names: tuple[str, ...]
    n_inputs: int
    grad_names: tuple[str, ...]
    update_names: tuple[str, ...]
    node_fx: tuple[tuple[str, ...], ...]
    prelude_fx: tuple[str, ...]
    fx_owner: dict[str, int]
    granularity: str = "op"
    state_names: tuple[str, ...] = ()
    optimizer: OptimizerSpec | None = None
    opt_state: dict[str, torch.Tensor] = field(default_factory=dict)
    # What the module returns (JointTrace.out_spec/out_leaves/out_is_fx): its output's
    # pytree spec and per leaf the FX name of a tensor (None: the loss does not read it)
    # or a non-tensor value. ``Compilation.checkpointed()`` rebuilds the output from them.
    out_spec: Any = None
    out_leaves: tuple[Any, ...] = ()
    out_is_fx: tuple[bool, ...] = ()

    def __post_init__(self) -> None:
        if self.optimizer is not None and not self.opt_state:
            self.reset_state()

    def reset_state(self) -> None:
        """Optimizer state as before the first step (zeros; ``step`` 0)."""
        params = dict(self.module.named_parameters())
        self.opt_state = {}
        if self.optimizer is None:
            return
        for name in self.state_names:
            pname, _, s = name.rpartition("@")
            self.opt_state[name] = self.optimizer.initial_state(params[pname].detach())[s]

    @property
    def placeholder_names(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.gm.graph.nodes if n.op == "placeholder")

    @property
    def output_names(self) -> tuple[str, ...]:
        """FX node names of the outputs: loss, then gradients, then buffer updates."""
        out = next(n for n in self.gm.graph.nodes if n.op == "output")
        return tuple(a.name for a in out.args[0])

    @property
    def output_owner(self) -> dict[str, int]:
        """Scheduling node computing each graph output (-1: the prelude)."""
        return {name: self.fx_owner.get(name, -1) for name in self.output_names}

    def require_weights(self, purpose: str) -> None:
        """Refuse to run a model built on the meta device (shapes without values, as the
        zoo's ``gpt2_large``): ``purpose`` needs real weights."""
        tensors = (*self.module.parameters(), *self.module.buffers(), *self.example_inputs, self.target)
        if any(t.is_meta for t in tensors):
            small = getattr(self.module, "poet_weights_from", None)
            hint = f": use {small}, the same graph with weights" if small else ""
            raise FrontendError(f"{self.graph.name} is traced on the meta device (its graph, no weights); "
                                f"{purpose} needs real weights{hint}")

    def flat_args(self, inputs: tuple[torch.Tensor, ...] | None = None,
                  target: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Placeholder values in order, from the module's current state (copies of buffers,
        so running the graph never touches the module)."""
        params = dict(self.module.named_parameters())
        buffers = {**dict(self.module.named_buffers()), **params, **self.opt_state}
        args = [params[n].detach() for n in self.param_names]
        args += [buffers[n].detach().clone() for n in self.buffer_names]
        args += [t.detach() for t in (self.example_inputs if inputs is None else inputs)]
        args.append((self.target if target is None else target).detach())
        return args

    def run_reference(self, inputs: tuple[torch.Tensor, ...] | None = None,
                      target: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Run the whole joint graph; return ``(loss, {param name: grad})``."""
        with torch.no_grad():
            outs = self.gm(*self.flat_args(inputs, target))
        g = len(self.grad_names)
        return outs[0], dict(zip(self.grad_names, outs[1:1 + g]))

    def apply_updates(self, values: dict[str, torch.Tensor]) -> None:
        """Write new values (``{update name: tensor}``) into the module's parameters and
        buffers and into ``opt_state``."""
        params = dict(self.module.named_parameters())
        targets = {**dict(self.module.named_buffers()), **params}
        with torch.no_grad():
            for name, value in values.items():
                if name in self.opt_state:
                    self.opt_state[name] = value.detach().clone()
                else:
                    targets[name].copy_(value)

    def buffer_updates(self) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            outs = self.gm(*self.flat_args())
        return dict(zip(self.update_names, outs[1 + len(self.grad_names):]))
