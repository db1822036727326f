"""Untrusted text made safe to show (docs/reading.md, "Untrusted text"): whatever an agent or
a driver wrote may hold terminal escapes, carriage returns that overwrite a line, or
bidirectional controls; each such character is shown as its escape (`\\x1b`, `\\r`), as
core/untrusted.py says for every reader. The text is never read as rich markup: renderers
print it as plain text."""

from __future__ import annotations

from evalrig.core.untrusted import escaped

TAIL_BYTES = 4096
TAIL_LINES = 12


def untrusted(s: str | None, newlines: bool = True) -> str | None:
    """`s` with every control or format character escaped; newlines kept where asked."""
    return None if s is None else escaped(s, newlines)


def decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def tail(data: bytes, lines: int = TAIL_LINES) -> str:
    """The last `lines` lines of a stream's bytes, escaped."""
    text = decode(data[-TAIL_BYTES:]).rstrip("\n")
    return untrusted("\n".join(text.split("\n")[-lines:])) or ""


def short(s: str, n: int = 120) -> str:
    """One line of at most `n` characters, escaped."""
    one = untrusted(s, newlines=False) or ""
    return one if len(one) <= n else one[: n - 1] + "…"
