"""The one error ``poetc emit-c`` raises for a model or schedule it cannot turn into C."""

from __future__ import annotations

from poet_compiler.errors import PoetError


class EmitError(PoetError):
    """The model uses something the reference kernels do not cover, or the schedule does
    not belong to the model: one line for the user, exit code 2 from the CLI."""
