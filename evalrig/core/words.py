"""Words for people: a count with its noun in the right number ("1 task", "2 tasks"), and text
others wrote made safe to print."""

from __future__ import annotations


def count(n: int | None, noun: str, plural: str | None = None) -> str:
    """`n` and `noun`, the noun plural unless n is 1 (`plural` where adding "s" is wrong)."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


LINE_MAX = 240


def shown(text: str) -> str:
    """Text an agent, a verifier or a person wrote, safe on a terminal: control characters
    escaped (no escape sequence reaches the screen), cut at LINE_MAX characters."""
    safe = "".join(c if c.isprintable() or c == "\t" else f"\\x{ord(c):02x}" for c in text.rstrip())
    return safe if len(safe) <= LINE_MAX else safe[:LINE_MAX] + "…"
