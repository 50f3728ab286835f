"""Gurobi through gurobipy's size-limited pip license (a dev dependency, so it is here).

Under 2,000 variables and constraints the backend solves for real and must agree with
CP-SAT and with the exhaustive search; above it the license refuses, which must become
one line naming the limit and the way out.
"""

from __future__ import annotations

import gurobipy as gp
import pytest

from poet_compiler.errors import SolverError
from poet_compiler.solve.formulation import build
from poet_compiler.solve.milp import solve_milp
from poet_compiler.solve.options import SolveOptions
from poet_compiler.solvers import BackendOptions, solve_model
from poet_compiler.solvers.gurobi import SIZE_LIMIT, size_limit_message
from tests.support.graphs import random_problem
from tests.support.oracle import brute_force

OPTS = BackendOptions(time_limit_s=30, threads=1)


def _size(model) -> int:  # noqa: ANN001
    return max(model.n_vars, len(model.rows))


def _size_limited_license() -> bool:
    """True when gurobipy runs on the pip wheel's license (refuses > 2,000 variables)."""
    env = gp.Env(empty=True)
    env.setParam("OutputFlag", 0)
    env.start()
    m = gp.Model(env=env)
    m.addVars(SIZE_LIMIT + 1)
    try:
        m.optimize()
    except gp.GurobiError:
        return True
    finally:
        m.dispose()
        env.dispose()
    return False


def test_size_limit_message_format() -> None:
    built = build(random_problem(0, 6, "poet"), "dense")
    msg = size_limit_message(built.model)
    assert msg == (f"gurobi: the pip license is limited to 2000 variables/constraints; this model has "
                   f"{_size(built.model)}; install a full license or use --solver cpsat")


@pytest.mark.parametrize("seed", range(1, 4))
def test_small_model_solved_by_gurobi_agrees_with_cpsat(seed: int) -> None:
    built = build(random_problem(seed, 6, "poet"), "dense")
    assert _size(built.model) < SIZE_LIMIT  # within the pip license
    g = solve_model(built.model, "gurobi", OPTS)
    c = solve_model(built.model, "cpsat", OPTS)
    assert g.solver == "gurobi" and g.status == c.status == "optimal"
    assert g.objective == pytest.approx(c.objective, rel=1e-6)
    assert g.bound is not None and g.bound <= g.objective * (1 + 1e-9)


@pytest.mark.parametrize("seed", range(0, 4))
def test_solve_milp_on_gurobi_matches_the_exhaustive_optimum(seed: int) -> None:
    problem = random_problem(seed, 6, "poet")
    result = solve_milp(problem, SolveOptions(solver="gurobi", formulation="dense", time_limit_s=30, threads=1))
    exact = brute_force(problem)
    if exact is None:
        assert result.status == "infeasible"
        return
    assert result.status == "optimal" and result.solver == "gurobi"
    assert result.energy_j == pytest.approx(exact[0], rel=1e-6)


def test_model_above_the_pip_license_is_refused_in_one_line() -> None:
    if not _size_limited_license():
        pytest.skip("a full Gurobi license is installed: nothing is refused")
    problem = random_problem(0, 24, "poet")
    model = build(problem, "dense").model
    assert _size(model) > SIZE_LIMIT
    with pytest.raises(SolverError) as info:
        solve_model(model, "gurobi", OPTS)
    assert str(info.value) == size_limit_message(model)
    with pytest.raises(SolverError, match="pip license is limited to 2000"):
        solve_milp(problem, SolveOptions(solver="gurobi", formulation="dense", time_limit_s=20))


def test_cli_refusal_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys) -> None:  # noqa: ANN001
    import json

    from poet_compiler.cli import main
    from tests.viz.graphs import chain_dict

    if not _size_limited_license():
        pytest.skip("a full Gurobi license is installed: nothing is refused")
    graph = tmp_path / "chain30.json"
    graph.write_text(json.dumps(chain_dict(30, name="chain30")))
    rc = main(["compile", str(graph), "--ram", "40%", "--solver", "gurobi", "--formulation", "dense",
               "-o", str(tmp_path / "out.poet"), "-q"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("error: gurobi: the pip license is limited to 2000 variables/constraints")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chain30.json"]
