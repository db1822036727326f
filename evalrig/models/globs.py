"""The evidence globs of task.toml (docs/attempts.md, "Evidence"): `/`-separated, `**` any
number of segments, `*` and `?` within one. A pattern is checked when the task is read and
matched when the evidence is taken, by the same regex."""

from __future__ import annotations

import re


def glob_regex(pattern: str) -> re.Pattern[str] | None:
    """A regex for a `/`-separated glob: `**` any number of segments, `*` and `?` within one.

    None for a pattern that could reach outside the attempt root (absolute, `..`).
    """
    parts = pattern.strip("/").split("/") if pattern else []
    if not parts or pattern.startswith("/") or ".." in parts:
        return None
    out = ""
    for i, seg in enumerate(parts):
        last = i == len(parts) - 1
        if seg == "**":
            out += ".*" if last else "(?:[^/]+/)*"
            continue
        out += segment_regex(seg) + ("" if last else "/")
    return re.compile(out)


def segment_regex(seg: str) -> str:
    piece = ""
    j = 0
    while j < len(seg):
        c = seg[j]
        if c == "*":
            piece += "[^/]*"
        elif c == "?":
            piece += "[^/]"
        elif c == "[":
            end = seg.find("]", j + 1)
            if end == -1:
                piece += re.escape(c)
            else:
                body = seg[j + 1 : end]
                if body.startswith("!"):
                    body = "^" + body[1:]
                piece += "[" + body.replace("\\", "\\\\") + "]"
                j = end
        else:
            piece += re.escape(c)
        j += 1
    return piece
