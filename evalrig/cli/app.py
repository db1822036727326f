"""The typer app, the options every command shares, and the one place errors become exits.

Commands live in `cmd_*.py` beside this file; each parses its options, makes one library
call, renders the result and returns an exit code. Nothing outside `evalrig.cli` imports
typer or rich.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import os
import signal
import sys
import threading
import traceback
import typing
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

# The rig uses no pydantic plugins; looking for them scans every installed package's entry
# points on the first validation (~50 ms of every command's start-up).
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

import typer  # noqa: E402
from typer._click import core as click_core  # noqa: E402  # typer's own copy of click
from typer._click import exceptions as click_exceptions  # noqa: E402
from typer._click import globals as click_globals  # noqa: E402
from typer.core import TyperGroup  # noqa: E402

from evalrig import __version__  # noqa: E402
from evalrig.core.errors import EvalrigError, ExitCode  # noqa: E402


def help_markup() -> Any:
    """Rich help only for a person at a colour terminal, plain otherwise (as for output,
    docs/cli.md); plain help also spares importing rich's markdown stack (~0.2 s)."""
    return "rich" if sys.stdout.isatty() and "NO_COLOR" not in os.environ else None


QUIET_KEY = "evalrig.quiet"
"""Where the context (shared by the root and its command) says --quiet was given."""


def json_asked(args: Sequence[str]) -> bool:
    """`--json` among the arguments before a `--` (which ends the options)."""
    args = list(args)
    return "--json" in (args[: args.index("--")] if "--" in args else args)


class EvalrigGroup(TyperGroup):
    """The root command: `--version [--json]`, and usage errors as JSON under --json.

    A usage error (an unknown flag, a missing argument, a value out of range) is raised by
    click while it parses, before any command runs; under --json the same error object as
    every other failure's goes to stdout (docs/cli.md "Machine-readable output"), and
    click's own message still goes to stderr. The exit code stays 2.
    """

    def make_context(self, info_name: str | None, args: list[str], parent: click_core.Context | None = None,
                     **extra: Any) -> click_core.Context:
        argv = list(args)
        try:
            ctx = super().make_context(info_name, args, parent=parent, **extra)
        except click_exceptions.UsageError as e:
            report_usage_error(e, argv)
            raise
        ctx.meta["evalrig.argv"] = argv
        return ctx

    def invoke(self, ctx: click_core.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click_exceptions.UsageError as e:
            report_usage_error(e, ctx.meta.get("evalrig.argv", []))
            raise

    def parse_args(self, ctx: click_core.Context, args: list[str]) -> list[str]:
        rest = super().parse_args(ctx, args)
        if ctx.params.get("version"):
            print_version(bool(ctx.params.get("json_out")))
            ctx.exit(0)
        return rest


def report_usage_error(e: click_exceptions.UsageError, argv: Sequence[str]) -> None:
    if not json_asked(argv) or getattr(e, "evalrig_reported", False):
        return
    e.evalrig_reported = True  # type: ignore[attr-defined]  # once, though two levels see it
    param = getattr(e, "param", None)
    command_path = e.ctx.command_path if e.ctx is not None else "evalrig"
    emit_json(error_object(EvalrigError(
        e.format_message(), ExitCode.USAGE,
        field=None if param is None else param.opts[0] if param.param_type_name == "option"
        else (param.name or "").upper(),
        hint=f"see `{command_path} --help`",
    )))


app = typer.Typer(
    name="evalrig",
    cls=EvalrigGroup,
    rich_markup_mode=help_markup(),
    help=(
        "Decide, by measuring, whether a candidate agent build may replace the champion.\n\n"
        "Example:  evalrig validate --tasks tasks --policies policies"
    ),
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# Shared options: spelled once, used by every command.
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
DebugOpt = Annotated[bool, typer.Option("--debug", help="Show tracebacks of internal errors.")]
LogOpt = Annotated[Path | None, typer.Option(
    "--log", metavar="<file>", help="The release log (default $EVALRIG_HOME/releases.jsonl).")]
HomeKeyOpt = Annotated[str | None, typer.Option(
    "--home-key", metavar="<fpr>", envvar="EVALRIG_HOME_KEY",
    help="The home key's fingerprint (`evalrig key`) the release flow pinned: another key is refused (exit 4).")]
QuietOpt = Annotated[bool, typer.Option(
    "--quiet", "-q", help="Only the result: no progress, no detail lines (errors and warnings still show).")]


def print_version(json_out: bool) -> None:
    import platform

    if json_out:
        emit_json({"name": "evalrig", "version": __version__, "python": platform.python_version()})
    else:
        typer.echo(f"evalrig {__version__}")


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version (with --json: as JSON).")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output, for every command.")] = False,
    quiet: QuietOpt = False,
) -> None:
    """Decide, by measuring, whether a candidate agent build may replace the champion."""


ROOT_FLAGS = frozenset({"--json", "--quiet", "-q"})
"""The root's options a command may follow (none takes a value)."""


def only_the_command_run(argv: Sequence[str]) -> typer.Typer:
    """`app` with only the command `argv` runs, when it names one; `app` itself otherwise.

    Typer makes a click command of every registered function (their signatures read, their
    annotations evaluated) before it parses anything: 40 ms of each start-up, of which a run
    needs one command's share. Anything else (root help, no command, a name that is no
    command and must be answered with the close ones) gets the whole app."""
    name = next((a for a in argv if a not in ROOT_FLAGS), None)
    if name is None or name.startswith("-"):
        return app
    commands = [c for c in app.registered_commands if c.name == name]
    groups = [g for g in app.registered_groups if g.typer_instance and g.typer_instance.info.name == name]
    if not commands and not groups:
        return app
    one = copy.copy(app)  # the same settings and root callback; its own lists
    one.registered_commands = commands
    one.registered_groups = groups
    return one


def quiet() -> bool:
    """--quiet was given, to the root or to the running command."""
    ctx = click_globals.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get(QUIET_KEY))


F = TypeVar("F", bound=Callable[..., Any])


def command(name: str, example: str, on: typer.Typer | None = None) -> Callable[[F], F]:
    """Register `fn` as a command (of `app`, or of the group `on`) whose return value is its
    exit code.

    Every EvalrigError becomes its message on stderr and its exit code; anything else is
    an internal error (exit 6), with a traceback only under --debug. Every command also
    takes --quiet, and a --json or --quiet given before the command counts as given to it.
    """

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> None:
            settings = root_settings(bool(kwargs.pop("quiet", False)))
            if "json_out" in kwargs:
                kwargs["json_out"] = bool(kwargs["json_out"]) or settings.json_out
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
            except Exception as e:  # noqa: BLE001 - the CLI catches everything (docs/release-flow.md)
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

        with_quiet_option(wrapper, fn)
        doc = help_text(fn.__doc__ or "")
        # "\b" keeps click's plain formatter from re-wrapping the example: a command broken
        # over two lines is no longer one that runs when pasted. Rich help keeps lines as
        # written and would show the "\b" as a blank line.
        keep_line = "" if app.rich_markup_mode else "\b\n"
        (on or app).command(name, help=f"{doc}\n\nExample:\n\n{keep_line}    {example}", epilog=None)(wrapper)
        return fn

    return deco


def with_quiet_option(wrapper: Callable[..., Any], fn: Callable[..., Any]) -> None:
    """Give the wrapper of `fn` a `quiet` parameter, so that typer adds --quiet to every
    command without each one declaring it."""
    sig = inspect.signature(fn, eval_str=True)
    quiet_param = inspect.Parameter("quiet", inspect.Parameter.KEYWORD_ONLY, default=False,
                                    annotation=QuietOpt)
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
              else p for p in sig.parameters.values()]
    wrapper.__signature__ = sig.replace(parameters=[*params, quiet_param])  # type: ignore[attr-defined]
    wrapper.__annotations__ = {**fn.__annotations__, "quiet": QuietOpt}


class RootSettings(typing.NamedTuple):
    json_out: bool
    quiet: bool


def root_settings(command_quiet: bool) -> RootSettings:
    """What the root was given (`evalrig --json --quiet CMD`), merged with the command's
    --quiet and recorded for `say` and the progress display to read."""
    ctx = click_globals.get_current_context(silent=True)
    if ctx is None:
        return RootSettings(False, command_quiet)
    root = ctx.find_root().params
    settings = RootSettings(bool(root.get("json_out")), command_quiet or bool(root.get("quiet")))
    ctx.meta[QUIET_KEY] = settings.quiet
    return settings


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (kill, a CI timeout) ends a command as Ctrl-C does: exit 130 with a message
    (docs/release-flow.md "Exit codes") rather than a silent 143. `run` installs its own handlers inside this."""
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
    from evalrig.core.untrusted import escaped

    sys.stderr.write(escaped(message.rstrip("\n"), newlines=True) + "\n")
    sys.stderr.flush()


def report_error(e: EvalrigError, json_out: bool, debug: bool) -> None:
    if debug:
        traceback.print_exc()
    err("error: " + e.render())
    if json_out:
        emit_json(error_object(e))


def error_object(e: EvalrigError) -> dict[str, Any]:
    """The JSON every failure prints on stdout under --json (docs/cli.md)."""
    return {
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


def emit_json(obj: Any) -> None:
    from evalrig.core.digest import pretty_json
    from evalrig.core.untrusted import json_escaped

    # the same JSON; no raw bidi override or zero-width character from a value reaches a terminal
    sys.stdout.buffer.write(json_escaped(pretty_json(obj).decode("utf-8")).encode("utf-8"))
    sys.stdout.flush()


def is_terminal() -> bool:
    return sys.stdout.isatty()


def use_color() -> bool:
    return is_terminal() and "NO_COLOR" not in os.environ


def console() -> Any:
    """A rich console for stdout (imported lazily: start-up time matters)."""
    from rich.console import Console

    return Console(no_color="NO_COLOR" in os.environ, highlight=False)


def say(lines: Iterable[str] | str, style: str | None = None, result: int = 1) -> None:
    """Human output on stdout: plain text (no markup), styled only on a colour terminal.

    The first `result` lines are the result (a verdict, a run's status, `ok: ...`, a
    listing); the lines after them are detail, which --quiet leaves out.
    """
    from evalrig.core.untrusted import escaped

    # the last guard: no escape sequence or bidi override reaches the terminal, whatever a
    # command quotes (sites that quote untrusted text escape it on one line, words.shown)
    lines = [escaped(line, newlines=True) for line in ([lines] if isinstance(lines, str) else lines)]
    if quiet():
        lines = lines[:result]
    if use_color():
        c = console()
        for line in lines:
            c.print(line, style=style, markup=False, soft_wrap=True)
    else:
        for line in lines:
            sys.stdout.write(line + "\n")
        sys.stdout.flush()
