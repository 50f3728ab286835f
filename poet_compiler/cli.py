"""The ``poetc`` command line.

Each subcommand lives in :mod:`poet_compiler.commands` and registers itself. Bad input
raises :class:`~poet_compiler.errors.PoetError`; here it becomes one line on stderr and
exit code 2 — never a traceback.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import typer

from poet_compiler import commands
from poet_compiler.errors import PoetError

app = typer.Typer(
    name="poetc",
    help="Compile a training step into an energy-optimal rematerialization + paging schedule.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)



@app.callback()
def _root() -> None:
    """poetc: compile a training step into an energy-optimal remat + paging schedule."""


for _mod in sorted(m.name for m in pkgutil.iter_modules(commands.__path__)):
    importlib.import_module(f"{commands.__name__}.{_mod}").register(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    try:
        result = app(args=argv, standalone_mode=False)
    except PoetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except typer.Exit as exc:  # raised by commands that set their own exit code
        return exc.exit_code
    except Exception as exc:  # click usage errors (unknown option, missing argument)
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            return 2
        if isinstance(exc, click.exceptions.Abort):
            return 130
        raise
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())


def run() -> None:
    """Console-script wrapper: ``sys.exit(main())``."""
    sys.exit(main())
