"""Words for people: a count with its noun in the right number ("1 task", "2 tasks"), and text
others wrote made safe to print."""

from __future__ import annotations

from evalrig.core.untrusted import escaped


def count(n: int | None, noun: str, plural: str | None = None) -> str:
    """`n` and `noun`, the noun plural unless n is 1 (`plural` where adding "s" is wrong)."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


LINE_MAX = 240


def shown(text: str) -> str:
    """Text an agent, a verifier or a person wrote, safe on a terminal: on one line, control,
    format and separator characters escaped (core/untrusted.py: no escape sequence reaches the
    screen), cut at LINE_MAX characters."""
    safe = escaped(text.rstrip())
    return safe if len(safe) <= LINE_MAX else safe[:LINE_MAX] + "…"
