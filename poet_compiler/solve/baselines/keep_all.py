"""checkpoint_all: PyTorch's default — compute every node once, never recompute or page.

Each tensor stays in RAM from its computation until its last consumer has run, then it is
freed (what autograd does with saved activations). This is the only schedule of mode
``none`` (up to useless retention), so it is also the reference peak that budgets such as
"50% of checkpoint-all" are relative to. It is valid in every mode.
"""

from __future__ import annotations

import numpy as np

from poet_compiler.schedule.schedule import Schedule
from poet_compiler.solve.baselines._common import Trial, assemble, heuristic
from poet_compiler.solve.problem import Problem
from poet_compiler.solve.result import Result


def checkpoint_all_schedule(problem: Problem) -> Schedule:
    """Compute once, keep each tensor until its last consumer."""
    return assemble(problem.graph, np.eye(problem.n, dtype=bool))


@heuristic("checkpoint_all")
def checkpoint_all(trial: Trial) -> Result:
    return trial.finish(checkpoint_all_schedule(trial.problem),
                        note="no recomputation, no paging; tensors freed after their last use")
