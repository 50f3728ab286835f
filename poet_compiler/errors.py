"""One exception family for everything a user can get wrong.

The CLI catches :class:`PoetError` and prints ``error: <message>`` on one line with
exit code 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class PoetError(Exception):
    """Base class: bad input or an impossible request, explained in one line."""


class GraphError(PoetError):
    """A TrainingGraph (or a poet-graph/1 file) breaks a rule of the format."""


class FrontendError(PoetError):
    """A model could not be traced or converted into a TrainingGraph."""


class ProfileError(PoetError):
    """A device profile is missing, malformed or physically impossible."""


class BudgetError(PoetError):
    """A RAM size or deadline could not be parsed or is out of range."""


class InfeasibleError(PoetError):
    """No schedule meets the budgets; the message says why and what would work."""


class SolverError(PoetError):
    """A solver backend is unavailable or refused the model."""


class ScheduleError(PoetError):
    """A Program failed the simulator (missing input, use after free, overflow...)."""


class BytecodeError(PoetError):
    """A .poet file is truncated, corrupted or of an unknown version."""


class BatchError(PoetError):
    """A batch given to a compiled training step differs from the one it was compiled for."""
