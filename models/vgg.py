"""VGG-16 with batch norm for CIFAR (32x32x3 -> 10 classes), the usual CIFAR layout
(13 conv layers, one linear classifier on the 1x1x512 feature map)."""

from __future__ import annotations

import torch
from torch import nn

from models.spec import ModelSpec, class_targets, image_inputs, register

_CFG = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


class VGG16(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for v in _CFG:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(cin, int(v), 3, padding=1), nn.BatchNorm2d(int(v)), nn.ReLU(inplace=True)]
                cin = int(v)
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


register(ModelSpec(
    name="vgg16_cifar",
    description="VGG-16 with batch norm, CIFAR layout, 32x32x3 -> 10 classes",
    factory=VGG16,
    make_inputs=image_inputs(3, 32, 32),
    make_target=class_targets(10),
    default_batch=16,
))
