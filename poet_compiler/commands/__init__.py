"""CLI commands, one module each; every module defines ``register(app: typer.Typer)``.

:mod:`poet_compiler.cli` imports every module here (sorted by name), so adding a command
means adding a file — no central list to edit.
"""
