"""poetc: compile a network's training step into an energy-optimal schedule of
rematerialization and paging (the POET method), prove its optimality gap, and emit
bytecode, a rewritten PyTorch step and reports.

Pipeline (one package each): frontends -> graph -> devices (costs) -> solve -> schedule -> codegen
(bytecode, C) and torch_exec (the schedule run by PyTorch).
"""

__version__ = "0.1.0"

__all__ = ["Compilation", "compile", "compare", "sweep", "read_sweep", "__version__"]


def __getattr__(name: str):
    # Lazy: `import poet_compiler` stays cheap (no torch, no solvers) until the API is used.
    if name in ("compile", "Compilation"):
        from poet_compiler import api

        return getattr(api, name)
    if name in ("compare", "sweep", "read_sweep"):
        from poet_compiler import comparison

        return getattr(comparison, name)
    raise AttributeError(f"module 'poet_compiler' has no attribute {name!r}")
