"""The forward ``checkpointed()`` runs, as Python source (:func:`forward_source`).

One line per traced forward op, ops bound as globals; each region of the plan is a
function run by ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``, with a
selective-checkpoint policy (``MUST_SAVE`` / ``MUST_RECOMPUTE`` per ATen call) when it
saves a call; a paged node's op is bracketed by the pager (``_pg.begin()`` /
``_pg.end(...)``). :mod:`.checkpointed` compiles the text and runs it.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from typing import Any

import torch
import torch.fx
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from poet_compiler.frontends.torch.opinfo import is_view
from poet_compiler.torch_exec.analysis import Analysis, getitem_of
from poet_compiler.torch_exec.fx_source import Raw, call, literal
from poet_compiler.torch_exec.torch_plan import Region, TorchPlan

aten = torch.ops.aten
_BN_FUNCTIONAL = aten._native_batch_norm_legit_functional.default


class _Policy:
    """The policy of one region call: the k-th call of ``func`` gets ``table[func][k]``."""

    __slots__ = ("count", "table")

    def __init__(self, table: dict[Any, tuple[CheckpointPolicy, ...]]) -> None:
        self.table = table
        self.count: dict[Any, int] = defaultdict(int)

    def __call__(self, ctx: Any, func: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        k = self.count[func]
        self.count[func] = k + 1
        policies = self.table.get(func)
        if policies is None or k >= len(policies):
            return CheckpointPolicy.PREFER_RECOMPUTE     # not an op of the trace (nothing to keep)
        return policies[k]


def _is_call(n: torch.fx.Node) -> bool:
    """Whether ``n`` is an ATen call (what a selective policy sees), not a getitem."""
    return n.target is not operator.getitem and isinstance(n.target, torch._ops.OpOverload)


def saves_a_call(an: Analysis, region: Region) -> bool:
    """Whether ``region`` caches some ATen call (``MUST_SAVE``): it needs a selective
    policy; a region that saves none runs as plain checkpointing."""
    return any(_is_call(an.fx[name]) and name not in region.recompute for name in region.ops)


def _context_fn(table: dict[Any, tuple[CheckpointPolicy, ...]]) -> Any:
    def context_fn() -> Any:
        return create_selective_checkpoint_contexts(_Policy(table))
    return context_fn


class _Source:
    """Builds the text of the forward: one line per FX op, ops bound as globals."""

    def __init__(self, an: Analysis, filename: str) -> None:
        self.an = an
        self.filename = filename
        self.ns: dict[str, Any] = {"torch": torch, "_ckpt": checkpoint, "inf": float("inf"), "nan": float("nan")}
        self.ops: dict[Any, str] = {}
        self.lines: list[str] = []
        self.where: dict[int, str] = {}    # line number -> FX op name

    def bind(self, value: Any, prefix: str = "_op") -> str:
        key = value if isinstance(value, torch._ops.OpOverload) else id(value)
        if key not in self.ops:
            name = f"{prefix}{len(self.ops)}"
            self.ops[key] = name
            self.ns[name] = value
        return self.ops[key]

    def emit(self, text: str, fx_name: str | None = None) -> None:
        self.lines.append(text)
        if fx_name is not None:
            self.where[len(self.lines)] = fx_name

    def call(self, n: torch.fx.Node, args: tuple | None = None) -> str:
        return call(n, lambda node: self.bind(node.target), args)


def _bn_stats(n: torch.fx.Node) -> tuple[str, str] | None:
    """The running-statistics placeholders of a functional BatchNorm op (None otherwise)."""
    if n.target is not _BN_FUNCTIONAL:
        return None
    mean, var = n.args[3], n.args[4]
    if isinstance(mean, torch.fx.Node) and isinstance(var, torch.fx.Node):
        return mean.name, var.name
    return None


def _reads(n: torch.fx.Node) -> list[str]:
    """The FX values an op reads (a region's BatchNorm reads clones of its statistics)."""
    stats = _bn_stats(n)
    return [a.name for a in n.all_input_nodes if stats is None or a.name not in stats]


def forward_source(an: Analysis, plan: TorchPlan, *, compiled: bool, filename: str,
                   pager: bool) -> tuple[str, dict[str, Any], dict[int, str]]:
    """The forward's source, its globals and its line -> FX op map: the region functions,
    then ``forward`` calling them (:class:`_Layout` says what each reads and keeps).

    ``compiled``: the variant ``torch.compile`` traces (one region, every op tagged, no
    hooks). ``pager``: the plan pages; the paged nodes' ops are wrapped for the hooks.
    """
    layout = _Layout(an, plan, compiled)
    src = _Source(an, filename)
    plain = [_region_function(src, layout, r) for r in range(len(layout.regions))]
    _forward_function(src, layout, plain, pager=pager)
    return "\n".join(src.lines) + "\n", src.ns, src.where


class _Layout:
    """What the generated forward runs and holds: its regions (the plan's, or for
    ``compiled`` one region of every op tagged by the schedule), its items (single ops and
    region calls, in forward order) with what each reads and what later items still read,
    each region's inputs, outputs and BatchNorm statistics clones."""

    def __init__(self, an: Analysis, plan: TorchPlan, compiled: bool) -> None:
        self.an, self.plan, self.compiled = an, plan, compiled
        tm, fx = an.tm, an.fx
        placeholders = [n.name for n in tm.gm.graph.nodes if n.op == "placeholder"]
        self.params = placeholders[:len(tm.param_names) + len(tm.buffer_names) + tm.n_inputs]
        self.consts = [n.name for n in tm.gm.graph.nodes if n.op == "get_attr"]
        self.regions, self.paged = self._regions()
        in_region = {name for r in self.regions for name in r.ops}
        placeholder_of = dict(zip([*tm.param_names, *tm.buffer_names], placeholders))
        # BatchNorm outside regions runs in place on the module's buffers, as eager does (its
        # new-statistics outputs then need no copy); inside a region it runs on clones (its
        # recomputation must not update them twice) and the statistics are copied after.
        self.inplace_bn = {name for name in an.fwd_ops if name not in in_region and _bn_stats(fx[name]) is not None}
        self.skipped = {name for name in an.fwd_ops
                        if (gi := getitem_of(fx[name])) is not None and gi[0] in self.inplace_bn and gi[1] >= 3}
        self.copies = [(placeholder_of[target], value) for value, target in zip(an.update_fx, tm.update_names)
                       if value not in self.skipped]
        self.out_names = [x for x, is_fx in zip(tm.out_leaves, tm.out_is_fx) if is_fx and x is not None]
        self.items = self._items()
        self.item_reads = [self._reads_of(kind, v) for kind, v in self.items]
        self.reads_after = self._reads_after()
        self.keep_always = set(self.params) | set(self.consts) | set(an.prelude_fwd)
        item_of_region = {v: idx for idx, (kind, v) in enumerate(self.items) if kind == "region"}
        self.region_inputs: list[list[str]] = []
        self.region_clones: list[list[str]] = []
        self.region_outputs: list[list[str]] = []
        for r, region in enumerate(self.regions):
            inside = set(region.ops)
            ins: list[str] = []
            clones: list[str] = []
            for name in region.ops:
                stats = _bn_stats(fx[name])
                if stats is not None:
                    clones += [f"{s_}_c" for s_ in stats if f"{s_}_c" not in clones]
                ins += [a for a in _reads(fx[name]) if a not in inside and a not in ins]
            self.region_inputs.append(ins)
            self.region_clones.append(clones)
            self.region_outputs.append([name for name in region.ops if name in self.reads_after[item_of_region[r]]])

    def _regions(self) -> tuple[tuple[Region, ...], frozenset[int]]:
        an, plan = self.an, self.plan
        if not self.compiled:
            return plan.regions, plan.paged
        ops = tuple(an.fwd_ops)
        # The schedule's own decisions: the partitioner recomputes each value where backward
        # needs it, so the compiled step is not bound to the eager plan's regions.
        recompute = plan.schedule_recompute
        regions: tuple[Region, ...] = (
            Region(ops=ops, recompute=recompute | {o for o in ops if is_view(an.fx[o])},
                   rng=any(an.is_random(o) for o in ops)),) if ops else ()
        return regions, frozenset()

    def _items(self) -> list[tuple[str, Any]]:
        """The outer function's items: single ops and region calls."""
        an = self.an
        region_at = {r.ops[0]: k for k, r in enumerate(self.regions)}
        items: list[tuple[str, Any]] = []
        k = 0
        while k < len(an.fwd_ops):
            name = an.fwd_ops[k]
            if name in region_at:
                r = region_at[name]
                items.append(("region", r))
                k += len(self.regions[r].ops)
            else:
                # A skipped op is not run: as an item it would read the op's tuple and keep all
                # of its outputs to the forward's end.
                if name not in self.skipped:
                    items.append(("op", name))
                k += 1
        return items

    def _reads_of(self, kind: str, v: Any) -> set[str]:
        fx = self.an.fx
        if kind == "op":
            return set(_reads(fx[v])) if v not in self.inplace_bn else {a.name for a in fx[v].all_input_nodes}
        inside = set(self.regions[v].ops)
        return {a for name in self.regions[v].ops for a in _reads(fx[name]) if a not in inside}

    def _reads_after(self) -> list[set[str]]:
        """What each item's successors (and the return) still read."""
        later: set[str] = {value for _, value in self.copies} | set(self.out_names)
        reads_after: list[set[str]] = [set() for _ in self.items]
        for idx in range(len(self.items) - 1, -1, -1):
            reads_after[idx] = set(later)
            later |= self.item_reads[idx]
        return reads_after


def _region_function(src: _Source, layout: _Layout, r: int) -> bool:
    """Emit ``_region<r>``, the function ``checkpoint`` runs (and bind its policy);
    whether it runs as plain checkpointing."""
    an, fx, region = layout.an, layout.an.fx, layout.regions[r]
    ins, clones, outs = layout.region_inputs[r], layout.region_clones[r], layout.region_outputs[r]
    last: dict[str, str] = {}
    for name in region.ops:
        for a in _reads(fx[name]):
            last[a] = name
    src.emit(f"def _region{r}({', '.join(ins + clones)}):")
    src.emit("    try:")
    policies: dict[Any, list[CheckpointPolicy]] = defaultdict(list)
    for name in region.ops:
        n = fx[name]
        stats = _bn_stats(n)
        if stats is not None:
            args = (*n.args[:3], Raw(f"{stats[0]}_c"), Raw(f"{stats[1]}_c"), *n.args[5:])
            src.emit(f"        {name} = {src.call(n, args)}", name)
        else:
            src.emit(f"        {name} = {src.call(n)}", name)
        if _is_call(n):
            save = name not in region.recompute
            policies[n.target].append(CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.MUST_RECOMPUTE)
        dead = [a for a in dict.fromkeys(_reads(n)) if last.get(a) == name and a not in outs]
        if dead:
            src.emit(f"        del {', '.join(dead)}")
    src.emit(f"        return ({''.join(o + ', ' for o in outs)})")
    _emit_annotated_raise(src)
    src.emit("")
    # A region that saves no call is plain checkpointing: the selective policy's dispatch
    # mode would cost ~18 us per call for nothing (bench/results/sac_overhead.md). Under
    # torch.compile the tags are the partitioner's input, so the policy stays there.
    selective = layout.compiled or saves_a_call(an, region)
    if selective:
        src.ns[f"_ctx{r}"] = _context_fn({f: tuple(p) for f, p in policies.items()})
    return not selective


def _emit_annotated_raise(src: _Source) -> None:
    src.emit("    except Exception as _e:")
    src.emit("        _annotate(_e)")
    src.emit("        raise")


def _forward_function(src: _Source, layout: _Layout, plain: list[bool], *, pager: bool) -> None:
    """Emit ``forward``: the prelude, each item (an op, or a region's ``checkpoint`` call),
    the ``del`` of what no later item reads, the statistics copies, the return."""
    an, fx, tm = layout.an, layout.an.fx, layout.an.tm
    src.emit(f"def forward({', '.join([*layout.params, *layout.consts])}):")
    src.emit("    try:")
    ind = "        "
    for name in an.prelude_fwd:
        src.emit(f"{ind}{name} = {src.call(fx[name])}", name)
    paged_op = {an.op_of[v]: v for v in layout.paged}
    prefetch_at: dict[str, list[int]] = defaultdict(list)
    if not layout.compiled:
        for v, op in layout.plan.prefetch.items():
            if v in layout.paged:
                prefetch_at[op].append(v)
    for idx, (kind, v) in enumerate(layout.items):
        if kind == "op":
            _emit_op(src, layout, v, paged_op, prefetch_at)
        else:
            _emit_region_call(src, layout, v, plain[v])
        dead = sorted(a for a in layout.item_reads[idx]
                      if a not in layout.reads_after[idx] and a not in layout.keep_always)
        if dead:
            src.emit(f"{ind}del {', '.join(dead)}")
    if pager and not layout.compiled:
        src.emit(f"{ind}_pg.fence()")
    if layout.copies:
        src.emit(f"{ind}with torch.no_grad():")
        for target, value in layout.copies:
            src.emit(f"{ind}    {target}.copy_({value})")
    exprs = [x if is_fx and x is not None else "None" for x, is_fx in zip(tm.out_leaves, tm.out_is_fx)]
    src.emit(f"{ind}return ({''.join(e + ', ' for e in exprs)})")
    _emit_annotated_raise(src)


def _emit_op(src: _Source, layout: _Layout, name: str, paged_op: dict[str, int],
             prefetch_at: dict[str, list[int]]) -> None:
    """One op of ``forward`` outside regions: bracketed by the pager when paged, in-place
    BatchNorm on the module's buffers, a prefetch hook where a page-in starts."""
    ind = "        "
    an = layout.an
    n = an.fx[name]
    if name in paged_op:
        src.emit(f"{ind}_pg.begin()")
    if name in layout.inplace_bn:
        src.emit(f"{ind}{name} = {src.bind(aten.native_batch_norm.default)}"
                 f"({', '.join(literal(x) for x in n.args)})", name)
    else:
        src.emit(f"{ind}{name} = {src.call(n)}", name)
    if name in paged_op:
        src.emit(f"{ind}_pg.end({paged_op[name]}, {_paged_value(an, paged_op[name], name)})")
    if name in prefetch_at:
        src.emit(f"{ind}_prefetch_at({name}, {tuple(sorted(prefetch_at[name]))!r})")


def _emit_region_call(src: _Source, layout: _Layout, r: int, plain: bool) -> None:
    """Region ``r``'s ``checkpoint`` call in ``forward``, with its statistics clones."""
    ind = "        "
    region = layout.regions[r]
    clones = layout.region_clones[r]
    for c in clones:
        src.emit(f"{ind}{c} = {c[:-2]}.clone()")
    outs = layout.region_outputs[r]
    lhs = f"({''.join(o + ', ' for o in outs)})" if outs else "_"
    call_args = ", ".join(layout.region_inputs[r] + clones)
    context = "" if plain else f"context_fn=_ctx{r}, "
    src.emit(f"{ind}{lhs} = _ckpt(_region{r}, {call_args}, use_reentrant=False, {context}"
             f"preserve_rng_state={region.rng}, determinism_check='none')", region.ops[0])
    if clones:
        src.emit(f"{ind}del {', '.join(clones)}")


def _paged_value(an: Analysis, node: int, op_name: str) -> str:
    """The tuple of tensors paged node ``node`` holds, right after its op ``op_name``: the
    op's value, or for a multi-output op the elements the node keeps (torch_exec/plan.py)."""
    val = an.fx[op_name].meta.get("val")
    if not isinstance(val, (list, tuple)):
        return f"({op_name},)"
    npl = an.step_plan.nodes[node]
    trim = dict(npl.trim)
    elements: list[int] = []
    for name in npl.kept:
        if name == op_name:
            elements += trim.get(name, ())
            continue
        # A kept value is an element of the op's tuple, or a view of one (layer norm's
        # output reshaped for the next matmul): its storage is the element's.
        n = an.fx[name]
        while is_view(n) and isinstance(n.args[0], torch.fx.Node):
            n = n.args[0]
        if (gi := getitem_of(n)) is not None and gi[0] == op_name:
            elements.append(gi[1])
    return "(" + "".join(f"{op_name}[{k}], " for k in sorted(set(elements))) + ")"


__all__ = ["forward_source", "saves_a_call"]
