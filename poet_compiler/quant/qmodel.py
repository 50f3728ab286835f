"""The quantized model: int8 weights and int32 biases, the integers every kernel receives,
and the float scales they were computed from (host only; docs/int8.md, "Representation").

A :class:`QModel` is a list of nodes in topological order over named tensors. Every
activation tensor has per-tensor :class:`QParams` (asymmetric int8, TFLite's convention);
a :class:`Conv` carries per-output-channel weight scales. ``Conv`` covers regular,
depthwise (``groups == in_channels == out_channels``), pointwise (1x1) convolution and a
linear layer (``linear=True``: a 1x1 convolution over a ``[B, K, 1, 1]`` view), because
their arithmetic is the same; the C interface still names them apart (docs/int8.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class QParams:
    """real = scale * (q - zero_point), q int8."""

    scale: float
    zero_point: int

    def quantize(self, x: np.ndarray) -> np.ndarray:
        """Host-side input quantization (data preparation, not part of the step): round
        half away from zero, saturate to int8."""
        q = np.sign(x / self.scale) * np.floor(np.abs(x / self.scale) + 0.5) + self.zero_point
        return np.clip(q, -128, 127).astype(np.int8)

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        return self.scale * (q.astype(np.float64) - self.zero_point)


@dataclass
class Conv:
    name: str
    input: str
    output: str
    weight: np.ndarray                 # int8 [Co, Ci/groups, kh, kw], values in [-127, 127]
    bias: np.ndarray                   # int32 [Co], real = s_x * s_W[c] * q
    weight_scale: np.ndarray           # float64 [Co] (host only): s_W0; s_W[c] = s_W0[c] * 2**k_W[c]
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right
    groups: int = 1
    linear: bool = False
    activation: str = "none"           # the fused activation: none | relu | relu6
    act_min: int = -128                # its clamp: ReLU [z_y, 127], ReLU6 [z_y, q(6)]
    act_max: int = 127
    out_multiplier: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    out_shift: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    grad_rescale: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int16))  # R_c in [1, 256]
    grad_multiplier: int = 0           # s_Wmax / 256 as (multiplier, shift)
    grad_shift: int = 0
    weight_exponent: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))  # k_W[c]
    weight_momentum: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int16))  # Q8 LSBs of q_W
    bias_momentum: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))    # Q8 LSBs of q_b
    weight_residual: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))   # Q8 LSBs of q_W
    train_weight: bool = True
    train_bias: bool = True

    def __post_init__(self) -> None:
        if self.weight_exponent.size == 0:
            self.weight_exponent = np.zeros(self.out_channels, np.int32)
        if self.weight_momentum.size == 0:
            self.weight_momentum = np.zeros(self.weight.shape, np.int16)
            self.bias_momentum = np.zeros(self.out_channels, np.int32)
        if self.weight_residual.size == 0:
            self.weight_residual = np.zeros(self.weight.shape, np.int8)

    @property
    def out_channels(self) -> int:
        return int(self.weight.shape[0])

    @property
    def kernel(self) -> tuple[int, int]:
        return int(self.weight.shape[2]), int(self.weight.shape[3])


@dataclass
class Pool:
    """A pooling window: its kernel, stride and padding (top, left, bottom, right)."""

    name: str
    input: str
    output: str
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)


@dataclass
class MaxPool(Pool):
    """The largest code of each window; the output keeps the input's QParams."""


@dataclass
class AvgPool(Pool):
    """Average over each window of valid (unpadded) positions, requantized to the output's
    QParams (``multiplier``/``shift`` = s_x / s_y; the division by the count is exact).
    Global average pooling is the window of the whole map."""

    multiplier: int = 1 << 30
    shift: int = 1


@dataclass
class Add:
    """Residual add, TFLite/CMSIS-NN ``elementwise_add_s8``: both inputs shifted left by 20
    and requantized to twice the larger input scale, summed, requantized to the output."""

    name: str
    inputs: tuple[str, str]
    output: str
    in_multiplier: tuple[int, int] = (0, 0)
    in_shift: tuple[int, int] = (0, 0)
    out_multiplier: int = 0
    out_shift: int = 0
    activation: str = "none"
    act_min: int = -128
    act_max: int = 127


@dataclass
class View:
    """Flatten/reshape: the same bytes under another shape (no kernel)."""

    name: str
    input: str
    output: str
    shape: tuple[int, ...]             # per sample


Node = Conv | MaxPool | AvgPool | Add | View

LEFT_SHIFT_ADD = 20  # TFLite's left shift of an int8 add's inputs


@dataclass
class QModel:
    nodes: list[Node]
    input: str
    output: str                        # the logits: int8 [B, classes]
    qparams: dict[str, QParams]        # every activation tensor
    shapes: dict[str, tuple[int, ...]]  # per-sample shape of every tensor
    grad_exponent: dict[str, int] = field(default_factory=dict)  # layer -> E of its input gradient
    act_exponent: dict[str, int] = field(default_factory=dict)   # tensor -> k: scale = s0 * 2**k
    logit_multiplier: int = 0          # M_e, sh_e = quantize_multiplier(s_z0 * log2(e)): the loss's exponential
    logit_shift: int = 0

    def convs(self) -> list[Conv]:
        return [n for n in self.nodes if isinstance(n, Conv)]

    def producer(self, tensor: str) -> Node | None:
        return next((n for n in self.nodes if n.output == tensor), None)

    def consumers(self, tensor: str) -> list[Node]:
        return [n for n in self.nodes if tensor in _inputs(n)]


def _inputs(node: Node) -> tuple[str, ...]:
    return node.inputs if isinstance(node, Add) else (node.input,)


def node_inputs(node: Node) -> tuple[str, ...]:
    return _inputs(node)
