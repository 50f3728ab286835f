"""The ``poetc`` command line.

Each subcommand lives in :mod:`poet_compiler.commands` and registers itself. Bad input
raises :class:`~poet_compiler.errors.PoetError`; here it becomes one line on stderr and
exit code 2 — never a traceback. A bug poetc detects in itself
(:class:`~poet_compiler.errors.InternalError`), and any other exception it did not
expect, gets one line, a hint to report it, and exit code 1. ``poetc --debug ...`` (or
``POETC_DEBUG=1``) prints the traceback too.
"""

from __future__ import annotations

import gc
import importlib
import os
import pkgutil
import sys
import time
import traceback

import typer

from poet_compiler import commands
from poet_compiler.command_start import command_from, process_started
from poet_compiler.errors import InternalError, PoetError

app = typer.Typer(
    name="poetc",
    help="Compile a training step into an energy-optimal rematerialization + paging schedule.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

INTERNAL_HINT = ("a bug in poetc, not in your input: please report it with the command line "
                 "and the model or graph file")



DEBUG_ENV = "POETC_DEBUG"
# Set by ``--debug`` for the command being run (main() resets it): not the environment, so
# one in-process call does not leak into the next.
_debug_flag = False


def _print_versions(value: bool) -> None:
    if value:
        from poet_compiler.versions import versions

        print(" ".join(f"{k} {v}" for k, v in versions().items()))
        raise typer.Exit(0)


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help=f"On an internal error, print the traceback "
                                     f"(also: {DEBUG_ENV}=1)."),
          version: bool = typer.Option(False, "--version", callback=_print_versions, is_eager=True,
                                       help="Print the versions of poetc and its solvers, and exit.")) -> None:
    """poetc: compile a training step into an energy-optimal remat + paging schedule."""
    global _debug_flag
    _debug_flag = debug    # read by main() when an unexpected exception ends the command


def _debugging() -> bool:
    return _debug_flag or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def _internal(exc: BaseException) -> int:
    """One line (what failed), the report hint and exit code 1; the traceback with --debug."""
    if isinstance(exc, InternalError):
        line = str(exc)
    else:
        where = traceback.extract_tb(exc.__traceback__)[-1:] or None
        at = f" (at {os.path.basename(where[0].filename)}:{where[0].lineno})" if where else ""
        line = f"{type(exc).__name__}: {exc}{at}"
    debug = _debugging()
    hint = INTERNAL_HINT if debug else f"{INTERNAL_HINT}; --debug (or {DEBUG_ENV}=1) shows the traceback"
    print(f"internal error: {' '.join(line.split())} ({hint})", file=sys.stderr)
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
        detail = getattr(exc, "detail", "")
        if detail:
            print(detail, file=sys.stderr, end="" if detail.endswith("\n") else "\n")
    return 1


for _mod in sorted(m.name for m in pkgutil.iter_modules(commands.__path__)):
    importlib.import_module(f"{commands.__name__}.{_mod}").register(app)


def _exception_families() -> tuple[
    tuple[type[BaseException], ...], tuple[type[BaseException], ...], tuple[type[BaseException], ...]
]:
    """(usage errors, exits, aborts) of every click flavour this typer may raise.

    typer < 0.29 raises click's own classes; typer >= 0.29 raises those of its vendored
    copy (``typer._click``), which share no base class with click's. Catch both, so a
    usage error is one line whatever typer a fresh install resolves to.
    """
    usage: list[type[BaseException]] = []
    exits: list[type[BaseException]] = [typer.Exit]
    aborts: list[type[BaseException]] = [typer.Abort]
    for name in ("click.exceptions", "typer._click.exceptions"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        usage += [c for c in (getattr(mod, "ClickException", None),) if c is not None]
        exits += [c for c in (getattr(mod, "Exit", None),) if c is not None]
        aborts += [c for c in (getattr(mod, "Abort", None),) if c is not None]
    return tuple(usage), tuple(exits), tuple(aborts)


def _usage_line(exc: BaseException) -> str:
    """One line: the command path, click's message, and where to find help."""
    message = " ".join(str(exc.format_message()).split())  # type: ignore[attr-defined]
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None) or "poetc"
    return f"error: {path}: {message} (see '{path} --help')"


def main(argv: list[str] | None = None, *, started: float | None = None) -> int:
    """Run one command; returns the process exit code. ``started``: the
    ``time.perf_counter()`` instant the command started, which ``--time-limit`` counts
    from (the console script passes its process's start; default: now)."""
    global _debug_flag
    _debug_flag = False
    usage, exits, aborts = _exception_families()
    try:
        with command_from(time.perf_counter() if started is None else started):
            result = app(args=argv, standalone_mode=False, prog_name="poetc")
    except PoetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except exits as exc:  # raised by commands that set their own exit code, and by --help
        return int(getattr(exc, "exit_code", 0) or 0)
    except aborts:
        print("aborted", file=sys.stderr)
        return 130
    except usage as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare ``poetc``/``poetc sweep``: the help text
            print(exc.format_message(), file=sys.stderr)  # type: ignore[attr-defined]
            return 2
        print(_usage_line(exc), file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the top level: anything unexpected is a bug, in one line
        return _internal(exc)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main(started=process_started()))


def run() -> None:
    """Console-script wrapper: ``sys.exit(main())``, the command started with the process.

    The objects left at exit are frozen out of the collector first: the interpreter's
    teardown then skips collecting them, which took 1.0 s of a 20 s ``--time-limit`` after
    a compile of gpt2_large (0.15 s frozen; the limit bounds the command's wall time)."""
    code = main(started=process_started())
    gc.freeze()
    sys.exit(code)
