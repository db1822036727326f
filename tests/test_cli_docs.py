"""docs/cli.md is generated from every command's --help and must not go stale."""

from __future__ import annotations

from evalrig.cli.gendocs import DOC, REGENERATE, command_names, render


def test_cli_reference_is_current() -> None:
    assert DOC.exists(), f"{DOC} is missing: run `{REGENERATE}` and commit it"
    assert DOC.read_text(encoding="utf-8") == render(), (
        f"{DOC} is stale (a command or its help changed): run `{REGENERATE}` and commit it")


def test_every_command_is_in_the_reference() -> None:
    text = render()
    for name in command_names():
        assert f"\n## evalrig {name}\n" in text
        assert f"Usage: evalrig {name} " in text


def test_reference_is_plain_and_fixed_width() -> None:
    text = render()
    assert "\x1b[" not in text  # no colour codes
    assert "╭" not in text  # no rich boxes
    assert max(len(line) for line in text.splitlines() if not line.startswith(("Generated", "Exit"))) <= 100
