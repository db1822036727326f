"""Generate docs/cli.md from every command's --help: `python -m evalrig.cli.gendocs`.

`--check` exits 1 when docs/cli.md is stale (tests/test_cli_docs.py runs the same check).
The help is rendered plain (typer's rich boxes off, no colour) at a fixed width, so the
file is the same on every machine. Commands are found on the typer app, so a command
another module registers appears here without any change to this file.
"""

from __future__ import annotations

import sys
from pathlib import Path

WIDTH = 100
DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
REGENERATE = "python -m evalrig.cli.gendocs"


def command_names() -> list[str]:
    """Every command, those of a group as "group command" (`init task`) after the group."""
    from evalrig.cli import app

    names = [c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands]
    for group in app.registered_groups:
        sub = group.typer_instance
        if sub is None:
            continue
        names.append(group.name or sub.info.name or "")
        names += [f"{names[-1]} {c.name}" for c in sub.registered_commands if c.name]
    return sorted(n for n in names if n)


def help_of(args: list[str]) -> str:
    """The plain --help text of `evalrig ARGS`."""
    import typer.core
    from typer.testing import CliRunner

    from evalrig.cli import app

    saved = typer.core.HAS_RICH
    typer.core.HAS_RICH = False  # read at call time: plain click-style help, no boxes
    try:
        result = CliRunner().invoke(
            app, [*args, "--help"], prog_name="evalrig", env={"NO_COLOR": "1", "COLUMNS": str(WIDTH)},
            terminal_width=WIDTH, max_content_width=WIDTH,
        )
    finally:
        typer.core.HAS_RICH = saved
    if result.exit_code != 0:
        raise RuntimeError(f"evalrig {' '.join(args)} --help exited {result.exit_code}: {result.output}")
    return "\n".join(line.rstrip() for line in result.output.strip("\n").splitlines())


GUIDE = """\
## What every command shares

- `--json`: machine-readable output on stdout. A failure prints
  `{"error": {"code", "message", "file", "field", "line", "hint", "problems"}}` on stdout
  instead (and the human message on stderr); a usage error too (an unknown flag, a missing
  argument, a value out of range: `code` 2, `field` the option or argument, `hint` the
  `--help` to read). `evalrig --json CMD ...` is the same as `evalrig CMD ... --json`.
- `--quiet` / `-q`: only the result. No progress display, and of the human output only
  the line that says what happened (`run ...: complete`, the verdict, `ok: ...`, `sealed:
  ...`) or, for `tasks`, the listing. Errors and warnings on stderr, the exit code and
  `--json` output are never suppressed. Given before the command (`evalrig -q run ...`) or
  after it.
- `--debug`: the traceback of an internal error (exit 6).
- `evalrig --version` prints `evalrig X.Y.Z`; with `--json`,
  `{"name": "evalrig", "version": ..., "python": ...}`.

## Shell completion

Commands, options and their choices (`--sandbox <TAB>`, `--suite <TAB>`) complete in bash,
zsh, fish and PowerShell:

```sh
.venv/bin/evalrig --install-completion   # detects your shell, adds the script to its start-up file
.venv/bin/evalrig --show-completion      # prints the script instead, to install by hand
```

Open a new shell afterwards. The shell is found from the processes above the command: to
get another shell's script, run it from that shell (`zsh -c 'evalrig --show-completion'`).
Completion is keyed on the command name `evalrig`: put `.venv/bin` on `PATH`, or, in bash,
complete `./eval.sh` with the same function (eval.sh passes the request through):
`complete -o default -F _evalrig_completion ./eval.sh`.

## Starting a task set and an agent

`evalrig init task NAME [--tasks DIR] [--suite fixed|fresh|invariant]` and
`evalrig init checkpoint DIR [--name NAME]` write files that pass `evalrig validate` as
written, with every field spelled out at its default and a comment saying what it does
(a fresh task gets `created_at` = now; the verifier is `exact` with a placeholder answer;
the checkpoint's `agent.py` reads the prompt and writes an answer). They never overwrite:
an existing task of that name in any suite, or an existing `checkpoint.toml` or `agent.py`,
is refused with exit 4 naming the path. `evalrig tasks` lists what a task set holds; the
ids it prints are those `run --task` takes, and an id that names no task is refused (exit 4)
with the nearest ids and a pointer to `evalrig tasks`.
"""


def render() -> str:
    parts = [
        "# evalrig command-line reference",
        "",
        f"Generated from every command's `--help` by `{REGENERATE}`; do not edit by hand.",
        "Exit codes (docs/release-flow.md says what a script should do on each): 0 success, 1 keep the champion / not approved, "
        "2 usage error, 3 block, 4 invalid input, 5 incomplete, 6 internal error, 130 interrupted.",
        "",
        GUIDE,
        "## evalrig",
        "",
        "```text",
        help_of([]),
        "```",
    ]
    for name in command_names():
        parts += ["", f"## evalrig {name}", "", "```text", help_of(name.split()), "```"]
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = render()
    if "--check" in argv:
        if not DOC.exists() or DOC.read_text(encoding="utf-8") != text:
            sys.stderr.write(f"{DOC} is stale: run `{REGENERATE}` and commit it\n")
            return 1
        return 0
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text, encoding="utf-8")
    sys.stdout.write(f"wrote {DOC}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
