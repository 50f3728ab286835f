"""Every solver call goes through ``solvers/``: no other module of the package
imports a solver library (OR-Tools, HiGHS, Gurobi), at module level or in a function.

A model that needs CP-SAT's own constraints is built on
:func:`poet_compiler.solvers.native.new_model` and solved by
:func:`~poet_compiler.solvers.native.solve_native`, which applies the one stopping
rule; a solver-neutral ``LinearModel`` goes to ``solve_model``. Read from the source with
``ast``, as :mod:`tests.test_imports` reads the import graph.
"""

from __future__ import annotations

from pathlib import Path

from tests.test_imports import PACKAGE_DIR, _package, find_imports

SOLVER_LIBRARIES = ("ortools", "highspy", "gurobipy")
BACKENDS = "poet_compiler.solvers"


def solver_imports_outside(root: Path, backends: str) -> list[str]:
    """``module:line imports target`` for every import of a solver library by a module of
    the package at ``root`` outside the package ``backends``."""
    _, imports = find_imports(root)
    return sorted(f"{imp.importer}:{imp.lineno} imports {imp.target}" for imp in imports
                  if imp.target.split(".")[0] in SOLVER_LIBRARIES
                  and imp.importer != backends and not imp.importer.startswith(backends + "."))


def test_only_backends_import_solver_libraries() -> None:
    bad = solver_imports_outside(PACKAGE_DIR, BACKENDS)
    assert not bad, "solver libraries imported outside solvers/:\n" + "\n".join(bad)


def test_checker_sees_lazy_and_from_imports(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "__init__.py": "",
        "solve/__init__.py": "",
        "solvers/__init__.py": "import highspy\n",
        "solvers/x.py": "def f():\n    from ortools.sat.python import cp_model\n",
        "a.py": "def f():\n    from ortools.sat.python import cp_model  # lazy\n",
        "b.py": "import gurobipy as gp\nimport highspy_like\n",
        "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import ortools\n",
    })
    assert solver_imports_outside(root, "pkg.solvers") == [
        "pkg.a:2 imports ortools.sat.python", "pkg.b:1 imports gurobipy"]
