"""Facts about aten ops that the lowering needs: aliasing, op class, FLOPs, signature."""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx
from torch.utils.flop_counter import flop_registry

aten = torch.ops.aten

# Ops that share their input's storage although their schema has no alias annotation.
_EXTRA_VIEWS = {aten._unsafe_view.default, aten.lift_fresh.default}

_CONV = {"convolution", "convolution_backward", "_convolution"}
_MATMUL = {"mm", "bmm", "addmm", "baddbmm", "addbmm", "matmul", "linear", "dot", "mv"}
_NORM_PREFIX = ("native_batch_norm", "_native_batch_norm_legit", "native_layer_norm", "native_group_norm",
                "batch_norm", "layer_norm", "group_norm")
_REDUCTION = {"sum", "mean", "amax", "amin", "max", "min", "var", "std", "prod", "logsumexp", "_softmax",
              "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data", "nll_loss_forward",
              "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward", "max_pool2d_with_indices",
              "max_pool2d_with_indices_backward", "avg_pool2d", "avg_pool2d_backward", "_adaptive_avg_pool2d",
              "_adaptive_avg_pool2d_backward", "mean_backward", "var_mean", "cumsum", "argmax", "argmin"}
_DATA = {"cat", "stack", "clone", "_to_copy", "copy", "index", "index_select", "gather", "scatter", "scatter_add",
         "embedding", "embedding_dense_backward", "constant_pad_nd", "slice_backward", "select_backward",
         "new_zeros", "new_empty", "new_ones", "zeros", "empty", "full", "ones", "zeros_like", "ones_like",
         "empty_like", "full_like", "repeat", "roll", "flip", "index_put", "_unsafe_index", "tril", "triu",
         "expand_copy", "view_copy", "permute_copy", "transpose_copy", "t_copy", "unsqueeze_copy",
         "squeeze_copy", "narrow_copy", "split_with_sizes_copy", "arange", "scalar_tensor",
         "lift_fresh_copy", "_unsafe_index_put", "index_add", "masked_scatter"}


def packet_name(target: Any) -> str:
    """``aten.convolution`` for ``torch.ops.aten.convolution.default``."""
    if target is operator.getitem:
        return "getitem"
    packet = getattr(target, "overloadpacket", None)
    name = getattr(packet, "__name__", None) or getattr(target, "__name__", str(target))
    ns = getattr(target, "namespace", "aten")
    return f"{ns}.{name}"


def is_view(node: torch.fx.Node) -> bool:
    """True when ``node`` returns an alias of an input (owns no storage)."""
    if node.op != "call_function":
        return False
    target = node.target
    if target in _EXTRA_VIEWS:
        return True
    schema = getattr(target, "_schema", None)
    if schema is None or not schema.returns:
        return False
    alias = schema.returns[0].alias_info
    return alias is not None and not alias.is_write


def is_mutation(node: torch.fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return bool(
        schema is not None and any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
    )


def op_class(target: Any) -> str:
    base = packet_name(target).split(".", 1)[-1]
    if base in _CONV:
        return "conv"
    if base in _MATMUL:
        return "matmul"
    if base.startswith(_NORM_PREFIX):
        return "norm"
    if base in _REDUCTION:
        return "reduction"
    if base in _DATA:
        return "data"
    tags = getattr(target, "tags", ())
    if torch.Tag.pointwise in tags or base.endswith("_backward") and base[:-9] in _POINTWISE_FWD:
        return "elementwise"
    return "other"


# Pointwise activations whose backward ops carry no pointwise tag.
_POINTWISE_FWD = {"threshold", "gelu", "hardtanh", "tanh", "sigmoid", "silu", "elu", "leaky_relu", "hardswish",
                  "hardsigmoid", "softplus", "mish"}


def tensor_bytes(t: torch.Tensor) -> int:
    """Storage bytes of a freshly produced tensor (fake tensors report their storage)."""
    try:
        return int(t.untyped_storage().nbytes())
    except Exception:  # noqa: BLE001 - some fake/meta tensors have no storage object
        return int(t.numel() * t.element_size())


def tensors_in(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_in(v)]
    return []


def _val(arg: Any) -> Any:
    if isinstance(arg, torch.fx.Node):
        return arg.meta.get("val")
    if isinstance(arg, (list, tuple)):
        return type(arg)(_val(a) for a in arg)
    return arg


def flops(node: torch.fx.Node) -> int:
    """FLOPs from torch.utils.flop_counter where it has a formula (conv, matmul,
    attention); otherwise one FLOP per element of the largest tensor touched, a
    deliberately simple estimate for elementwise, norm and reduction ops."""
    packet = getattr(node.target, "overloadpacket", None)
    args = _val(node.args)
    kwargs = {k: _val(v) for k, v in node.kwargs.items()}
    out = node.meta.get("val")
    if packet in flop_registry:
        try:
            return int(flop_registry[packet](*args, out_val=out, **kwargs))
        except Exception:  # noqa: BLE001 - fall back to the estimate below
            pass
    sizes = [t.numel() for t in tensors_in(args) + tensors_in(list(kwargs.values())) + tensors_in(out)]
    return int(max(sizes, default=0))


def _fmt(v: Any) -> str:
    if isinstance(v, torch.Tensor):
        dt = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
              torch.int64: "i64", torch.int32: "i32", torch.bool: "b8", torch.uint8: "u8", torch.int8: "i8"}
        return f"{dt.get(v.dtype, str(v.dtype).replace('torch.', ''))}[{','.join(str(int(s)) for s in v.shape)}]"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_fmt(x) for x in v) + "]"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, torch.dtype):
        return str(v).replace("torch.", "")
    return str(v)


def signature(node: torch.fx.Node) -> str:
    """Stable op signature, e.g. ``aten.convolution(f32[8,3,32,32],f32[64,3,3,3],None,[1,1],...)``:
    op name, tensor dtypes/shapes and every non-tensor argument (strides, dims ...)."""
    parts = [_fmt(_val(a)) for a in node.args]
    parts += [f"{k}={_fmt(_val(v))}" for k, v in sorted(node.kwargs.items())]
    return f"{packet_name(node.target)}({','.join(parts)})"
