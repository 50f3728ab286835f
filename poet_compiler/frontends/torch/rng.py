"""Random ops in the traced step: which ops draw, the stash of the generator's state that
lets a recomputation draw the same numbers, and drawing in eager PyTorch's order.

A recomputed random op (dropout's ``bernoulli``) must give the numbers its first
computation gave, else the backward uses a mask the forward never used. The traced step
therefore carries, right before every op that draws, a ``poet.rng_state`` op that copies
the default generator's state (5,056 bytes on the CPU): the lowering makes it a pinned
node (never recomputed, never paged) that the random op's node reads, so the optimizer
counts its bytes for as long as a recomputation may need it, and a schedule that
recomputes the op without it fails the simulator. Executors run a recomputation of the
op under :func:`replayed` (the stashed state in, the current one back after); the first
computation draws from the generator as eager PyTorch does. BENCHMARKS.md, "Random ops
replayed", has the measurement that chose a stashed state over a kept mask.

Functionalization turns eager dropout's ``empty_like(x).bernoulli_(p)`` into
``bernoulli.p(empty_like(x), p)``, whose result is contiguous where ``bernoulli_`` filled
``empty_like``'s layout; the CPU kernel draws in memory order, so for a non-contiguous
input (``nn.MultiheadAttention``'s output with ``batch_first``) the masks differed.
:func:`bernoulli_in_memory_order` traces the draw into that layout instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.fx
from torch import Tensor

from poet_compiler.errors import FrontendError

aten = torch.ops.aten

#: Custom meta of a random FX op (``node.meta["custom"]``): the FX name of its stash.
RNG_STATE = "poet_rng_state"


def _state_bytes(device: torch.device) -> int:
    if device.type == "cpu":
        return int(torch.get_rng_state().numel())
    if device.type == "cuda":
        return int(torch.cuda.get_rng_state(device).numel())
    raise FrontendError(f"a random op on {device}: poetc replays random ops on the CPU and CUDA only")


@torch.library.custom_op("poet::rng_state", mutates_args=())
def rng_state(device: torch.device) -> Tensor:
    """A copy of ``device``'s default generator state (a CPU byte tensor)."""
    if device.type == "cuda":
        return torch.cuda.get_rng_state(device)
    return torch.get_rng_state()


@rng_state.register_fake
def _rng_state_fake(device: torch.device) -> Tensor:
    return torch.empty(_state_bytes(device), dtype=torch.uint8)


@contextlib.contextmanager
def replayed(state: Tensor, device: torch.device) -> Iterator[None]:
    """Run the body with ``device``'s generator set to ``state``; the generator's own state
    is put back after, so a replay leaves the step's random stream as it found it."""
    if device.type == "cuda":
        current = torch.cuda.get_rng_state(device)
        torch.cuda.set_rng_state(state, device)
        try:
            yield
        finally:
            torch.cuda.set_rng_state(current, device)
        return
    current = torch.get_rng_state()
    torch.set_rng_state(state)
    try:
        yield
    finally:
        torch.set_rng_state(current)


def _named_args(n: torch.fx.Node) -> dict[str, Any]:
    """``n``'s arguments by name, defaults included."""
    schema = n.target._schema  # type: ignore[union-attr]
    named = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}
    named.update({a.name: v for a, v in zip(schema.arguments, n.args)})
    named.update(n.kwargs)
    return named


def draws(n: torch.fx.Node) -> bool:
    """Whether FX op ``n`` draws from a generator: a seeded-nondeterministic ATen op, less
    those that provably draw nothing (attention with ``dropout_p=0``, dropout off)."""
    target = n.target
    if n.op != "call_function" or not isinstance(target, torch._ops.OpOverload) \
            or torch.Tag.nondeterministic_seeded not in target.tags:
        return False
    named = _named_args(n)
    return named.get("dropout_p", 1.0) != 0 and named.get("train", True) is not False


def is_stash(n: torch.fx.Node) -> bool:
    """Whether FX op ``n`` is a ``poet.rng_state`` stash."""
    return n.op == "call_function" and n.target is torch.ops.poet.rng_state.default


def stash_of(n: torch.fx.Node) -> str | None:
    """The FX name of random op ``n``'s stash (None: ``n`` draws nothing)."""
    return (n.meta.get("custom") or {}).get(RNG_STATE)


def _device(n: torch.fx.Node) -> torch.device:
    val = n.meta.get("val")
    values = val if isinstance(val, (list, tuple)) else (val,)
    t = next((v for v in values if isinstance(v, Tensor)), None)
    return t.device if t is not None else torch.device("cpu")


def device_of(n: torch.fx.Node) -> torch.device:
    """The device whose generator random op ``n`` draws from (a stash: its argument)."""
    if is_stash(n):
        dev = n.args[0]
        return dev if isinstance(dev, torch.device) else torch.device(str(dev))
    return _device(n)


def insert_stashes(gm: torch.fx.GraphModule, meta_keys: tuple[str, ...]) -> int:
    """Put a ``poet.rng_state`` op right before every op of ``gm`` that draws and tag the
    op with its name (:data:`RNG_STATE`); return how many. Nothing draws between the two,
    so the stash is the state the op's first computation draws from. The stash takes the
    op's custom meta ``meta_keys`` (its phase and module; it creates no autograd node)."""
    g = gm.graph
    count = 0
    for n in list(g.nodes):
        if not draws(n):
            continue
        device = _device(n)
        with g.inserting_before(n):
            stash = g.call_function(torch.ops.poet.rng_state.default, (device,))
        custom = dict(n.meta.get("custom") or {})
        stash.meta["custom"] = {k: custom[k] for k in meta_keys if k in custom}
        stash.meta["nn_module_stack"] = n.meta.get("nn_module_stack", {})
        stash.meta["val"] = _fake_like(n, _state_bytes(device))
        n.meta["custom"] = {**custom, RNG_STATE: stash.name}
        count += 1
    if count:
        g.lint()
        gm.recompile()
    return count


def _fake_like(n: torch.fx.Node, nbytes: int) -> Tensor:
    """A fake CPU byte tensor of ``nbytes`` in the fake mode of ``n``'s value."""
    val = n.meta.get("val")
    mode = getattr(val, "fake_mode", None)
    if mode is None and isinstance(val, (list, tuple)):
        mode = next((v.fake_mode for v in val if hasattr(v, "fake_mode")), None)
    if mode is None:
        return torch.empty(nbytes, dtype=torch.uint8, device="meta")
    with mode:
        return torch.empty(nbytes, dtype=torch.uint8)


def bernoulli_in_memory_order(self: Tensor, p: float = 0.5, *, generator: Any = None) -> Any:
    """``bernoulli.p`` drawn into ``self``'s memory order, as eager ``bernoulli_`` draws:
    the input permuted to that order (contiguous), the draw, the result permuted back.
    ``NotImplemented`` (trace the op as it is) where ``self`` is contiguous or has no
    dense permutation."""
    if self.dim() < 2 or self.is_contiguous():
        return NotImplemented
    strides = self.stride()
    order = sorted(range(self.dim()), key=lambda d: (-strides[d], d))
    in_memory_order = self.permute(order)
    if not in_memory_order.is_contiguous():
        return NotImplemented
    inverse = sorted(range(self.dim()), key=order.__getitem__)
    return aten.bernoulli.p(in_memory_order, p, generator=generator).permute(inverse)


__all__ = ["RNG_STATE", "bernoulli_in_memory_order", "device_of", "draws", "insert_stashes", "is_stash",
           "replayed", "rng_state", "stash_of"]
