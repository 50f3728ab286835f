"""``--train PATTERNS``: train a subset of a module's parameters, freeze the rest."""

from __future__ import annotations

from fnmatch import fnmatchcase

from torch import nn

from poet_compiler.errors import FrontendError

_GLOB = set("*?[.")


def _matches(pattern: str, name: str) -> bool:
    # A bare word ("bias") names a last component: "--train bias" trains every *.bias (and
    # every *_bias: the ONNX frontend's parameter names join components with "_").
    if not _GLOB & set(pattern):
        return name == pattern or name.endswith(("." + pattern, "_" + pattern))
    return fnmatchcase(name, pattern)


def select_trained(module: nn.Module, patterns: str) -> tuple[str, ...]:
    """Keep ``requires_grad`` on the parameters some pattern matches (comma-separated
    ``fnmatch`` globs on parameter names), clear it on the others; return the trained
    names. A pattern that matches no parameter is a FrontendError."""
    pats = [p.strip() for p in patterns.split(",") if p.strip()]
    if not pats:
        raise FrontendError("--train: no pattern given (e.g. --train 'classifier.*,*.bias')")
    named = list(module.named_parameters())
    for p in pats:
        if not any(_matches(p, name) for name, _ in named):
            sample = ", ".join(name for name, _ in named[:4]) + (", ..." if len(named) > 4 else "")
            raise FrontendError(f"--train: pattern {p!r} matches no parameter of {type(module).__name__} "
                                f"(parameters: {sample})")
    trained = []
    for name, param in named:
        keep = any(_matches(p, name) for p in pats)
        param.requires_grad_(keep)
        if keep:
            trained.append(name)
    return tuple(trained)
