"""The poetc model zoo: pure-PyTorch models (no torchvision, no downloads).

``models.get(name)`` returns a :class:`ModelSpec`; ``models.names()`` lists them. Every
model is deterministic (seeded init, seeded example batch) and has no dropout, so that
recomputing an activation reproduces it bitwise.
"""

from __future__ import annotations

from models.spec import ModelSpec, register

# Importing a family module registers its models.
from models import bert, digits, gpt2, gpt2_large, mcu, mlp, mobilenetv2, resnet, vgg  # noqa: E402,F401
from models.spec import _REGISTRY


def names() -> list[str]:
    """Registered model names, sorted."""
    return sorted(_REGISTRY)


def get(name: str) -> ModelSpec:
    """The spec of ``name``; KeyError lists the known names."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known models: {', '.join(names())}") from None


__all__ = ["ModelSpec", "get", "names", "register"]
