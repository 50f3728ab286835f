"""The budget ``checkpointed()`` holds: a plan PyTorch can run above it is refused
(:func:`check_plan_within_budget`), in one line that names the smallest RAM budget the
plan search fits and where the plan peaks.

The plan search (:mod:`.plan_search`) already answers "how small": where no plan it
finds fits, it returns the one with the smallest peak, so that peak, plus what the
budget counts beside the arena, is the smallest RAM budget at which the search has a
plan for this schedule. No second search is needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from poet_compiler.errors import InfeasibleError
from poet_compiler.schedule.program import Op
from poet_compiler.units import format_bytes

if TYPE_CHECKING:
    from poet_compiler.solve.problem import Problem
    from poet_compiler.torch_exec.analysis import Analysis
    from poet_compiler.torch_exec.torch_plan import TorchPlan


def check_plan_within_budget(name: str, an: Analysis, plan: TorchPlan, problem: Problem,
                             schedule_peak: int | None) -> None:
    """Raise :class:`InfeasibleError` when ``plan`` needs more activation bytes than
    ``problem`` leaves (``name``: the model, first in the message; ``schedule_peak``: the
    activation bytes the schedule itself needs)."""
    budget = problem.activation_budget
    if plan.peak_bytes <= budget:
        return
    needed = plan.peak_bytes + problem.fixed.total
    schedule = "" if schedule_peak is None else f"the schedule needs {format_bytes(schedule_peak)}, but "
    raise InfeasibleError(
        f"{name}: no plan PyTorch's checkpointing can run fits RAM {format_bytes(problem.ram_budget_bytes)} "
        f"({format_bytes(budget)} for activations): the smallest the plan search finds needs "
        f"{format_bytes(plan.peak_bytes)}, i.e. ram={needed} bytes or more; {schedule}{peak_cause(an, plan)} "
        "(docs/pytorch.md)")


def peak_cause(an: Analysis, plan: TorchPlan) -> str:
    """Where ``plan`` peaks, one phrase: the op running then and what PyTorch holds beside it."""
    program, sim = plan.program, plan.simulation
    if program is None or sim is None or not 0 <= sim.peak_at < len(program.instructions):
        return "the plan peaks where PyTorch holds what autograd saved"
    at = program.instructions[sim.peak_at]
    op = an.graph.nodes[at.node].name
    earlier = program.instructions[:sim.peak_at]
    in_forward = at.node in set(an.forward)
    if in_forward and any(ins.op is Op.COMPUTE and ins.node == at.node for ins in earlier):
        where = "recomputing its checkpoint region, which PyTorch recomputes at once"
    elif in_forward:
        where = "in the forward, with the tensors autograd saved so far"
    else:
        where = "in the backward, beside the tensors autograd keeps for the nodes still to run"
    return f"the plan peaks at '{op}' {where}"


__all__ = ["check_plan_within_budget", "peak_cause"]
