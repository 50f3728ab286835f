"""``digits_cnn``: a small CNN for scikit-learn's 8x8 handwritten digits, sized for training
on a Cortex-M4 (``make device-train``).

Three 3x3 convolutions (1 -> 8 -> 8 -> 16 channels, ReLU, two 2x2 max-pools) and a linear
``classifier`` over the 16x2x2 features: 2,482 parameters (9.7 KiB of float32), about
60 k multiply-adds per image forward. No batch norm and no dropout, so a forward pass on
held-out images is the same computation as in training, and a recomputed activation is
bitwise the one it replaces. At batch 16 the checkpoint-all activation peak (152 KiB)
is half again the largest single working set (features.2's convolution backward,
98 KiB), so a budget between the two makes the schedule recompute or page.
"""

from __future__ import annotations

import torch
from torch import nn

from models.spec import ModelSpec, class_targets, image_inputs, register


class DigitsCNN(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(),
            nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.classifier = nn.Linear(16 * 2 * 2, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


register(ModelSpec(
    name="digits_cnn",
    description="small CNN for 8x8 digits (8-8-16 channels, max-pool), 1x8x8 -> 10 classes",
    factory=DigitsCNN,
    make_inputs=image_inputs(1, 8, 8),
    make_target=class_targets(10),
    default_batch=16,
))
