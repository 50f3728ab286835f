"""MobileNetV2 (Sandler et al. 2018), width 1.0, adapted to CIFAR-sized inputs.

Input is 32x32x3 (10 classes): as in the common CIFAR adaptation the stem convolution
and the second bottleneck stage use stride 1 instead of 2, so the final feature map is
4x4 rather than 1x1. Everything else (inverted residuals, ReLU6, expansion 6) follows
the paper.
"""

from __future__ import annotations

import torch
from torch import nn

from models.spec import ModelSpec, class_targets, image_inputs, register

# (expansion t, output channels c, repeats n, first stride s) -- paper Table 2, CIFAR strides.
_CFG = ((1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def _conv_bn(cin: int, cout: int, k: int, stride: int, groups: int = 1, act: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act:
        # Not in-place: in-place hardtanh_ traces to clone + hardtanh, an extra buffer per activation.
        layers.append(nn.ReLU6())
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(_conv_bn(cin, hidden, 1, 1))
        layers += [_conv_bn(hidden, hidden, 3, stride, groups=hidden), _conv_bn(hidden, cout, 1, 1, act=False)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        blocks: list[nn.Module] = [_conv_bn(3, 32, 3, 1)]
        cin = 32
        for t, c, n, s in _CFG:
            for i in range(n):
                blocks.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        blocks.append(_conv_bn(cin, 1280, 1, 1))
        self.features = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(1280, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


register(ModelSpec(
    name="mobilenetv2",
    description="MobileNetV2 width 1.0, CIFAR-sized input (stride-1 stem), 32x32x3 -> 10 classes",
    factory=MobileNetV2,
    make_inputs=image_inputs(3, 32, 32),
    make_target=class_targets(10),
    default_batch=8,
))
