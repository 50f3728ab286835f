"""The code's shape at one or more commits, side by side: size, circles, layers, tests.

    python bench/code_shape.py 90d0598 HEAD            # side by side
    python bench/code_shape.py 90d0598 HEAD --list     # and what the last commit's counts are made of

Per commit (read with ``git show``, nothing is imported):

- **lines**: ``wc -l`` of ``poet_compiler/**/*.py``, of ``poet_compiler/solve/**/*.py`` and of
  the driver of ``strategy="optimal"`` (``solve/milp.py``);
- **circles**: groups of modules that import each other round (strongly connected
  components of the import graph with more than one module), counting every import: at
  module level, in a function, and under ``if TYPE_CHECKING:`` (an import made only for
  the type checker still ties the two modules together: neither reads without the other).
  Importing ``a.b.c`` runs the ``__init__`` of ``a.b``, so an import also reaches the
  packages it enters, as in ``tests/test_imports.py``;
- **modules > 500**: modules of ``poet_compiler/`` over 500 lines (``wc -l``);
- **functions > 80**: functions and methods over 80 lines, from their ``def`` line to their
  last line (``ast``: docstrings, comments and nested functions included; decorators not);
  a nested function counts on its own too;
- **params > 8**: functions (methods without ``self``/``cls``) with more than 8 parameters,
  in ``solve/`` and in the whole package (``*args``/``**kwargs`` count one each);
- **monkeypatches**: ``setattr`` calls of pytest's ``monkeypatch`` in ``tests/`` whose target is
  a module of ``poet_compiler.solve`` (the optimizer's own code: the driver, its stages, the
  bounds, finalize; not the solver back-ends, ``solvers/``, once ``solve/backends/``), and of
  those the ones into ``solve/milp.py``;
- **imports back up**: imports (module level or in a function, ``TYPE_CHECKING`` aside) from a
  module of a lower layer to one of a higher layer, in the layer order of
  ``tests/test_imports.py`` (:data:`LAYERS` here, the same table).
"""

from __future__ import annotations

import argparse
import ast
import subprocess

import networkx as nx

# Lowest first; a module belongs to the entry with the longest prefix of its name. The
# same order as tests/test_imports.py (LAYERS), kept here to read old commits too: there
# the solver back-ends lived in poet_compiler.solve.backends, part of the solve layer (an
# import of them runs poet_compiler.solve's __init__).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("errors", "units", "fileio", "versions", "work", "command_start", "progress", "gap")),
    ("graph", ("graph",)),
    ("frontends", ("frontends",)),
    ("devices", ("devices",)),
    ("solvers", ("solvers",)),
    ("schedule", ("schedule",)),
    ("solve", ("solve",)),
    ("schemas", ("schemas",)),
    ("codegen", ("codegen",)),
    ("user side", ("reporting", "viz", "training", "training_options", "sweeps", "comparison", "api",
                   "commands", "cli", "")),
)


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of ``poet_compiler.<module>`` (its longest listed prefix)."""
    rel = module.removeprefix("poet_compiler").lstrip(".")
    best, index = -1, len(LAYERS) - 1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (rel == p or rel.startswith(p + ".") or p == "") and len(p) > best:
                best, index = len(p), i
    return index


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def _files(rev: str, root: str) -> dict[str, str]:
    paths = [p for p in _git("ls-tree", "-r", "--name-only", rev, root).split() if p.endswith(".py")]
    return {p: _git("show", f"{rev}:{p}") for p in paths}


def _module(path: str) -> str:
    parts = path[:-3].split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def wide_functions(files: dict[str, str]) -> list[tuple[str, str, int]]:
    """``(path, function, parameters)`` of every function with more than 8 parameters."""
    out = []
    for path, src in files.items():
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
                if names and names[0] in ("self", "cls"):
                    names = names[1:]
                k = len(names) + bool(a.vararg) + bool(a.kwarg)
                if k > 8:
                    out.append((path, node.name, k))
    return sorted(out)


def _imports(files: dict[str, str], type_checking: bool = False) -> list[tuple[str, str, int]]:
    """``(importer, target, line)`` of every import of a ``poet_compiler`` module, those under
    ``if TYPE_CHECKING:`` only when ``type_checking``."""
    modules = {_module(p) for p in files}
    found: list[tuple[str, str, int]] = []
    for path, src in files.items():
        name = _module(path)
        package = name if path.endswith("__init__.py") else name.rpartition(".")[0]

        def walk(node: ast.AST, name: str = name, package: str = package) -> None:
            if (not type_checking and isinstance(node, ast.If)
                    and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING"):
                for stmt in node.orelse:
                    walk(stmt)
                return
            if isinstance(node, ast.Import):
                found.extend((name, a.name, node.lineno) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - (node.level - 1)] + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    found.append((name, sub if sub in modules else base, node.lineno))
            for child in ast.iter_child_nodes(node):
                walk(child)

        walk(ast.parse(src))
    return [(i, t, ln) for i, t, ln in found if t.startswith("poet_compiler")]


def imports_back_up(files: dict[str, str]) -> list[str]:
    """Every import from a lower layer to a higher one, as ``importer:line -> target``."""
    return sorted({f"{i}:{ln} -> {t}" for i, t, ln in _imports(files) if layer_of(i) < layer_of(t)})


def import_graph(files: dict[str, str]) -> nx.DiGraph:
    """Module -> module it imports, ``TYPE_CHECKING`` imports included, and the packages
    whose ``__init__`` that import runs (not the importer's own, already running)."""
    modules = {_module(p) for p in files}
    g = nx.DiGraph()
    g.add_nodes_from(modules)
    for importer, target, _ in _imports(files, type_checking=True):
        if target not in modules or target == importer:
            continue
        g.add_edge(importer, target)
        parts = target.split(".")
        for k in range(1, len(parts)):
            pkg = ".".join(parts[:k])
            if pkg in modules and not (importer == pkg or importer.startswith(pkg + ".")):
                g.add_edge(importer, pkg)
    return g


def circles(files: dict[str, str]) -> list[list[str]]:
    """Each group of modules that import each other round (a strongly connected component
    of :func:`import_graph` with more than one module), sorted, with one shortest circle
    through its first module appended as ``"a -> b -> a"``."""
    g = import_graph(files)
    out = []
    for group in sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1):
        sub = g.subgraph(group)
        first = group[0]
        back = min((nx.shortest_path(sub, succ, first) for succ in sub.successors(first)), key=len)
        out.append([*group, " -> ".join([first, *back])])
    return out


def long_modules(files: dict[str, str], limit: int = 500) -> list[tuple[str, int]]:
    """``(path, lines)`` of every module over ``limit`` lines, longest first."""
    return sorted(((p, s.count("\n")) for p, s in files.items() if s.count("\n") > limit), key=lambda x: (-x[1], x[0]))


def long_functions(files: dict[str, str], limit: int = 80) -> list[tuple[str, str, int]]:
    """``(path, qualified name, lines)`` of every function over ``limit`` lines, longest first."""
    out = []

    def visit(node: ast.AST, path: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef) and child.end_lineno is not None:
                    length = child.end_lineno - child.lineno + 1
                    if length > limit:
                        out.append((path, name, length))
                visit(child, path, name + ".")
            else:
                visit(child, path, prefix)

    for path, src in files.items():
        visit(ast.parse(src), path, "")
    return sorted(out, key=lambda x: (-x[2], x[0], x[1]))


def monkeypatches(tests: dict[str, str]) -> list[tuple[str, int, str, str]]:
    """``(path, line, module, name)`` of ``monkeypatch.setattr(obj, "name", ...)`` (or
    ``setattr("pkg.mod.name", ...)``) in ``tests`` whose target is a module of
    ``poet_compiler.solve`` other than its back-ends."""
    out = []
    for path, src in tests.items():
        tree: ast.AST = ast.parse(src)
        names: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        names[a.asname] = a.name
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    names[a.asname or a.name] = f"{node.module}.{a.name}"
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "setattr" and node.args):
                continue
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                module, _, attr = first.value.rpartition(".")
            elif isinstance(first, ast.Name) and first.id in names and len(node.args) > 1:
                # The attribute's name, or "?" when it is a variable (a loop over names).
                second = node.args[1]
                module, attr = names[first.id], str(second.value) if isinstance(second, ast.Constant) else "?"
            else:
                continue
            if module.startswith("poet_compiler.solve.") and not module.startswith("poet_compiler.solve.backends"):
                out.append((path, node.lineno, module, attr))
    return sorted(out)


def measure(rev: str) -> dict:
    solve = _files(rev, "poet_compiler/solve")
    package = _files(rev, "poet_compiler")
    tests = _files(rev, "tests")
    wide = wide_functions(package)
    patches = monkeypatches(tests)
    return {
        "lines": sum(s.count("\n") for s in package.values()),
        "circles": circles(package),
        "long_modules": long_modules(package),
        "long_functions": long_functions(package),
        "solve_lines": sum(s.count("\n") for s in solve.values()),
        "driver_lines": solve.get("poet_compiler/solve/milp.py", "").count("\n"),
        "wide_solve": [w for w in wide if w[0].startswith("poet_compiler/solve/")],
        "wide_package": wide,
        "patches": patches,
        "patches_milp": [p for p in patches if p[2] == "poet_compiler.solve.milp"],
        "back_up": imports_back_up(package),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("revs", nargs="+")
    ap.add_argument("--list", action="store_true", help="list what the last commit's counts are made of")
    args = ap.parse_args()
    print("| commit | lines | solve/ lines | driver lines | circles | modules > 500 | functions > 80 | "
          "params > 8 (solve/) | params > 8 (package) | monkeypatches (solve/) | of them into milp | "
          "imports back up |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for rev in args.revs:
        m = measure(rev)
        print(f"| {rev} | {m['lines']:,} | {m['solve_lines']:,} | {m['driver_lines']} | {len(m['circles'])} | "
              f"{len(m['long_modules'])} | {len(m['long_functions'])} | {len(m['wide_solve'])} | "
              f"{len(m['wide_package'])} | {len(m['patches'])} | {len(m['patches_milp'])} | {len(m['back_up'])} |")
    if args.list:
        print(f"\ncircles (TYPE_CHECKING imports included) at {rev}:")
        for group in m["circles"]:
            print(f"  {', '.join(group[:-1])}\n      e.g. {group[-1]}")
        print("\nmodules over 500 lines:")
        for path, n in m["long_modules"]:
            print(f"  {n:4}  {path}")
        print("\nfunctions over 80 lines:")
        for path, fn, n in m["long_functions"]:
            print(f"  {n:4}  {path}:{fn}")
        print("\nparams > 8:")
        for path, fn, k in m["wide_package"]:
            print(f"  {k:4}  {path}:{fn}")
        print("\nmonkeypatches of poet_compiler.solve modules:")
        for path, line, module, attr in m["patches"]:
            print(f"  {path}:{line}  {module}.{attr}")
        print("\nimports back up:")
        for line in m["back_up"]:
            print("  " + line)


if __name__ == "__main__":
    main()
