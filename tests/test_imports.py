"""The package's import graph: no cycle, function-level and type-checking imports included.

A cycle hidden behind a function-level import still ties the modules together (neither
can be understood, tested or moved without the other); it only moves the failure from
import time to the first call. So does one behind ``if TYPE_CHECKING:``: never executed,
but a module whose signatures name another's types cannot be read without it. The graph
is read from the source with ``ast``: every ``import`` statement, at module level, inside
a function or under ``if TYPE_CHECKING:``. Importing ``a.b.c`` runs the ``__init__`` of
``a.b`` first, so an import also depends on the packages it enters.

In ``solve/``, a function-level import is allowed only for a heavy or optional third-party
dependency (kept lazy so that the heuristics and the CLI start without it), and says why
in a comment.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

import poet_compiler

PACKAGE_DIR = Path(poet_compiler.__file__).parent

# Third-party modules a function in solve/ may import lazily: heavy (torch, ray, the
# solvers' native libraries) or optional (gurobipy, ray).
LAZY_ALLOWED = ("torch", "ray", "gurobipy", "highspy", "ortools")


@dataclass(frozen=True)
class Import:
    importer: str
    target: str          # the module imported (``from x import y``: x.y when y is a module)
    lineno: int
    local: bool          # inside a function


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def find_imports(root: Path, *, type_checking: bool = False) -> tuple[set[str], list[Import]]:
    """Every module under package directory ``root`` and every import statement in them,
    those under ``if TYPE_CHECKING:`` only with ``type_checking``."""
    modules = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    found: list[Import] = []
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        package = name if is_pkg else name.rpartition(".")[0]

        def walk(node: ast.AST, in_function: bool, name: str = name, package: str = package) -> None:
            if not type_checking and isinstance(node, ast.If) and _is_type_checking(node.test):
                for child in node.orelse:
                    walk(child, in_function)
                return
            if isinstance(node, ast.Import):
                for alias in node.names:
                    found.append(Import(name, alias.name, node.lineno, in_function))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base_parts = package.split(".")
                    base_parts = base_parts[:len(base_parts) - (node.level - 1)]
                    base = ".".join(base_parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    found.append(Import(name, sub if sub in modules else base, node.lineno, in_function))
            inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            for child in ast.iter_child_nodes(node):
                walk(child, inner)

        walk(ast.parse(path.read_text(encoding="utf-8"), str(path)), False)
    return set(modules), found


def import_graph(root: Path) -> nx.DiGraph:
    """Module -> module it imports, type-checking imports included (and the packages whose
    ``__init__`` that import runs)."""
    modules, imports = find_imports(root, type_checking=True)
    g = nx.DiGraph()
    g.add_nodes_from(modules)
    for imp in imports:
        if imp.target not in modules or imp.target == imp.importer:
            continue
        g.add_edge(imp.importer, imp.target)
        parts = imp.target.split(".")
        for k in range(1, len(parts)):
            pkg = ".".join(parts[:k])
            # The importer's own packages are already initialized (or being initialized).
            if pkg in modules and not (imp.importer == pkg or imp.importer.startswith(pkg + ".")):
                g.add_edge(imp.importer, pkg)
    return g


def _cycles_text(g: nx.DiGraph) -> str:
    cycles = sorted((c for c in nx.simple_cycles(g)), key=lambda c: (len(c), c))
    return "\n".join(" -> ".join([*c, c[0]]) for c in cycles[:20])


def test_package_has_no_import_cycle() -> None:
    g = import_graph(PACKAGE_DIR)
    assert nx.is_directed_acyclic_graph(g), "import cycles:\n" + _cycles_text(g)


def test_solve_imports_lazily_only_heavy_dependencies() -> None:
    _, imports = find_imports(PACKAGE_DIR)
    bad = []
    for imp in imports:
        if not imp.local or not imp.importer.startswith("poet_compiler.solve"):
            continue
        path = PACKAGE_DIR.parent / (imp.importer.replace(".", "/"))
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        lines = path.read_text(encoding="utf-8").splitlines()
        commented = "#" in lines[imp.lineno - 1] or "#" in lines[imp.lineno - 2]
        if imp.target.split(".")[0] not in LAZY_ALLOWED or not commented:
            bad.append(f"{imp.importer}:{imp.lineno} imports {imp.target}"
                       + ("" if commented else " (no comment saying why)"))
    assert not bad, "function-level imports in solve/ other than commented heavy dependencies:\n" + "\n".join(bad)


# -- the checker itself finds what it must -----------------------------------------------

def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def test_checker_sees_function_level_and_package_init_cycles(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "__init__.py": "",
        "a.py": "def f():\n    from pkg.sub import b  # lazy: hides the cycle\n",
        "sub/__init__.py": "from . import c\n",
        "sub/b.py": "X = 1\n",
        "sub/c.py": "from pkg import a\n",
        "d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import e\n",
        "e.py": "import pkg.d\n",
    })
    g = import_graph(root)
    # a -> sub.b, and the import of pkg.sub.b runs pkg.sub's __init__, which imports c -> a.
    assert g.has_edge("pkg.a", "pkg.sub.b") and g.has_edge("pkg.a", "pkg.sub")
    assert not nx.is_directed_acyclic_graph(g)
    cycles = sorted(sorted(c) for c in nx.simple_cycles(g))
    # A TYPE_CHECKING import ties d and e together all the same: d <-> e is a cycle.
    assert g.has_edge("pkg.d", "pkg.e") and g.has_edge("pkg.e", "pkg.d")
    assert cycles == [["pkg.a", "pkg.sub", "pkg.sub.c"], ["pkg.d", "pkg.e"]]
    _, imports = find_imports(root)
    assert [(i.importer, i.target, i.local) for i in imports if i.importer == "pkg.a"] == [("pkg.a", "pkg.sub.b", True)]


# -- layers: no import runs back up ------------------------------------------------------

# The package's layers, lowest first (docs/architecture.md, "Layers"); a module belongs to
# the entry with the longest prefix of its name (``""``: the rest, the user's side). A
# module may import from its own layer and the ones below, never from one above, at
# module level, in a function or for the type checker (bench/code_shape.py counts the
# first two).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("errors", "units", "fileio", "versions", "work", "command_start", "progress", "gap")),
    ("graph", ("graph",)),
    ("frontends", ("frontends",)),
    ("devices", ("devices",)),
    ("solvers", ("solvers",)),
    ("schedule", ("schedule",)),
    ("solve", ("solve",)),
    ("schemas", ("schemas",)),
    ("quant", ("quant",)),
    ("codegen", ("codegen",)),
    ("torch_exec", ("torch_exec",)),
    ("user side", ("reporting", "viz", "training", "training_options", "sweeps", "comparison", "compilation", "api",
                   "commands", "cli", "")),
)


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of ``module`` (a name under the package)."""
    rel = module.partition(".")[2] if "." in module else ""
    best, index = -1, len(LAYERS) - 1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (rel == p or rel.startswith(p + ".") or p == "") and len(p) > best:
                best, index = len(p), i
    return index


def imports_back_up(root: Path) -> list[str]:
    """``importer:line imports target (layer -> layer)`` for every import of the package at
    ``root`` from a lower layer to a higher one (type-checking imports included)."""
    modules, imports = find_imports(root, type_checking=True)
    return sorted(f"{imp.importer}:{imp.lineno} imports {imp.target} "
                  f"({LAYERS[layer_of(imp.importer)][0]} -> {LAYERS[layer_of(imp.target)][0]})"
                  for imp in imports if imp.target in modules and layer_of(imp.importer) < layer_of(imp.target))


def test_no_import_runs_back_up_the_layers() -> None:
    bad = imports_back_up(PACKAGE_DIR)
    assert not bad, "imports from a lower layer to a higher one (tests/test_imports.py, LAYERS):\n" + "\n".join(bad)


def test_every_module_is_in_a_layer_the_table_names() -> None:
    """A new top-level module or package lands on the user's side unless the table says
    otherwise: this lists what does, so that a lower-layer one is placed on purpose."""
    modules, _ = find_imports(PACKAGE_DIR)
    top = sorted({m.split(".")[1] for m in modules if "." in m})
    named = {p.split(".")[0] for _, prefixes in LAYERS for p in prefixes if p}
    assert set(top) <= named, f"not in LAYERS: {sorted(set(top) - named)}"


def test_the_layer_check_sees_a_function_level_or_type_checking_import_up(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "__init__.py": "",
        "graph.py": "def f():\n    from pkg import api  # hides the arrow up\n",
        "schedule.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.api import Thing\n",
        "api.py": "from pkg import graph\n",
    })
    assert imports_back_up(root) == ["pkg.graph:2 imports pkg.api (graph -> user side)",
                                     "pkg.schedule:3 imports pkg.api (schedule -> user side)"]
