"""ResNet-18 (He et al. 2016): the ImageNet variant and the common CIFAR variant.

``resnet18_cifar`` uses a 3x3 stride-1 stem and no max-pool (32x32 inputs, 10 classes);
``resnet18`` is the torchvision layout (7x7 stride-2 stem + max-pool, 224x224, 1000
classes). In-place ReLU and residual adds are kept as in torchvision: the frontend's
functionalization turns them into pure ops.
"""

from __future__ import annotations

import torch
from torch import nn

from models.spec import ModelSpec, class_targets, image_inputs, register


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class ResNet18(nn.Module):
    def __init__(self, num_classes: int, cifar: bool) -> None:
        super().__init__()
        if cifar:
            self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
            self.maxpool: nn.Module = nn.Identity()
        else:
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        widths = (64, 128, 256, 512)
        cin = 64
        for i, w in enumerate(widths):
            stride = 1 if i == 0 else 2
            setattr(self, f"layer{i + 1}", nn.Sequential(BasicBlock(cin, w, stride), BasicBlock(w, w, 1)))
            cin = w
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


register(ModelSpec(
    name="resnet18_cifar",
    description="ResNet-18, CIFAR variant (3x3 stem, no max-pool), 32x32x3 -> 10 classes",
    factory=lambda: ResNet18(10, cifar=True),
    make_inputs=image_inputs(3, 32, 32),
    make_target=class_targets(10),
    default_batch=16,
))

register(ModelSpec(
    name="resnet18",
    description="ResNet-18, ImageNet layout (7x7 stem + max-pool), 224x224x3 -> 1000 classes",
    factory=lambda: ResNet18(1000, cifar=False),
    make_inputs=image_inputs(3, 224, 224),
    make_target=class_targets(1000),
    default_batch=8,
))
