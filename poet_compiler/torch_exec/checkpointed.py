"""``Compilation.checkpointed()``: the schedule run by PyTorch's own machinery.

:class:`CheckpointedModule` is an ``nn.Module`` around the compiled module (its
parameters and buffers are that module's). Its forward runs the traced forward ops, as
straight-line Python generated once (:func:`~.checkpointed_forward.forward_source`), with the plan of
:mod:`poet_compiler.torch_exec.torch_plan`:

* each region is one ``torch.utils.checkpoint.checkpoint(fn, ..., use_reentrant=False,
  context_fn=...)`` whose ``context_fn`` is ``create_selective_checkpoint_contexts`` with a
  policy giving every ATen call of the region ``MUST_RECOMPUTE`` or ``MUST_SAVE`` (a region
  that saves no call is plain non-reentrant checkpointing, which recomputes the same ops
  without the policy's per-call dispatch);
* a paged node's saved tensors go through ``torch.autograd.graph.saved_tensors_hooks`` to
  a real page file (:class:`~poet_compiler.torch_exec.pager.SavedTensorPager`);
* everything else is plain autograd: the backward is ``loss.backward()``, gradients
  accumulate into ``.grad``, BatchNorm's running statistics are updated in place.

Under ``torch.compile`` (``torch.compiler.is_compiling()``) the forward is one region
holding every op, tagged with the schedule's own decisions (``MUST_RECOMPUTE`` where it
recomputes, ``MUST_SAVE`` elsewhere): the partitioner recomputes each value where the
backward graph needs it, so the regions' once-at-the-trigger rule does not bind there.
Paging has no compiled equivalent on the CPU: the pages are kept in RAM (docs/pytorch.md).
"""

from __future__ import annotations

import functools
import linecache
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.fx
from torch import nn

from poet_compiler.frontends.torch.tracing import MODULE
from poet_compiler.torch_exec.analysis import Analysis
from poet_compiler.torch_exec.batch import BatchSignature
from poet_compiler.torch_exec.checkpointed_forward import forward_source
from poet_compiler.torch_exec.pager import PageFile, SavedTensorPager
from poet_compiler.torch_exec.torch_plan import TorchPlan

if TYPE_CHECKING:
    from poet_compiler.frontends.torch.traced import TracedModel

class CheckpointedModule(nn.Module):
    """The compiled module trained by PyTorch's checkpointing under a poetc plan.

    ``m(*inputs)`` returns what the module returns; ``loss_fn(m(x), y).backward()`` then
    computes the gradients autograd computes (bitwise, in eager mode) with the plan's
    recomputations and paging. ``m.module`` is the compiled module itself: its parameters
    (``m.parameters()``) and buffers are shared. ``m.plan`` holds the plan and the
    simulator's figures of what PyTorch does with it (``m.plan.peak_bytes``).
    """

    def __init__(self, traced: TracedModel, plan: TorchPlan, analysis: Analysis, *,
                 page_file: str | Path | None = None, page_dir: str | Path | None = None) -> None:
        super().__init__()
        self.module = traced.module
        self.plan = plan
        self._traced = traced
        self._inputs = tuple(traced.example_inputs)
        self._signature = BatchSignature.of(traced.module)
        self._param_names = tuple(traced.param_names)
        self._buffer_names = tuple(traced.buffer_names)
        self._consts = [v for v in _constants(traced)]
        self._spec = traced.out_spec
        self._out_is_fx = traced.out_is_fx
        self._out_const = tuple(None if f else x for x, f in zip(traced.out_leaves, traced.out_is_fx))
        self._missing = [k for k, (x, f) in enumerate(zip(traced.out_leaves, traced.out_is_fx)) if f and x is None]
        pages = bool(plan.paged)
        self._pager: SavedTensorPager | None = None
        if pages:
            self._pages = PageFile(page_file, directory=page_dir)
            self._pager = SavedTensorPager(self._pages, dma=plan.dma)
            self._finalizer = weakref.finalize(self, _close, self._pager, self._pages)
        name = traced.graph.name
        self._eager, self._eager_src = self._build(analysis, compiled=False, filename=f"<poetc checkpointed {name}>")
        self._compiled, self._compiled_src = self._build(analysis, compiled=True,
                                                         filename=f"<poetc checkpointed {name} compiled>")

    def _build(self, an: Analysis, *, compiled: bool, filename: str) -> tuple[Any, str]:
        source, ns, where = forward_source(an, self.plan, compiled=compiled, filename=filename,
                                           pager=self._pager is not None)
        ns["_annotate"] = functools.partial(_annotate, filename=filename, where=where, an=an)
        if self._pager is not None and not compiled:
            ns["_pg"] = self._pager
            ns["_prefetch_at"] = self._pager_prefetch_at
        # Keep the text for tracebacks and for torch.compile (dynamo reads the source).
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), ns)  # noqa: S102 - our own generated code
        return ns["forward"], source

    def _pager_prefetch_at(self, value: Any, nodes: tuple[int, ...]) -> None:
        t = value[0] if isinstance(value, (tuple, list)) else value
        fn = getattr(t, "grad_fn", None)
        pager = self._pager
        if fn is None or pager is None or not pager.active:
            return
        fn.register_prehook(lambda grad_outputs: pager.prefetch(nodes))

    @property
    def source(self) -> str:
        """The generated forward (eager variant), for reading."""
        return self._eager_src

    def check_batch(self, inputs: tuple[Any, ...]) -> None:
        """Raise BatchError unless ``inputs`` and the module's mode are what the plan was made for."""
        from poet_compiler.errors import BatchError

        want = self._inputs
        if len(inputs) != len(want):
            raise BatchError(f"the module takes {len(want)} input tensor(s), got {len(inputs)}")
        self._signature.check_tensors([(f"input {k}", got, ref) for k, (got, ref) in enumerate(zip(inputs, want))],
                                      "the plan")
        self._signature.check_module(
            self.module, mode="the plan is for the mode it was traced in (use the module itself for evaluation)",
            gradients="the plan saves what the gradients of the traced parameters need")
        if self._missing:
            raise BatchError(f"output leaf {self._missing[0]} of the module is not used by the loss, so the "
                             "compiled graph does not compute it; return only what the loss reads")

    def forward(self, *inputs: Any) -> Any:
        module = self.module
        params = dict(module.named_parameters())
        buffers = {**dict(module.named_buffers()), **params}
        args = [params[n] for n in self._param_names] + [buffers[n] for n in self._buffer_names]
        args += list(inputs)
        args += self._consts
        _check(self, inputs)
        if torch.compiler.is_compiling():
            leaves = self._compiled(*args)
        else:
            pager = self._pager
            if pager is None:
                leaves = self._eager(*args)
            else:
                pager.reset()
                pager.active = torch.is_grad_enabled()
                try:
                    with torch.autograd.graph.saved_tensors_hooks(pager.pack, pager.unpack):
                        leaves = self._eager(*args)
                finally:
                    pager.active = False
        flat = [v if f else c for v, f, c in zip(leaves, self._out_is_fx, self._out_const)]
        return torch.utils._pytree.tree_unflatten(flat, self._spec)

    @property
    def page_file(self) -> Path | None:
        """The page file (None when the plan pages nothing)."""
        return self._pages.path if self._pager is not None else None

    def close(self) -> None:
        """Stop the pager's thread; close (and, if temporary, delete) the page file."""
        if self._pager is not None:
            self._finalizer()


@torch.compiler.disable
def _check(m: CheckpointedModule, inputs: tuple[Any, ...]) -> None:
    """``m.check_batch`` outside any compiled graph (under ``torch.compile`` a graph break
    before the forward), so a bad batch is refused there too rather than recompiled for."""
    m.check_batch(inputs)


def _close(pager: SavedTensorPager, pages: PageFile) -> None:
    pager.close()
    pages.close()


def _constants(tm: TracedModel) -> list[Any]:
    from poet_compiler.torch_exec.plan import constants

    return list(constants(tm).values())


def _annotate(exc: BaseException, *, filename: str, where: dict[int, str], an: Analysis) -> None:
    """Name the module and op of the generated line that raised ``exc`` (a note on it)."""
    if getattr(exc, "_poetc_noted", False) or type(exc).__name__ == "_StopRecomputationError":
        return
    tb = exc.__traceback__
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    name = where.get(line) if line is not None else None
    if name is None:
        return
    n = an.fx[name]
    module = (n.meta.get("custom") or {}).get(MODULE) or "(top level)"
    target = getattr(n.target, "__name__", str(n.target))
    try:
        exc.add_note(f"poetc checkpointed(): raised by op {target} ({name}) of module {module!r}")
        exc._poetc_noted = True  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a note is a courtesy
        pass


__all__ = ["CheckpointedModule"]
