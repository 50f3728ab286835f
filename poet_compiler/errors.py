"""Two exception families: what a user got wrong, and what poetc got wrong.

- :class:`PoetError` and its subclasses: bad input (a file, a budget, a model) or an
  impossible request, explained in one line. The CLI prints ``error: <message>`` and
  exits 2.
- :class:`InternalError`: poetc broke one of its own invariants (e.g. a schedule it built
  fails the simulator). It is never turned into "infeasible" or "no schedule"; the CLI
  prints ``internal error: <message> (<hint to report it>)`` on one line and exits 1.

Anything else is a bug too: the CLI reports it like an InternalError (one line, exit 1);
``poetc --debug`` (or ``POETC_DEBUG=1``) shows the traceback.
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


class UpdateOrderError(ScheduleError):
    """A Program breaks the rule of an optimizer update (docs/training.md): it runs an
    update twice or before a read of the old parameter, or recomputes such a read after
    it. The heuristics that know nothing of updates meet it on a graph with updates."""


class OverBudgetError(ScheduleError):
    """A valid Program needs more RAM than the budget, or more time than the deadline."""


class BytecodeError(PoetError):
    """A .poet file is truncated, corrupted or of an unknown version."""


class BatchError(PoetError):
    """A batch given to a compiled training step differs from the one it was compiled for."""


class InternalError(Exception):
    """poetc broke its own invariant: a bug to report, not the user's input (not a PoetError).

    ``detail``: what a one-line message leaves out (e.g. a child process's traceback),
    printed by ``poetc --debug``."""

    def __init__(self, message: str, *, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail
