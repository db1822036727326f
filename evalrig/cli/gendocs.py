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


def render() -> str:
    parts = [
        "# evalrig command-line reference",
        "",
        f"Generated from every command's `--help` by `{REGENERATE}`; do not edit by hand.",
        "Exit codes are those of DESIGN §9: 0 success, 1 keep the champion / not approved, "
        "2 usage error, 3 block, 4 invalid input, 5 incomplete, 6 internal error, 130 interrupted.",
        "",
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
