"""The real calls of the stages: :data:`STEPS`, the :class:`~.context.Steps` every compile
runs with. Apart from the Context, so that the stages these calls enter (the guided search
and the full model by rounds take a Context) do not import themselves back through it."""

from __future__ import annotations

from poet_compiler.solve.cover import cover_bound
from poet_compiler.solve.feasibility import explain_infeasible
from poet_compiler.solve.finalize import finalize_plan
from poet_compiler.solve.guided import cover_schedule, guided_search
from poet_compiler.solve.pipeline.context import Steps
from poet_compiler.solve.row_generation import solve_by_rows
from poet_compiler.solve.warm_start import warm_start_candidates
from poet_compiler.solvers import solve_model

STEPS = Steps(
    warm_starts=warm_start_candidates,
    cover_bound=cover_bound,
    realize_cover=cover_schedule,
    guided_search=guided_search,
    solve_guided=solve_model,
    solve_by_rows=solve_by_rows,
    solve_full=solve_model,
    finalize=finalize_plan,
    explain_infeasible=explain_infeasible,
)
