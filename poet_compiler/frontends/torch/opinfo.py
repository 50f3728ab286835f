"""Facts about aten ops that the lowering needs: aliasing, op class, FLOPs, signature."""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx
from torch.utils.flop_counter import flop_registry

from poet_compiler.graph.ir import OpClass

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


def op_class(target: Any) -> OpClass:
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


def _numel(t: Any) -> int:
    return int(t.numel()) if isinstance(t, torch.Tensor) else 0


def _shape(t: Any) -> list[int]:
    return [int(d) for d in t.shape] if isinstance(t, torch.Tensor) else []


def _prod(xs: list[int]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def conv_flops(x_shape: list[int], w_shape: list[int], out_shape: list[int], transposed: bool) -> int:
    """Multiply-adds (2 FLOPs each) of one convolution, bias not counted.

    Every weight element meets every position of the "sliding" side once per batch
    element: the output's spatial positions for a convolution, the input's for a
    transposed one. ``groups`` needs no term of its own: the weight's shape already
    carries it (``[C_out, C_in/groups, *k]``, transposed ``[C_in, C_out/groups, *k]``),
    so a depthwise 3x3 over C channels is ``2 * N * H_out * W_out * 9 * C``.
    """
    spatial = (x_shape if transposed else out_shape)[2:]
    return 2 * x_shape[0] * _prod(w_shape) * _prod(spatial)


def conv_backward_flops(grad_out: Any, x: Any, w: Any, transposed: bool, output_mask: Any) -> int:
    """FLOPs of ``aten.convolution_backward``: grad_input and grad_weight each cost what
    the forward costs (the same multiply-adds, regrouped; conv_flops). The bias
    gradient (a sum of grad_out) is not counted, as the forward's bias is not.

    torch.utils.flop_counter's formula is right for grad_input but counts grad_weight as
    the convolution of x^T with grad_out^T over *all* C_in x C_out channel pairs, i.e.
    ``groups`` times too many: for a depthwise layer (groups = C) C+1 times the true
    backward (kws_dscnn, BENCHMARKS.md "Device": 5.4 MFLOP counted for a 24-channel
    depthwise 3x3 whose forward is 0.216 MFLOP; true backward 0.432).
    """
    x_shape, w_shape, g_shape = _shape(x), _shape(w), _shape(grad_out)
    fwd = conv_flops(x_shape, w_shape, g_shape, transposed)
    mask = list(output_mask) if output_mask is not None else [True, True, True]
    return fwd * (int(bool(mask[0])) + int(bool(mask[1])))


# Batch/layer/group normalization, FLOPs per element of the normalized input (the
# per-channel work -- divisions, the square root, running statistics -- is O(C) and
# not counted). Training-mode forward, the two-pass algorithm PyTorch's CPU kernel and
# runtime/c/kernels/norm.c use:
#   mean                      sum x                          1 (add)
#   variance                  sum (x - mean)^2               3 (sub, mul, add)
#   normalize + scale/shift   y = x * a + b, per channel     2 (mul, add)
#                             a = gamma * invstd, b = beta - mean * a
#                                                          = 6
# Backward (dx, dgamma, dbeta):
#   reductions                sum dy                         1 (add)
#                             sum dy * (x - mean)            3 (sub, mul, add)
#   dx (if asked for)         gamma * invstd * (dy - mean(dy) - (x - mean) * invstd^2 * mean(dy * (x - mean)))
#                             = dy * a + x * b + c, per channel a, b, c   4 (2 mul, 2 add)
#                                                          = 8 (4 without dx)
# Inference-mode forward (running statistics): only normalize + scale/shift, 2; its
# backward's dx is one multiply (dy * a), the reductions for dgamma/dbeta as above.
# Counted as arithmetic, not instructions: the runtime's compensated (Kahan) sums add 3
# FPU adds per summed term, and every pass has its loop overhead; both are per-device
# costs, not FLOPs.
NORM_FWD_TRAIN_FLOPS_PER_ELEM = 6
NORM_FWD_EVAL_FLOPS_PER_ELEM = 2
NORM_BWD_REDUCE_FLOPS_PER_ELEM = 4
NORM_BWD_DX_FLOPS_PER_ELEM = 4
NORM_BWD_DX_EVAL_FLOPS_PER_ELEM = 1  # dx = dy * gamma * invstd with fixed statistics

_NORM_FWD = {"native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
             "_native_batch_norm_legit_no_training", "native_layer_norm", "native_group_norm"}
_NORM_BWD = {"native_batch_norm_backward", "native_layer_norm_backward", "native_group_norm_backward"}


def norm_flops(base: str, named: dict[str, Any]) -> int | None:
    """FLOPs of a normalization op (the table above) from its arguments by schema name,
    or None when ``base`` is not one. Layer and group norm make the same passes over
    their groups as batch norm over its channels, so they take the same counts."""
    if base in _NORM_FWD:
        training = bool(named.get("training", base != "_native_batch_norm_legit_no_training"))
        per = NORM_FWD_TRAIN_FLOPS_PER_ELEM if training else NORM_FWD_EVAL_FLOPS_PER_ELEM
        return per * _numel(named["input"])
    if base in _NORM_BWD:
        mask = named.get("output_mask")
        want_dx = bool(mask[0]) if mask is not None else True
        dx = NORM_BWD_DX_FLOPS_PER_ELEM if bool(named.get("train", True)) else NORM_BWD_DX_EVAL_FLOPS_PER_ELEM
        return (NORM_BWD_REDUCE_FLOPS_PER_ELEM + (dx if want_dx else 0)) * _numel(named["input"])
    return None


def _named_args(target: Any, args: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The op's arguments by schema name (positional ones zipped with the schema)."""
    schema = getattr(target, "_schema", None)
    names = [a.name for a in schema.arguments] if schema is not None else []
    return {**dict(zip(names, args)), **kwargs}


def flops(node: torch.fx.Node) -> int:
    """FLOPs of one op.

    Convolution backward and normalization ops: the formulas above. Other ops with a
    torch.utils.flop_counter formula (conv forward, matmul, attention): that formula.
    Otherwise one FLOP per element of the largest tensor touched, a deliberately simple
    estimate for elementwise and reduction ops.
    """
    packet = getattr(node.target, "overloadpacket", None)
    base = packet_name(node.target).split(".", 1)[-1]
    args = _val(node.args)
    kwargs = {k: _val(v) for k, v in node.kwargs.items()}
    out = node.meta.get("val")
    try:
        named = _named_args(node.target, args, kwargs)
        if base == "convolution_backward":
            return conv_backward_flops(named["grad_output"], named["input"], named["weight"],
                                       bool(named.get("transposed", False)), named.get("output_mask"))
        n = norm_flops(base, named)
        if n is not None:
            return n
    except (KeyError, IndexError, TypeError, AttributeError):  # unexpected signature: the estimates below
        pass
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
