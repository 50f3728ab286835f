"""Microcontroller-sized models, sized so that training needs remat/paging in 256 KiB.

``kws_dscnn``: the DS-CNN keyword spotter of Zhang et al., "Hello Edge" (2017), on a
49x10 MFCC map with 12 classes, narrowed to 24 channels (DS-CNN-S uses 64) so that the
checkpoint-all activation peak at the default batch is a few times 256 KiB rather than
tens of times.
``cifar_cnn_tiny``: a three-conv CIFAR-10 network (8-16-32 channels, BN, ReLU,
max-pool, global average pool).
"""

from __future__ import annotations

import torch
from torch import nn

from models.spec import ModelSpec, class_targets, image_inputs, register


def _bn_relu(c: int) -> list[nn.Module]:
    return [nn.BatchNorm2d(c), nn.ReLU()]


class DSCNN(nn.Module):
    def __init__(self, channels: int = 24, blocks: int = 4, classes: int = 12) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(1, channels, (10, 4), (2, 2), (5, 1), bias=False), *_bn_relu(channels)]
        for _ in range(blocks):
            layers += [nn.Conv2d(channels, channels, 3, 1, 1, groups=channels, bias=False), *_bn_relu(channels),
                       nn.Conv2d(channels, channels, 1, bias=False), *_bn_relu(channels)]
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


class CifarCNNTiny(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False), *_bn_relu(8), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1, bias=False), *_bn_relu(16), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1, bias=False), *_bn_relu(32),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


register(ModelSpec(
    name="kws_dscnn",
    description="DS-CNN keyword spotter (Hello Edge), 24 channels, 49x10 MFCC -> 12 classes",
    factory=DSCNN,
    make_inputs=image_inputs(1, 49, 10),
    make_target=class_targets(12),
    # Batch 4: the largest single working set (a conv backward: its input, output
    # gradient and result) is ~142 KiB, so the step fits 256 KiB with remat and paging,
    # while the checkpoint-all peak (~0.9 MiB) does not.
    default_batch=4,
))

register(ModelSpec(
    name="cifar_cnn_tiny",
    description="tiny CIFAR-10 CNN (8-16-32 channels, BN, max-pool), 32x32x3 -> 10 classes",
    factory=CifarCNNTiny,
    make_inputs=image_inputs(3, 32, 32),
    make_target=class_targets(10),
    # Batch 2: the largest single working set (~196 KiB) fits 256 KiB; the
    # checkpoint-all peak (~376 KiB) does not, so remat/paging are needed.
    default_batch=2,
))
