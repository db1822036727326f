"""The typer app, the options every command shares, and the one place errors become exits.

Commands live in `cmd_*.py` beside this file; each parses its options, makes one library
call, renders the result and returns an exit code. Nothing outside `evalrig.cli` imports
typer or rich.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator
from typing import Annotated, Any, TypeVar

# The rig uses no pydantic plugins; looking for them scans every installed package's entry
# points on the first validation (~50 ms of every command's start-up).
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

import typer  # noqa: E402

from evalrig import __version__  # noqa: E402
from evalrig.core.errors import EvalrigError, ExitCode  # noqa: E402


def _help_markup() -> Any:
    """Rich help only for a person at a colour terminal, plain otherwise (as for output,
    docs/cli.md); plain help also spares importing rich's markdown stack (~0.2 s)."""
    return "rich" if sys.stdout.isatty() and "NO_COLOR" not in os.environ else None


app = typer.Typer(
    name="evalrig",
    rich_markup_mode=_help_markup(),
    help=(
        "Decide, by measuring, whether a candidate agent build may replace the champion.\n\n"
        "Example:  evalrig validate --tasks tasks --policies policies"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# Shared options: spelled once, used by every command.
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
DebugOpt = Annotated[bool, typer.Option("--debug", help="Show tracebacks of internal errors.")]


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"evalrig {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version_callback, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Decide, by measuring, whether a candidate agent build may replace the champion."""


F = TypeVar("F", bound=Callable[..., Any])


def command(name: str, example: str) -> Callable[[F], F]:
    """Register `fn` as a command whose return value is its exit code.

    Every EvalrigError becomes its message on stderr and its exit code; anything else is
    an internal error (exit 6), with a traceback only under --debug.
    """

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> None:
            debug = bool(kwargs.get("debug"))
            json_out = bool(kwargs.get("json_out"))
            try:
                with sigterm_as_interrupt():
                    code = fn(*args, **kwargs)
            except typer.Exit:
                raise
            except EvalrigError as e:
                report_error(e, json_out, debug)
                raise typer.Exit(int(e.code)) from None
            except KeyboardInterrupt:
                err("interrupted: nothing more was done; run the same command again")
                raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
            except Exception as e:  # noqa: BLE001 - the CLI catches everything: a bug is exit 6, never a traceback
                if isinstance(e, BrokenPipeError) and stdout_reader_gone():
                    report_closed_stdout()
                    raise typer.Exit(int(ExitCode.INTERNAL)) from None
                if debug:
                    traceback.print_exc()
                err(
                    f"internal error: {type(e).__name__}: {e}\n"
                    "  -> this is a bug in evalrig; rerun with --debug for the traceback. "
                    "Bundles written so far are intact and resumable."
                )
                raise typer.Exit(int(ExitCode.INTERNAL)) from None
            raise typer.Exit(int(code or 0))

        doc = help_text(fn.__doc__ or "")
        # "\b" keeps click's plain formatter from re-wrapping the example: a command broken
        # over two lines is no longer one that runs when pasted. Rich help keeps lines as
        # written and would show the "\b" as a blank line.
        keep_line = "" if app.rich_markup_mode else "\b\n"
        app.command(name, help=f"{doc}\n\nExample:\n\n{keep_line}    {example}", epilog=None)(wrapper)
        return fn

    return deco


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (kill, a CI timeout) ends a command as Ctrl-C does: exit 130 with a message
    (docs/release-flow.md, "Exit codes") rather than a silent 143. `run` installs its own handlers inside this."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def stdout_reader_gone() -> bool:
    """True when stdout is a pipe whose reader has exited (`evalrig schema | head -1`)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):  # no real file descriptor (an in-process test runner)
        return False


def report_closed_stdout() -> None:
    """Say so without calling it a bug, and point stdout at /dev/null so that the
    interpreter's last flush does not fail a second time with a traceback."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    err("error: stdout was closed before all the output was written (the reader of the pipe exited)\n"
        "  -> nothing else failed: what the command wrote to files is intact; to keep the whole "
        "output, send it to a file")


def help_text(docstring: str) -> str:
    """A docstring as help: dedented, each paragraph on one line so that the help
    formatter wraps it to the terminal (indented paragraphs are kept as written)."""
    import inspect

    paragraphs = inspect.cleandoc(docstring).split("\n\n")
    return "\n\n".join(
        p if p.startswith(" ") else " ".join(line.strip() for line in p.splitlines())
        for p in paragraphs
    )


def err(message: str) -> None:
    sys.stderr.write(message.rstrip("\n") + "\n")
    sys.stderr.flush()


def report_error(e: EvalrigError, json_out: bool, debug: bool) -> None:
    if debug:
        traceback.print_exc()
    err("error: " + e.render())
    if json_out:
        emit_json(
            {
                "error": {
                    "code": int(e.code),
                    "message": e.message,
                    "file": e.file,
                    "field": e.field,
                    "line": e.line,
                    "hint": e.hint,
                    "problems": [p.as_dict() for p in e.problems],
                }
            }
        )


def emit_json(obj: Any) -> None:
    from evalrig.core.digest import pretty_json

    sys.stdout.buffer.write(pretty_json(obj))
    sys.stdout.flush()


def is_terminal() -> bool:
    return sys.stdout.isatty()


def use_color() -> bool:
    return is_terminal() and "NO_COLOR" not in os.environ


def console() -> Any:
    """A rich console for stdout (imported lazily: start-up time matters)."""
    from rich.console import Console

    return Console(no_color="NO_COLOR" in os.environ, highlight=False)


def say(lines: Iterable[str] | str, style: str | None = None) -> None:
    """Human output on stdout: plain text (no markup), styled only on a colour terminal."""
    if isinstance(lines, str):
        lines = [lines]
    if use_color():
        c = console()
        for line in lines:
            c.print(line, style=style, markup=False, soft_wrap=True)
    else:
        for line in lines:
            sys.stdout.write(line + "\n")
        sys.stdout.flush()
