"""Capturing an agent's output streams: canary scanning, redaction and the output cap.

Three jobs, each done incrementally so that a stream of any length passes through the
rig in bounded memory (docs/attempts.md, "Limits" and "The canary"):

- `StreamScanner` looks for a needle (the canary's random part, hex text) in the
  *complete* stream (before capping), in every form of `needle_forms`: the text itself
  in any case, reversed, and the base64, base32 and hex forms of the text and of the raw
  bytes it spells, at every alignment inside longer encoded text, also when wrapped or
  spaced out; and inside gzip members found in the stream (decompressed within a byte
  budget). `scan()` does the same for a whole buffer, `seam_found()` for the end of one
  stream followed directly by the start of another (stdout, then stderr). It is a
  heuristic against careless leaks, not a proof: an agent that encrypts the value, or
  spells it out one character a line, is not found.
- `Redactor` replaces secret values by ``[REDACTED:NAME]`` in what is kept, also when a
  value is split across two reads.
- `CappedSink` keeps at most N bytes of the redacted stream in a file, counts the rest
  and says whether anything was dropped.
"""

from __future__ import annotations

import base64
import functools
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

# An encoded fragment shorter than this would match ordinary text by chance.
_MIN_FRAGMENT = 4
# The raw bytes a hex needle spells are looked for as they are only from this length on
# (shorter binary strings turn up in any large file).
_MIN_RAW = 8


def _fragments(needle: bytes, group: int, encode: object) -> list[bytes]:
    """The encoded text `needle` produces wherever it sits in a longer encoded blob.

    An encoding of `group` input bytes per block makes the needle's encoding depend on
    its offset modulo `group` in the encoded data (base64: 3 bytes per 4 characters,
    base32: 5 per 8). For each offset only the characters whose bits all come from the
    needle are kept (the edge characters also carry neighbouring bytes).
    """
    bits = 6 if group == 3 else 5
    out: list[bytes] = []
    for offset in range(group):
        encoded = encode(b"\0" * offset + needle)  # type: ignore[operator]
        first = -(-8 * offset // bits)  # ceil: the first character made of needle bits only
        last = (8 * offset + 8 * len(needle)) // bits  # one past the last such character
        fragment = encoded[first:last]
        if len(fragment) >= _MIN_FRAGMENT and fragment not in out:
            out.append(fragment)
    return out


def _base64_fragments(needle: bytes) -> list[bytes]:
    """Standard and URL-safe base64 of `needle` at its three alignments."""
    out: list[bytes] = []
    for fragment in _fragments(needle, 3, base64.b64encode):
        for variant in (fragment, fragment.translate(bytes.maketrans(b"+/", b"-_"))):
            if variant not in out:
                out.append(variant)
    return out


def _base32_fragments(needle: bytes) -> list[bytes]:
    """Base32 of `needle` at its five alignments, lower-cased (it is looked for folded)."""
    return [f.translate(_FOLD) for f in _fragments(needle, 5, base64.b32encode)]


def encoded_forms(needle: bytes) -> list[bytes]:
    """The byte strings found case-sensitively: the needle, its hex (both cases), base64."""
    if not needle:
        return []
    forms = [needle, needle.hex().encode(), needle.hex().upper().encode()]
    forms += _base64_fragments(needle)
    return list(dict.fromkeys(forms))


_HEX = re.compile(rb"(?:[0-9a-fA-F]{2})+")


def raw_bytes_of(needle: bytes) -> bytes | None:
    """The bytes a hex needle spells (the canary's 16 random bytes), else None."""
    if len(needle) >= 2 * _MIN_RAW and _HEX.fullmatch(needle):
        return bytes.fromhex(needle.decode())
    return None


# Encoders wrap their output (`base64` at 76 columns, `xxd -p` at 60) or space it out
# (`65 76 61`): every form but the raw bytes is looked for with whitespace taken out.
_WHITESPACE = b" \t\r\n"
_FOLD = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz")


@dataclass(frozen=True)
class Forms:
    """What a scan looks for, by how the data is prepared before the search.

    `raw`: in the data as it is (binary: the raw bytes of a hex needle).
    `exact`: in the data with whitespace taken out, case kept (base64).
    `folded`: in the data with whitespace taken out and lower-cased (the text in any
    case, reversed, hex and base32, whose alphabets have one case).
    """

    raw: tuple[bytes, ...] = ()
    exact: tuple[bytes, ...] = ()
    folded: tuple[bytes, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.raw or self.exact or self.folded)

    @functools.cached_property
    def longest(self) -> tuple[int, int, int]:
        """The longest form of each kind (raw, exact, folded): what a window keeps."""
        return tuple(max((len(f) for f in forms), default=1)  # type: ignore[return-value]
                     for forms in (self.raw, self.exact, self.folded))


def needle_forms(needles: Sequence[bytes]) -> Forms:
    """Every form of each needle that counts as a leak (docs/attempts.md, "The canary").

    For a needle T (text) that spells raw bytes R (hex text, as the canary's random part
    does): T in any case, T reversed, and the base64, base32 and hex forms of T (as
    written, lower- and upper-cased) and of R, and R itself. Cached: an attempt's
    scanners (two streams, each evidence file, the names) share one computation.
    """
    return _needle_forms(tuple(needles))


@functools.lru_cache(maxsize=64)
def _needle_forms(needles: tuple[bytes, ...]) -> Forms:
    raw: list[bytes] = []
    exact: list[bytes] = []
    folded: list[bytes] = []
    for needle in dict.fromkeys(n for n in needles if n):
        texts = list(dict.fromkeys([needle, needle.lower(), needle.upper()]))
        sources = list(texts)
        r = raw_bytes_of(needle)
        if r is not None:
            raw.append(r)
            sources.append(r)
        folded += [needle.translate(_FOLD, _WHITESPACE), needle.translate(_FOLD, _WHITESPACE)[::-1]]
        for s in sources:
            folded.append(s.hex().encode())
            exact += _base64_fragments(s)
            # base32 is pure Python before 3.12 and this runs per attempt: of the text as
            # written and of the raw bytes (its case-folded search covers both cases of
            # the encoder's output; an upper-cased text then encoded is not looked for)
            if s is needle or s is r:
                folded += _base32_fragments(s)
    folded = [f for f in dict.fromkeys(folded) if f]
    exact = list(dict.fromkeys(exact))
    return Forms(tuple(dict.fromkeys(raw)), tuple(exact), tuple(folded))


def scan(data: bytes, needles: Sequence[bytes]) -> bool:
    """Whether any needle occurs in `data` in any form, gzip members included."""
    scanner = StreamScanner(needles)
    scanner.feed(data)
    return scanner.found


class _Window:
    """Finds any of `forms` in a stream fed in chunks, also across chunk boundaries.

    Only the last (longest form − 1) bytes of the previous chunk are kept between feeds,
    so memory stays flat whatever the stream's length.
    """

    def __init__(self, forms: tuple[bytes, ...], longest: int | None = None) -> None:
        self._forms = forms
        self._overlap = (longest if longest is not None else max((len(f) for f in forms), default=1)) - 1
        self._tail = b""

    def found_in(self, chunk: bytes) -> bool:
        if not self._forms or not chunk:
            return False
        # A form that straddles the boundary lies within tail + chunk.
        data = self._tail + chunk if self._tail else chunk
        for form in self._forms:
            if form in data:
                return True
        if self._overlap:
            self._tail = data[-self._overlap :]
        return False


GZIP_MAGIC = b"\x1f\x8b\x08"
# Decompressed bytes looked at per scan (a gzip bomb must not cost more than this), and
# members decompressed at once (each false start on stray magic bytes fails in a few).
GZIP_BUDGET = 64 << 20
_GZIP_ACTIVE = 16
_GZIP_DEPTH = 2  # a gzip member inside a gzip member is found; deeper nesting is not
# What seam_found() joins: the end of one stream and the start of the next.
SEAM_BYTES = 4096


class _Budget:
    def __init__(self, room: int) -> None:
        self.room = room


class _Member:
    """One gzip member being decompressed; its output goes to a nested scanner."""

    def __init__(self, inner: StreamScanner, budget: _Budget) -> None:
        self._z = zlib.decompressobj(31)
        self._inner = inner
        self._budget = budget
        self.done = False

    @property
    def found(self) -> bool:
        return self._inner.found

    def push(self, data: bytes) -> None:
        try:
            while data and not self.done:
                if self._budget.room <= 0:
                    self.done = True
                    return
                out = self._z.decompress(data, min(self._budget.room, 1 << 20))
                self._budget.room -= len(out)
                self._inner.feed(out)
                data = self._z.unconsumed_tail
                if self._z.eof or self._inner.found:
                    self.done = True
        except zlib.error:
            self.done = True  # stray magic bytes, or a damaged member: nothing more here


class StreamScanner:
    """`scan()` over a stream fed in chunks; a needle split across chunks is still found.

    Keeps the first and last `SEAM_BYTES` of the stream (`head`, `tail`) for
    `seam_found()`.
    """

    def __init__(self, needles: Sequence[bytes] | Forms, *, budget: int = GZIP_BUDGET,
                 _depth: int = 0, _shared: _Budget | None = None) -> None:
        self.forms = needles if isinstance(needles, Forms) else needle_forms(needles)
        raw, exact, folded = self.forms.longest
        self._raw = _Window(self.forms.raw, raw)
        self._exact = _Window(self.forms.exact, exact)
        self._folded = _Window(self.forms.folded, folded)
        self._active = bool(self.forms)
        self._depth = _depth
        self._budget = _shared or _Budget(budget)
        self._members: list[_Member] = []
        self._magic_tail = b""
        self.head = b""
        self.tail = b""
        self.found = False

    def feed(self, chunk: bytes) -> None:
        if not chunk or self.found or not self._active:
            return
        if len(self.head) < SEAM_BYTES:
            self.head += chunk[: SEAM_BYTES - len(self.head)]
        self.tail = chunk[-SEAM_BYTES:] if len(chunk) >= SEAM_BYTES else (self.tail + chunk)[-SEAM_BYTES:]
        squeezed = chunk.translate(None, _WHITESPACE)
        self.found = (self._raw.found_in(chunk) or self._exact.found_in(squeezed)
                      or self._folded.found_in(squeezed.translate(_FOLD)))
        if not self.found and self._depth < _GZIP_DEPTH:
            self._gzip(chunk)

    def _gzip(self, chunk: bytes) -> None:
        """Feed the members already open, then open one at each new gzip magic."""
        for member in self._members:
            member.push(chunk)
            if member.found:
                self.found = True
                return
        self._members = [m for m in self._members if not m.done]
        data = self._magic_tail + chunk if self._magic_tail else chunk
        at = data.find(GZIP_MAGIC)
        while at != -1 and self._budget.room > 0:
            if len(self._members) < _GZIP_ACTIVE:
                inner = StreamScanner(self.forms, _depth=self._depth + 1, _shared=self._budget)
                member = _Member(inner, self._budget)
                member.push(data[at:])
                if member.found:
                    self.found = True
                    return
                if not member.done:
                    self._members.append(member)
            at = data.find(GZIP_MAGIC, at + 1)
        self._magic_tail = data[-(len(GZIP_MAGIC) - 1):]

    def seam_found(self, following: StreamScanner) -> bool:
        """Whether a needle lies across the end of this stream and the start of `following`."""
        if not self._active or not self.tail or not following.head:
            return False
        return StreamScanner(self.forms, _shared=_Budget(0)).feed_found(self.tail + following.head)

    def feed_found(self, data: bytes) -> bool:
        self.feed(data)
        return self.found


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
