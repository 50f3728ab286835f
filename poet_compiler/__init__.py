"""poetc: compile a network's training step into an energy-optimal schedule of
rematerialization and paging (the POET method), prove its optimality gap, and emit
bytecode, a rewritten PyTorch step and reports.

Pipeline (one package each): frontends -> graph -> devices (costs) -> solve -> schedule -> codegen.
"""

__version__ = "0.1.0"
