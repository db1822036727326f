"""Capturing an agent's output streams: canary scanning, redaction and the output cap.

Three jobs, each done incrementally so that a stream of any length passes through the
rig in bounded memory (docs/attempts.md, Limits and The canary):

- `StreamScanner` looks for canary values in the *complete* stream (before capping), in
  plain, base64 (standard and URL-safe, at all three byte alignments, inside longer
  base64 text) and hex (lower and upper case) form, the encoded forms also when wrapped
  or spaced out. `scan()` does the same for a whole buffer (evidence files).
- `Redactor` replaces secret values by ``[REDACTED:NAME]`` in what is kept, also when a
  value is split across two reads.
- `CappedSink` keeps at most N bytes of the redacted stream in a file, counts the rest
  and says whether anything was dropped.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

# A base64 fragment shorter than this would match ordinary text by chance.
_MIN_FRAGMENT = 4


def _base64_fragments(needle: bytes) -> list[bytes]:
    """The base64 text that `needle` produces wherever it sits in a longer encoded blob.

    Base64 maps 3 bytes to 4 characters, so the needle's encoding depends on its offset
    modulo 3 in the encoded data. For each offset we keep only the characters whose 6 bits
    all come from the needle (the edge characters also carry neighbouring bytes).
    """
    fragments: list[bytes] = []
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + needle)
        first = -(-8 * offset // 6)  # ceil: the first character made of needle bits only
        last = (8 * offset + 8 * len(needle)) // 6  # one past the last such character
        for variant in (encoded, encoded.translate(bytes.maketrans(b"+/", b"-_"))):
            fragment = variant[first:last]
            if len(fragment) >= _MIN_FRAGMENT and fragment not in fragments:
                fragments.append(fragment)
    return fragments


def encoded_forms(needle: bytes) -> list[bytes]:
    """Every byte string whose presence means `needle` leaked: plain, hex, base64."""
    if not needle:
        return []
    forms = [needle, needle.hex().encode(), needle.hex().upper().encode()]
    forms += _base64_fragments(needle)
    unique: list[bytes] = []
    for form in forms:
        if form not in unique:
            unique.append(form)
    return unique


def _all_forms(needles: Sequence[bytes]) -> list[bytes]:
    forms: list[bytes] = []
    for needle in needles:
        for form in encoded_forms(needle):
            if form not in forms:
                forms.append(form)
    return forms


# Encoders wrap their output (`base64` at 76 columns, `xxd -p` at 60) or space it out
# (`65 76 61`): the encoded forms are also looked for with this whitespace taken out.
_WHITESPACE = b" \t\r\n"
_WHITESPACE_BYTES = [bytes([b]) for b in _WHITESPACE]


def _encoded_only(needles: Sequence[bytes]) -> list[bytes]:
    plain = set(needles)
    return [form for form in _all_forms(needles) if form not in plain]


def scan(data: bytes, needles: Sequence[bytes]) -> bool:
    """Whether any needle occurs in `data` in plain, base64 or hex form.

    The base64 and hex forms are also found when whitespace or line breaks are
    interspersed (wrapped encoder output).
    """
    if any(form in data for form in _all_forms(needles)):
        return True
    squeezed = data.translate(None, _WHITESPACE)
    return any(form in squeezed for form in _encoded_only(needles))


class _Window:
    """Finds any of `forms` in a stream fed in chunks, also across chunk boundaries.

    Only the last (longest form − 1) bytes of the previous chunk are kept between feeds,
    so memory stays flat whatever the stream's length.
    """

    def __init__(self, forms: list[bytes]) -> None:
        self._forms = forms
        self._overlap = max((len(f) for f in forms), default=1) - 1
        self._tail = b""

    def found_in(self, chunk: bytes) -> bool:
        if not self._forms or not chunk:
            return False
        # A form that straddles the boundary lies within tail + the chunk's head.
        seam = self._tail + chunk[: self._overlap]
        if any(form in seam for form in self._forms) or any(form in chunk for form in self._forms):
            return True
        if self._overlap:
            joined = self._tail + chunk if len(chunk) < self._overlap else chunk
            self._tail = joined[-self._overlap :]
        return False


class StreamScanner:
    """`scan()` over a stream fed in chunks; a needle split across chunks is still found."""

    def __init__(self, needles: Sequence[bytes]) -> None:
        plain = [n for n in dict.fromkeys(needles) if n]
        # An unbroken encoded form survives the squeezing, so it is looked for only there.
        self._raw = _Window(plain)
        self._squeezed = _Window(_encoded_only(plain))
        self._active = bool(plain)
        self.found = False

    def feed(self, chunk: bytes) -> None:
        if self.found or not self._active or not chunk:
            return
        squeezed = chunk
        if any(ws in chunk for ws in _WHITESPACE_BYTES):  # a copy only where it changes
            squeezed = chunk.translate(None, _WHITESPACE)
        self.found = self._raw.found_in(chunk) or self._squeezed.found_in(squeezed)


class Redactor:
    """Replaces secret values by ``[REDACTED:NAME]`` in a stream fed in chunks.

    Up to (longest value − 1) bytes are held back after each feed, since they could be
    the start of a value that the next chunk completes; `flush()` releases them.
    """

    def __init__(self, secrets: Mapping[str, bytes]) -> None:
        values = {value: name for name, value in secrets.items() if value}
        # Longest first, so that a value containing another is replaced whole.
        ordered = sorted(values, key=len, reverse=True)
        self._pattern = re.compile(b"|".join(re.escape(v) for v in ordered)) if ordered else None
        self._replacement = {v: b"[REDACTED:" + n.encode() + b"]" for v, n in values.items()}
        self._hold = max((len(v) for v in ordered), default=1) - 1
        self._carry = b""

    def feed(self, chunk: bytes) -> bytes:
        if self._pattern is None:
            return chunk
        return self._redact(self._carry + chunk, final=False)

    def flush(self) -> bytes:
        if self._pattern is None:
            return b""
        return self._redact(self._carry, final=True)

    def _redact(self, data: bytes, final: bool) -> bytes:
        assert self._pattern is not None
        # A match starting before `cut` is decided: the longest value fits in `data` there.
        cut = len(data) if final else len(data) - self._hold
        out: list[bytes] = []
        pos = 0
        for match in self._pattern.finditer(data):
            if match.start() >= cut:
                break
            out.append(data[pos : match.start()])
            out.append(self._replacement[match.group()])
            pos = match.end()
        keep_from = max(pos, cut, 0)
        out.append(data[pos:keep_from])
        self._carry = data[keep_from:]
        return b"".join(out)


class CappedSink:
    """Writes a redacted stream to `path`, keeping at most `cap` bytes of it.

    `total` counts every byte the process wrote (before redaction and capping);
    `truncated` is true when any byte of the redacted stream was dropped.
    """

    def __init__(self, path: Path, cap: int, secrets: Mapping[str, bytes]) -> None:
        self._file: BinaryIO = open(path, "wb")  # noqa: SIM115 - closed by close()
        self._room = max(cap, 0)
        self._redactor = Redactor(secrets)
        self.total = 0
        self.truncated = False

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if self._room == 0:
            # Full: nothing more is kept, so there is nothing left to redact either.
            self.truncated = self.truncated or bool(chunk)
            return
        self._keep(self._redactor.feed(chunk))

    def close(self) -> None:
        if self._room:
            self._keep(self._redactor.flush())
        elif self._redactor.flush():
            self.truncated = True
        self._file.close()

    def _keep(self, data: bytes) -> None:
        if len(data) > self._room:
            self.truncated = True
            data = data[: self._room]
        self._file.write(data)
        self._room -= len(data)
