"""Words for people: a count with its noun in the right number ("1 task", "2 tasks")."""

from __future__ import annotations


def count(n: int | None, noun: str, plural: str | None = None) -> str:
    """`n` and `noun`, the noun plural unless n is 1 (`plural` where adding "s" is wrong)."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"
