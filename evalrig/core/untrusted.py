"""Untrusted text made safe to show: one place for every reader (docs/security.md, "Untrusted
text in the files a person reads").

Untrusted text is anything an agent, a driver or a checkpoint wrote (a checkpoint's `name`,
its answers, file names, model names, hosts it reached) and the free text people give the rig
(a sign-off's `by` and `reason`). Wherever it is shown (a terminal, the HTML report, the
verdict file, comparison.md) every character of the Unicode categories Cc, Cf, Zl and Zp
(controls, bidirectional marks and overrides, zero-width characters, line and paragraph
separators), and the surrogates, private-use and unassigned code points besides, is shown as
its escape: `\\n`, `\\r`, `\\t`, `\\xNN`, `\\uNNNN` or `\\UNNNNNNNN`. So a terminal escape is
seen, not obeyed, and a right-to-left override cannot reorder what a person signs.

In Markdown the text is also never markup: `md_code` puts it in one code span (no link, image,
HTML or entity is read inside one), and `md_line` makes a sentence of the rig's that quotes
such text inert where a code span would hide the sentence's own words.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})
"""The Unicode categories shown as escapes wherever untrusted text is shown."""

_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


# Runs of the characters that might be escaped: ASCII controls and everything beyond ASCII.
# A run that is printable (str.isprintable: no character of ESCAPED_CATEGORIES) is kept
# whole; only the others are looked up one by one. So text is scanned at C speed.
_MAYBE = re.compile("[\x00-\x1f\x7f-\U0010ffff]+")
_MAYBE_BUT_NEWLINE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\U0010ffff]+")
_MAYBE_IN_JSON = re.compile("[\x7f-\U0010ffff]+")  # JSON escapes the C0 controls itself


def _runs(pattern: re.Pattern[str], text: str, escape: Callable[[str], str]) -> str:
    def run(m: re.Match[str]) -> str:
        r = m.group(0)
        return r if r.isprintable() else "".join(escape(c) if is_escaped(c) else c for c in r)

    return pattern.sub(run, text)


def escape_char(c: str) -> str:
    """One character as its escape: `\\n`, `\\r`, `\\t`, `\\xNN` below U+0100, `\\uNNNN` in
    the basic plane, `\\UNNNNNNNN` beyond it."""
    if c in _SHORT:
        return _SHORT[c]
    code = ord(c)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def is_escaped(c: str) -> bool:
    """Whether `c` is shown as its escape (its category is one of ESCAPED_CATEGORIES)."""
    return unicodedata.category(c) in ESCAPED_CATEGORIES


def escaped(text: str, newlines: bool = False) -> str:
    """`text` with every character of ESCAPED_CATEGORIES shown as its escape; newlines are
    kept as they are where `newlines` asks (a multi-line answer, a transcript)."""
    return _runs(_MAYBE_BUT_NEWLINE if newlines else _MAYBE, text, escape_char)


def md_code(text: str) -> str:
    """`text` as one Markdown code span on one line: backslashes shown doubled, newlines and
    every character of ESCAPED_CATEGORIES as escapes, delimited by a backtick run longer than
    any inside, padded with a space where the text begins or ends with a backtick or a space
    (CommonMark strips exactly one space each side); empty text is a span of one space. Inside a code span nothing is a link, an
    image, HTML or an entity. In a table cell a `|` still ends the cell: the table writer
    escapes it (GFM reads `\\|` as `|`, inside a code span too)."""
    body = "".join("\\\\" if c == "\\" else escape_char(c) if is_escaped(c) else c for c in text)
    if not body:
        return "` `"
    run = max((len(m) for m in re.findall(r"`+", body)), default=0)
    fence = "`" * (run + 1)
    pad = " " if body[:1] in ("`", " ") or body[-1:] in ("`", " ") else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def json_escaped(text: str) -> str:
    """JSON text with every character of ESCAPED_CATEGORIES written as its `\\uNNNN` escape
    (a surrogate pair beyond the basic plane): the same JSON, read by any parser as the same
    values, but a terminal that shows it meets no bidirectional override or zero-width
    character (JSON already escapes the C0 controls; such characters occur only inside
    strings, where an escape means the character itself)."""
    def one(c: str) -> str:
        code = ord(c)
        if code <= 0xFFFF:
            return f"\\u{code:04x}"
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"

    return _runs(_MAYBE_IN_JSON, text, one)


# What opens markup in a sentence: a backslash escape, a code span, a link or image (`[`),
# raw HTML or an autolink (`<` before a letter, `/`, `!` or `?`), an entity (`&` before a
# letter, a digit or `#`).
_MD_ACTIVE = re.compile(r"[\\`\[]|<(?=[A-Za-z/!?])|&(?=[A-Za-z0-9#])")


def md_line(text: str) -> str:
    """A sentence of the rig's that may quote untrusted text, inert in Markdown but still
    read as words: one line, every character that could open markup backslash-escaped (a
    backslash shows doubled, as in `md_code`), characters of ESCAPED_CATEGORIES shown as
    escapes (whose backslash is escaped in turn, so that it shows), and bare web addresses broken (`:\\/\\/`, `www\\.`) so that no
    renderer makes them links. Words such as `p <= 0.025` are left as they read."""
    line = _MD_ACTIVE.sub(lambda m: "\\\\\\\\" if m.group(0) == "\\" else "\\" + m.group(0), text)
    line = "".join("\\" + escape_char(c) if is_escaped(c) else c for c in line)
    return re.sub(r"(?i)(www)\.", r"\1\\.", line.replace("://", ":\\/\\/"))
