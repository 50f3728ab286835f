"""Schedule: POET's decision matrices R, S_RAM, S_AUX, M_in, M_out (docs/model.md).

Row ``t`` is stage ``t`` (the stage in which node ``t`` is first computed), column
``i`` is node ``i``. Frees are not stored: they follow from the matrices ("free after
last use"), exactly as the linearizer emits them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class Schedule:
    R: np.ndarray
    S_RAM: np.ndarray
    S_AUX: np.ndarray
    M_in: np.ndarray
    M_out: np.ndarray

    @classmethod
    def empty(cls, n: int) -> Schedule:
        z = lambda: np.zeros((n, n), dtype=bool)  # noqa: E731
        return cls(R=z(), S_RAM=z(), S_AUX=z(), M_in=z(), M_out=z())

    @classmethod
    def checkpoint_all(cls, n: int) -> Schedule:
        """Compute each node once and keep every tensor to the end of the step.

        An upper bound on memory, handy in tests; PyTorch's default (free after last
        use) is :func:`poet_compiler.solve.baselines.keep_all.checkpoint_all_schedule`.
        """
        s = cls.empty(n)
        np.fill_diagonal(s.R, True)
        s.S_RAM[:] = np.tril(np.ones((n, n), dtype=bool), k=-1)
        return s

    @property
    def n(self) -> int:
        return self.R.shape[0]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schedule):
            return NotImplemented
        return all(
            np.array_equal(getattr(self, k), getattr(other, k))
            for k in ("R", "S_RAM", "S_AUX", "M_in", "M_out")
        )

    def copy(self) -> Schedule:
        return Schedule(*(getattr(self, k).copy() for k in ("R", "S_RAM", "S_AUX", "M_in", "M_out")))
