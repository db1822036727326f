"""Capturing an agent's output streams: canary scanning, redaction and the output cap.

Three jobs, each done incrementally so that a stream of any length passes through the
rig in bounded memory (docs/attempts.md, "Limits" and "The canary"):

- `StreamScanner` looks for a needle (the canary's random part, hex text) in the
  *complete* stream (before capping), in every form of `needle_forms`: the text itself
  in any case, reversed, and the base64, base32, base85 and hex forms of the text and of
  the raw bytes it spells, at every alignment inside longer encoded text, also when
  wrapped or spaced out; in the hex digits of the stream alone (so separators between
  them hide nothing) and rot13-ed; inside zip, gzip, zlib, bz2 and xz containers found
  in the stream (3 deep, decompressed within a byte budget an attempt's scans share:
  ScanBudget); and in the stream
  normalised (UTF-16/32 runs, escapes and entities decoded, NFKC, escape codes taken
  out) and in what its long base64/base32/base85 runs decode to. `scan()` does the
  same for a whole buffer, `scan_body()` for a request body within a CPU bound,
  `seam_found()` for the end of one stream followed directly by the start of another
  (stdout, then stderr). It is a heuristic against careless leaks, not a proof: an
  agent that encrypts the value, or splits it across two files, is not found.
- `Redactor` replaces secret values by ``[REDACTED:NAME]`` in what is kept, also when a
  value is split across two reads.
- `CappedSink` keeps at most N bytes of the redacted stream in a file, counts the rest
  and says whether anything was dropped.
"""

from __future__ import annotations

import base64
import binascii
import bz2
import functools
import html.entities
import lzma
import re
import struct
import time
import unicodedata
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

# An encoded fragment shorter than this would match ordinary text by chance.
_MIN_FRAGMENT = 4
# The raw bytes a hex needle spells are looked for as they are only from this length on
# (shorter binary strings turn up in any large file).
_MIN_RAW = 8
# A form made of hex digits only is looked for in the text with every other character
# taken out (the `hexed` forms) from this length on: 32 hex digits of a random value are
# specific enough, whatever was between them.
_MIN_HEXED = 32


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


def _base85_fragments(needle: bytes) -> list[bytes]:
    """Ascii85 and base85 of `needle` at its four alignments: the whole 5-character
    groups made of needle bytes only (a base-85 group mixes all four of its bytes)."""
    out: list[bytes] = []
    for encode in (base64.a85encode, base64.b85encode):
        for offset in range(4):
            encoded = encode(b"\1" * offset + needle)
            first = 1 if offset else 0
            fragment = encoded[5 * first : 5 * ((offset + len(needle)) // 4)]
            if len(fragment) >= 10 and fragment not in out:
                out.append(fragment)
    return out


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
_ROT13 = bytes.maketrans(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
    b"NOPQRSTUVWXYZABCDEFGHIJKLMnopqrstuvwxyzabcdefghijklm")
_HEX_DIGITS = b"0123456789abcdefABCDEF"
_ALL = bytes(range(256))
# The hex digits of a text, lower-cased, every other byte dropped (dashes, colons, a
# UUID's layout, zero-width characters, escape codes' letters).
_NOT_HEX = _ALL.translate(None, _HEX_DIGITS)
_HEX_LOWER = bytes.maketrans(b"ABCDEF", b"abcdef")
# The same of the text rot13-ed: rot13 turns a-f into n-s, so n-s (either case) and the
# digits are kept and n-s mapped back to a-f.
_NOT_ROT_HEX = _ALL.translate(None, b"0123456789nopqrsNOPQRS")
_ROT_HEX_LOWER = bytes.maketrans(b"nopqrsNOPQRS", b"abcdefabcdef")


@dataclass(frozen=True)
class Forms:
    """What a scan looks for, by how the data is prepared before the search.

    `raw`: in the data as it is (binary: the raw bytes of a hex needle).
    `exact`: in the data with whitespace taken out, case kept (base64, base85).
    `folded`: in the data with whitespace taken out and lower-cased (base32, a needle
    that is not hex text in any case and reversed).
    `hexed`: in the hex digits of the data, lower-cased, every other byte dropped, and in
    those of the data rot13-ed (every form made of 32 or more hex digits: the needle,
    reversed, the hex forms, the hex of the base64 forms).
    """

    raw: tuple[bytes, ...] = ()
    exact: tuple[bytes, ...] = ()
    folded: tuple[bytes, ...] = ()
    hexed: tuple[bytes, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.raw or self.exact or self.folded or self.hexed)

    @functools.cached_property
    def longest(self) -> tuple[int, int, int, int]:
        """The longest form of each kind (raw, exact, folded, hexed): what a window keeps."""
        return tuple(max((len(f) for f in forms), default=1)  # type: ignore[return-value]
                     for forms in (self.raw, self.exact, self.folded, self.hexed))


def needle_forms(needles: Sequence[bytes]) -> Forms:
    """Every form of each needle that counts as a leak (docs/attempts.md, "The canary").

    For a needle T (text) that spells raw bytes R (hex text, as the canary's random part
    does): T in any case, T reversed, and the base64, base32 and hex forms of T (as
    written, lower- and upper-cased, reversed) and of R, the hex of those base64 forms,
    ascii85 and base85 of T and R, and R itself. Cached: an attempt's scanners (two
    streams, each evidence file, the names) share one computation.
    """
    return _needle_forms(tuple(needles))


@functools.lru_cache(maxsize=64)
def _needle_forms(needles: tuple[bytes, ...]) -> Forms:
    raw: list[bytes] = []
    exact: list[bytes] = []
    folded: list[bytes] = []
    for needle in dict.fromkeys(n for n in needles if n):
        plain = needle.translate(_FOLD, _WHITESPACE)
        sources = list(dict.fromkeys([needle, needle.lower(), needle.upper()]))
        r = raw_bytes_of(needle)
        if r is not None:
            raw.append(r)
            sources.append(r)
        folded += [plain, plain[::-1], plain.translate(_ROT13), plain[::-1].translate(_ROT13)]
        for s in sources:
            folded.append(s.hex().encode())
            b64 = _base64_fragments(s)
            exact += b64
            if s is needle or s is r:
                # ascii85/base85 (too short for a run of _MIN_RUN when of the raw bytes)
                exact += [base64.a85encode(s), base64.b85encode(s)]
                folded += [f.hex().encode() for f in b64]
                # base32 is pure Python before 3.12 and this runs per attempt: of the
                # text as written and of the raw bytes (its case-folded search covers
                # both cases of the encoder's output). Base32 and base64 of the text
                # upper-cased or reversed are found by decoding the run they make.
                folded += _base32_fragments(s)
    folded = [f for f in dict.fromkeys(folded) if f]
    hexed = [f for f in folded if len(f) >= _MIN_HEXED and not f.translate(None, _HEX_DIGITS)]
    folded = [f for f in folded if f not in hexed]
    exact = list(dict.fromkeys(exact))
    return Forms(tuple(dict.fromkeys(raw)), tuple(exact), tuple(folded), tuple(hexed))


def scan(data: bytes, needles: Sequence[bytes]) -> bool:
    """Whether any needle occurs in `data` in any form, normalised forms and containers
    included."""
    scanner = StreamScanner(needles)
    scanner.feed(data)
    return scanner.found


def scan_body(body: bytes, needles: Sequence[bytes], *, cpu_s: float = 5.0) -> bool:
    """Whether a request body is *not clean*: it holds a needle in any form `scan()`
    finds, or its scan did not finish within `cpu_s` seconds of this thread's CPU time
    (for the model gateway, docs/attempts.md "The canary": a body the scan cannot finish
    is not forwarded)."""
    return scan_body_verdict(body, needles, cpu_s=cpu_s) != "clean"


def scan_body_verdict(body: bytes, needles: Sequence[bytes], *, cpu_s: float = 5.0) -> str:
    """`scan_body`, saying which: "found" (a needle in any form), "unfinished" (the scan ran
    out of its `cpu_s` seconds or its decompression budget) or "clean"; the model gateway
    words its refusal by it (`canary` or `scan`)."""
    budget = ScanBudget(GZIP_BUDGET, cpu_s=cpu_s)
    scanner = StreamScanner(needles, shared=budget)
    for at in range(0, len(body), _BODY_STEP):
        scanner.feed(body[at : at + _BODY_STEP])
        if scanner._found or budget.expired():
            break
    if scanner.found:
        return "found"
    return "unfinished" if budget.expired() else "clean"


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


# -- containers: zip, gzip, zlib, bz2, xz -------------------------------------------------

GZIP_MAGIC = b"\x1f\x8b\x08"
# Decompressed bytes looked at per scan: of one attempt, its two streams and every
# evidence file together (a ScanBudget shared by them: a bomb, or a thousand, must not
# cost more than this), and members decompressed at once (each false start on stray
# magic bytes fails in a few).
GZIP_BUDGET = 64 << 20
_GZIP_ACTIVE = 16
_XZ_MEMORY = 64 << 20  # an xz stream asking for a larger dictionary is not opened
# Nesting: a container, a decoded run or a normalised text inside another is looked
# into, up to this many levels below the file or stream itself.
MAX_DEPTH = 3
# What seam_found() joins: the end of one stream and the start of the next.
SEAM_BYTES = 4096
_ZIP_HEADER = 30
_MAGICS: tuple[tuple[bytes, str], ...] = (
    (GZIP_MAGIC, "gzip"),
    (b"\x78\x01", "zlib"), (b"\x78\x5e", "zlib"), (b"\x78\x9c", "zlib"), (b"\x78\xda", "zlib"),
    (b"BZh", "bz2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"PK\x03\x04", "zip"),
)
_MAGIC_TAIL = max(len(m) for m, _ in _MAGICS) - 1


def _find_magic(data: bytes, magic: bytes, start: int) -> int:
    """data.find(magic, start), for zlib's magics by their second byte: their first is `x`,
    and a flood of `x` made each search crawl (four of them cost 1.2 ms per 64 KiB)."""
    if magic[0] != 0x78:
        return data.find(magic, start)
    at = data.find(magic[1:], start + 1)
    while at != -1 and data[at - 1] != 0x78:
        at = data.find(magic[1:], at + 1)
    return -1 if at == -1 else at - 1
_CONTAINER_HEX = frozenset(m[:2].hex().encode() for m, _ in _MAGICS)
_HEX_RUN = re.compile(rb"[0-9a-fA-F]*")
_BODY_STEP = 64 << 10


SCAN_INCOMPLETE = "scan incomplete"
INCOMPLETE_BYTES = f"{SCAN_INCOMPLETE}: decompression budget"
"""A `Canary.where` entry: a container was left unread, the attempt's GZIP_BUDGET spent."""
INCOMPLETE_CPU = f"{SCAN_INCOMPLETE}: CPU bound"
"""A `Canary.where` entry: the scan stopped at its CPU backstop (ScanBudget.cpu_s)."""


class ScanBudget:
    """What the scans sharing it may still spend (docs/attempts.md, "The canary").

    `room`: decompressed bytes, the deciding bound (the same bytes cost the same
    wherever they are scanned, so `evalrig verify` re-derives the same answer). `cpu_s`:
    seconds of thread CPU time spent inside top-level scans sharing it (None: no bound),
    a backstop for what the byte bound lets through; it is not deterministic. Once
    either runs out the scan is incomplete (`incomplete`), which is not clean. `tick`,
    when set, is called between slices of a long scan (the supervisor's limits keep
    being watched while a stream's scan is busy).
    """

    def __init__(self, room: int = GZIP_BUDGET, cpu_s: float | None = None) -> None:
        self.room = room
        self.cpu_s = cpu_s
        self.spent_s = 0.0  # thread CPU inside top-level scans
        self.open = 0  # members being decompressed, at every level of nesting
        self.short_of_bytes = False  # a member or container left unread for want of room
        self.tick: Callable[[], None] | None = None
        self._since: float | None = None  # thread_time() when the current top-level scan began
        self._expired = False

    def limit_cpu(self, cpu_s: float) -> None:
        """From now on, at most `cpu_s` more seconds of scanning."""
        self.cpu_s = self.spent_s + cpu_s

    def enter(self) -> bool:
        """A top-level scan begins (False: one is already under way on this budget)."""
        if self._since is not None:
            return False
        self._since = time.thread_time()
        return True

    def leave(self) -> None:
        if self._since is not None:
            self.spent_s += time.thread_time() - self._since
            self._since = None

    def expired(self) -> bool:
        """Whether the CPU backstop is reached (then nothing more is scanned)."""
        if self.cpu_s is not None and not self._expired:
            now = self.spent_s + (time.thread_time() - self._since if self._since is not None else 0.0)
            self._expired = now > self.cpu_s
        return self._expired

    def out_of_room(self) -> None:
        self.short_of_bytes = True

    def slice_done(self) -> None:
        if self.tick is not None:
            self.tick()

    @property
    def incomplete(self) -> tuple[str, ...]:
        """The `Canary.where` entries saying why the scan is not complete (none: it is)."""
        return ((INCOMPLETE_BYTES,) if self.short_of_bytes else ()) + ((INCOMPLETE_CPU,) if self._expired else ())


class _Inflater:
    """One decompressor behind one interface: `zlib` (gzip, zlib, a zip entry's raw
    deflate) keeps the input it did not use in `unconsumed_tail`; bz2 and xz keep it
    inside and say `needs_input`."""

    def __init__(self, kind: str, method: int = 8) -> None:
        self._z: Any
        if kind == "gzip":
            self._z = zlib.decompressobj(31)
        elif kind == "zlib":
            self._z = zlib.decompressobj(15)
        elif kind == "bz2" or (kind == "zip" and method == 12):
            self._z = bz2.BZ2Decompressor()
        elif kind == "xz":
            self._z = lzma.LZMADecompressor(lzma.FORMAT_XZ, memlimit=_XZ_MEMORY)
        else:  # a zip entry, deflated
            self._z = zlib.decompressobj(-15)
        self._zlib = not isinstance(self._z, (bz2.BZ2Decompressor, lzma.LZMADecompressor))

    @property
    def eof(self) -> bool:
        return bool(self._z.eof)

    def step(self, data: bytes, most: int) -> tuple[bytes, bytes, bool]:
        """At most `most` bytes out: returns them, the input still to give, and whether
        output is left inside the decompressor (bz2 and xz keep unused input there)."""
        out = self._z.decompress(data, most)
        if self._zlib:
            return out, self._z.unconsumed_tail, False
        return out, b"", not self._z.eof and not self._z.needs_input


class _Member:
    """One container member being decompressed; its output goes to a nested scanner."""

    def __init__(self, kind: str, inner: StreamScanner, budget: ScanBudget) -> None:
        self._kind = kind
        self._header = b"" if kind == "zip" else None  # a zip entry's local header, gathered
        self._z: _Inflater | None = None if kind == "zip" else _Inflater(kind)
        self._inner = inner
        self._budget = budget
        self.done = False

    @property
    def found(self) -> bool:
        return self._inner.found

    def close(self) -> None:
        """Count this member, and every member still open inside it, as closed."""
        self._budget.open -= 1
        self._inner.close()

    def push(self, data: bytes) -> None:
        if self._z is None:
            data = self._zip_header(data)
            if self._z is None:
                return
        more = True
        try:
            while (data or more) and not self.done:
                if self._budget.room <= 0:
                    self._budget.out_of_room()
                if self._budget.room <= 0 or self._budget.expired():
                    self.done = True
                    return
                out, data, more = self._z.step(data, min(self._budget.room, 1 << 20))
                self._budget.room -= len(out)
                self._inner.feed(out)
                self._budget.slice_done()
                if self._z.eof or self._inner.found:
                    self.done = True
                elif not out and not data and not more:
                    return
        except (zlib.error, OSError, EOFError, lzma.LZMAError, ValueError):
            self.done = True  # stray magic bytes, or a damaged member: nothing more here

    def _zip_header(self, data: bytes) -> bytes:
        """Gather a zip entry's local header; start its decompressor past it."""
        assert self._header is not None
        self._header += data
        if len(self._header) < _ZIP_HEADER:
            return b""
        method, = struct.unpack_from("<H", self._header, 8)
        name, extra = struct.unpack_from("<HH", self._header, 26)
        start = _ZIP_HEADER + name + extra
        if method not in (8, 12):  # stored: its bytes are in the stream already
            self.done = True
            return b""
        if len(self._header) < start:
            return b""
        rest = self._header[start:]
        self._header = b""
        self._z = _Inflater("zip", method)
        return rest


# -- normalised text ------------------------------------------------------------------------

# Blocks the normalised passes look at, and what of one block is looked at again with the
# next (a form, or an escaped or encoded text, across the boundary).
NORMALISED_BYTES = 64 << 20
"""How much of one stream or file the normalised pass looks at (the evidence cap's worth):
past it, the plain, hex-digit and rot13 forms and containers only, so that a gigabyte of
stdout costs the rig what it did before the normalised forms (docs/attempts.md)."""
BLOCK_BYTES = 1 << 20
_OVERLAP = 4096
_RUN_CARRY = 64 << 10  # an encoded run that reaches the block's end is carried whole, up to this
_MIN_RUN = 24
# The chained normalisation (`_normalised`) counts a step only where it changed this many
# places: in text with fewer escapes, the text around each is decoded alone (`_sparse_escapes`).
_MIN_ESCAPES = 8

_PERCENT = re.compile(rb"%([0-9A-Fa-f]{2})")
_BACKSLASH = re.compile(rb"\\(?:x([0-9A-Fa-f]{2})|u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|([0-3][0-7]{2})|([nrt0'\"\\]))")
_ENTITY = re.compile(rb"&(?:#([0-9]{1,7})|#[xX]([0-9A-Fa-f]{1,6})|([A-Za-z][A-Za-z0-9]{1,31}));")
# The three in one pattern, decoded in one pass (`_decoded_once`): what one escape
# decodes to is never read as another escape (URL-quoted bytes holding `%5C%5C` are two
# backslashes). Groups: 1 `%XX`; 2 to 6 a backslash escape (`x`, `u`, `U`, octal, simple);
# 7 to 9 an entity (decimal, hex, named).
_ESCAPE = re.compile(b"|".join(p.pattern for p in (_PERCENT, _BACKSLASH, _ENTITY)))
_SIMPLE_ESCAPES = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"0": b"\0", b"'": b"'", b'"': b'"', b"\\": b"\\"}
_FULLWIDTH = re.compile(rb"\xef(?:\xbc[\x81-\xbf]|\xbd[\x80-\x9e])")
_ZERO_WIDTH = re.compile(rb"\xe2(?:\x80[\x8b-\x8f]|\x81[\xa0-\xa4])|\xef\xbb\xbf|\xc2\xad")
_HEX_PREFIX = re.compile(rb"0[xX](?=[0-9a-fA-F])")
_ANSI = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]{0,512}(?:\x07|\x1b\\)|[@-Z\\-_])")
# The lead bytes of characters NFKC folds into ASCII (math alphanumerics, super- and
# subscripts, circled and parenthesised digits, letterlike symbols).
_COMPAT = (b"\xf0\x9d", b"\xe2\x81", b"\xe2\x82", b"\xe2\x84", b"\xe2\x91", b"\xe2\x92", b"\xe2\x93", b"\xc2\xb2",
           b"\xc2\xb3", b"\xc2\xb9")
# Runs of UTF-16 or UTF-32 text (a NUL byte between characters) once runs of NULs are one.
_NULS = re.compile(rb"\x00+")
_WIDE = re.compile(rb"\x00(?:[^\x00]\x00){12,}")
# base64 (standard and URL-safe) and base32 share one alphabet here; ascii85 and base85
# another. Each run of at least _MIN_RUN of such characters is decoded.
_B64_CHARS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_="
_A85_CHARS = bytes(range(33, 118)) + b"yz"
_B85_CHARS = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"
_B32_CHARS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567abcdefghijklmnopqrstuvwxyz"
_RUN = b"A" * _MIN_RUN
_HEX_DASH = _HEX_DIGITS + b"-"


def _class(chars: bytes) -> bytes:
    return bytes(ord("A") if c in chars else ord(" ") for c in range(256))


# Line breaks belong to a run: encoders wrap their output (`base64` at 76 columns).
_B64_CLASS = _class(_B64_CHARS + b"\r\n")
_B85_CLASS = _class(_A85_CHARS + _B85_CHARS + b"~<>")  # punctuation too: lines stay apart
_URLSAFE = bytes.maketrans(b"-_", b"+/")


def _runs(data: bytes, table: bytes) -> list[bytes]:
    """Every run of at least _MIN_RUN bytes of one alphabet (a translation to 'A'/' ')."""
    marks = data.translate(table)
    out: list[bytes] = []
    at = marks.find(_RUN)
    while at != -1:
        end = marks.find(b" ", at + _MIN_RUN)
        end = len(data) if end == -1 else end
        out.append(data[at:end])
        at = marks.find(_RUN, end)
    return out


def _padded(run: bytes, group: int, short: tuple[int, ...]) -> bytes:
    """A run cut or padded to whole groups: a last group of a length padding completes
    is padded, any other is dropped."""
    rest = len(run) % group
    if not rest:
        return run
    return run + b"=" * (group - rest) if rest in short else run[:-rest]


def _lines_joined(runs: list[bytes]) -> list[bytes]:
    """Each run with its line breaks taken out, and, for a run over several lines, also
    without its first line: an encoder's wrapped output starts a line, and the word that
    ends the line before it would shift every group of the decoding."""
    out: list[bytes] = []
    for run in runs:
        if b"\n" not in run and b"\r" not in run:
            out.append(run)
            continue
        out.append(run.translate(None, b"\r\n"))
        first, sep, rest = run.partition(b"\n")
        second = rest.split(b"\n", 1)[0]
        if sep and len(rest) >= _MIN_RUN and len(first) != len(second):  # wrapped lines are alike
            out.append(rest.translate(None, b"\r\n"))
    return out


def _monotone(run: bytes) -> bool:
    """A run of fewer than 8 distinct characters (a flood of one letter, say): its decoding
    cannot carry the canary's 16 random bytes in any form, and decoding a megabyte of it
    costs what a megabyte of real text does (a gigabyte of `x` on stdout slowed the rig
    to 6 MB/s)."""
    seen = set(run[:4096])
    return len(seen) < 8 and not run.translate(None, bytes(seen))


def _decode_runs(text: bytes) -> list[bytes]:
    """What each long run of base64, base32, ascii85 or base85 characters decodes to."""
    out: list[bytes] = []
    for run in _lines_joined(_runs(text, _B64_CLASS)):
        for piece in run.split(b"=") if b"=" in run else (run,):
            if len(piece) < _MIN_RUN or _monotone(piece):
                continue
            if piece[:4].lower() in _CONTAINER_HEX:  # the hex of a container (`xxd -p` of a gzip)
                digits = _HEX_RUN.match(piece).group()  # type: ignore[union-attr]
                out.append(bytes.fromhex(digits[: len(digits) // 2 * 2].decode()))
            if not piece.translate(None, _HEX_DASH):
                continue  # hex text (a UUID too) is looked at as hex digits; as base64 it is noise
            std = piece.translate(_URLSAFE) if b"-" in piece or b"_" in piece else piece
            try:
                out.append(binascii.a2b_base64(_padded(std, 4, (2, 3))))
            except binascii.Error:
                pass
            if not piece.translate(None, _B32_CHARS):
                try:
                    out.append(base64.b32decode(_padded(piece.upper(), 8, (2, 4, 5, 7))))
                except (binascii.Error, ValueError):
                    pass
    for run in _lines_joined(_runs(text, _B85_CLASS)):
        if _monotone(run) or not run.translate(None, _B64_CHARS):
            continue  # base64's alphabet: decoded as base64 above
        body = run.removeprefix(b"<~").removesuffix(b"~>")
        for alphabet, decode in ((_A85_CHARS, base64.a85decode), (_B85_CHARS, base64.b85decode)):
            if body.translate(None, alphabet):
                continue
            try:
                out.append(decode(body))
            except ValueError:
                pass
    return [o for o in out if o]


def _backslash(x: bytes | None, u: bytes | None, big: bytes | None, octal: bytes | None,
               simple: bytes | None) -> bytes:
    """What a backslash escape (`_BACKSLASH`'s groups) stands for."""
    if x is not None:
        return bytes([int(x, 16)])
    if octal is not None:
        return bytes([int(octal, 8)])
    if simple is not None:
        return _SIMPLE_ESCAPES[simple]
    return _char(int(u if u is not None else big, 16))  # type: ignore[arg-type]


def _entity(dec: bytes | None, hx: bytes | None, name: bytes | None) -> bytes | None:
    """What an HTML entity (`_ENTITY`'s groups) stands for; None for a name HTML lacks."""
    if name is not None:
        got = html.entities.html5.get(name.decode() + ";")
        return got.encode() if got is not None else None
    return _char(int(dec) if dec is not None else int(hx, 16))  # type: ignore[arg-type]


def _unescape(data: bytes) -> tuple[bytes, int]:
    """Percent-encoding, `\\x`/`\\u` escapes (JSON, a Python bytes repr) and HTML
    entities decoded, one kind after the other; returns the text and how many escapes
    there were."""
    count = 0
    decoders: tuple[tuple[re.Pattern[bytes], Callable[[re.Match[bytes]], bytes]], ...] = (
        (_PERCENT, lambda m: bytes([int(m.group(1), 16)])),
        (_BACKSLASH, lambda m: _backslash(*m.groups())),
        (_ENTITY, lambda m: _entity(*m.groups()) or m.group()))
    for pattern, fn in decoders:
        if pattern.search(data):
            data, n = pattern.subn(fn, data)
            count += n
    return data, count


def _decoded_once(data: bytes) -> tuple[bytes, int]:
    """Every escape in `data` decoded in one pass (`_ESCAPE`), and nothing else done: the
    bytes escapes decode to are the value's own (a Python bytes repr's `\\x1b` stays ESC,
    its `\\xc2\\xb2` is not folded). Returns the text and how many escapes there were."""
    count = 0

    def one(m: re.Match[bytes]) -> bytes:
        nonlocal count
        percent, *rest = m.groups()
        if percent is not None:
            got: bytes | None = bytes([int(percent, 16)])
        elif any(g is not None for g in rest[:5]):
            got = _backslash(*rest[:5])
        else:
            got = _entity(*rest[5:])
        if got is None:
            return m.group()
        count += 1
        return got

    return _ESCAPE.sub(one, data), count


_EXCERPT = 256  # bytes kept on each side of an escape: a bytes repr of 16 bytes is under 70


def _sparse_escapes(data: bytes) -> bytes | None:
    """The text around each escape in `data` (_EXCERPT bytes on each side, spans that meet
    merged), each decoded alone (`_decoded_once`) and joined by line breaks; None when no
    escape decodes to anything. An excerpt that holds a NUL byte is binary and left out
    (judged per excerpt, not per block, so that where a block starts does not matter).
    Escapes are found with the three patterns that start with a fixed byte: the combined
    one would be tried at every byte of the block."""
    starts = sorted((m.start(), m.end()) for pattern in (_PERCENT, _BACKSLASH, _ENTITY)
                    for m in pattern.finditer(data))
    spans: list[list[int]] = []
    for first, last in starts:
        start, end = max(first - _EXCERPT, 0), last + _EXCERPT
        if spans and start <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    out, decoded = [], 0
    for start, end in spans:
        excerpt = data[start:end]
        if b"\x00" in excerpt:
            continue
        text, n = _decoded_once(excerpt)
        out.append(text)
        decoded += n
    return b"\n".join(out) if decoded else None


def _char(code: int) -> bytes:
    return chr(code).encode("utf-8", "ignore") if code < 0x110000 else b""


def _fullwidth(m: re.Match[bytes]) -> bytes:
    second, third = m.group()[1], m.group()[2]
    return bytes([(third - 0x80 + 0x20) if second == 0xBC else (third - 0x80 + 0x60)])


def _nfkc(data: bytes) -> bytes:
    """NFKC of the UTF-8 in `data`; other bytes kept as they are."""
    text = data.decode("utf-8", "surrogateescape")
    return unicodedata.normalize("NFKC", text).encode("utf-8", "surrogateescape")


def _normalised(data: bytes, once: bool) -> tuple[bytes | None, bytes | None]:
    """Two texts, each None where there is none:
    - `data` with escapes decoded, fullwidth forms folded (NFKC), escape codes and
      zero-width characters taken out, one step after the other; None when nothing changed;
    - where `once`, in a block that holds fewer than _MIN_ESCAPES escapes (which the first
      leaves as they are), the text around each escape with the escapes decoded in one
      pass (`_sparse_escapes`; excerpts with a NUL byte left out): a Python bytes repr of random bytes can hold a single
      `\\x`, and a few escapes cost a few excerpts, not another scan of the block.

    Each step counts where it changed at least _MIN_ESCAPES places; in a binary block (one
    with a NUL byte), where `%41`- or ESC-like bytes turn up by chance, only where they are
    dense too (one per 256 bytes or more), and NFKC is left out.
    """
    binary = b"\x00" in data

    def worth(n: int) -> bool:
        return n >= _MIN_ESCAPES and (not binary or n * 256 >= len(data))

    text = data
    unescaped, escapes = _unescape(text)
    if worth(escapes):
        text = unescaped
    if b"\xef" in text:
        new, n = _FULLWIDTH.subn(_fullwidth, text)
        if worth(n):
            text = new
    if not binary and not text.isascii() and any(c in text for c in _COMPAT):
        text = _nfkc(text)
    if b"0x" in text or b"0X" in text:
        new, n = _HEX_PREFIX.subn(b"", text)  # a C or Python list of the bytes: 0x9f, 0x86
        if worth(n):
            text = new
    if b"\x1b" in text:
        new, n = _ANSI.subn(b"", text)
        if worth(n):
            text = new
    if not binary and not text.isascii():
        new, n = _ZERO_WIDTH.subn(b"", text)
        if worth(n):
            text = new
    chained = text if text != data else None
    if not once or not escapes or escapes >= _MIN_ESCAPES:
        return chained, None
    return chained, _sparse_escapes(data)


def _wide(data: bytes) -> bytes | None:
    """The text of UTF-16 and UTF-32 runs in `data` (LE or BE, at any offset), as bytes."""
    if b"\x00" not in data:
        return None
    squeezed = _NULS.sub(b"\x00", data)
    runs = [squeezed[max(m.start() - 1, 0) : m.end() + 1].replace(b"\x00", b"")
            for m in _WIDE.finditer(squeezed)]
    return b"\n".join(runs) if runs else None


def _carry(data: bytes) -> bytes:
    """What of a block is looked at again with the next: the last _OVERLAP bytes, or the
    encoded run that reaches its end, whole up to _RUN_CARRY, else from its last line
    break in that reach (an encoder's lines start on a whole group)."""
    keep = _OVERLAP
    for table in (_B64_CLASS, _B85_CLASS):
        tail = data[-_RUN_CARRY:].translate(table)
        if tail.endswith(b"A"):
            start = tail.rfind(b" ") + 1
            if start == 0 and len(data) > _RUN_CARRY:  # longer than the reach
                start = data[-_RUN_CARRY:].find(b"\n") + 1
            keep = max(keep, len(tail) - start + 1)
    return data[-keep:]


class StreamScanner:
    """`scan()` over a stream fed in chunks; a needle split across chunks is still found.

    Two passes over what it is fed (docs/attempts.md, "The canary"):
    - every chunk, as it comes: the forms in the bytes as they are, without whitespace,
      folded, and in their hex digits (also rot13-ed), in windows that overlap the last
      chunk; gzip, zlib, bz2, xz and zip members found in it are decompressed into a
      nested scanner;
    - every block of BLOCK_BYTES (and what is left when `found` is read): the block
      normalised (escapes decoded, NFKC, escape codes out), its UTF-16/32 runs, and what
      its long base64/base32/base85 runs decode to, each fed to a nested scanner. A
      block starts with the end of the one before (4 KiB, or the encoded run that
      reached its end), so memory stays bounded by a few blocks per nesting level.

    Keeps the first and last `SEAM_BYTES` of the stream (`head`, `tail`) for
    `seam_found()`.
    """

    def __init__(self, needles: Sequence[bytes] | Forms, *, budget: int = GZIP_BUDGET,
                 _depth: int = 0, shared: ScanBudget | None = None) -> None:
        self.forms = needles if isinstance(needles, Forms) else needle_forms(needles)
        raw, exact, folded, hexed = self.forms.longest
        self._raw = _Window(self.forms.raw, raw)
        self._exact = _Window(self.forms.exact, exact)
        self._folded = _Window(self.forms.folded, folded)
        self._hexed = _Window(self.forms.hexed, hexed)
        self._rot = _Window(self.forms.hexed, hexed)
        self._active = bool(self.forms)
        self._depth = _depth
        self._budget = shared or ScanBudget(budget)
        self._members: list[_Member] = []
        self._magic_tail = b""
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._carry = b""
        self.head = b""
        self.tail = b""
        self._found = False
        self._normal_room = NORMALISED_BYTES

    @property
    def found(self) -> bool:
        """Whether a needle was found; reading it finishes the pending block first."""
        if not self._found and self._pending_size:
            top = self._budget.enter()
            try:
                self._block()
            finally:
                if top:
                    self._budget.leave()
        return self._found

    def feed(self, chunk: bytes) -> None:
        top = self._budget.enter()
        try:
            self._feed(chunk)
        finally:
            if top:
                self._budget.leave()

    def _feed(self, chunk: bytes) -> None:
        if not chunk or self._found or not self._active or self._budget.expired():
            return
        if len(self.head) < SEAM_BYTES:
            self.head += chunk[: SEAM_BYTES - len(self.head)]
        self.tail = chunk[-SEAM_BYTES:] if len(chunk) >= SEAM_BYTES else (self.tail + chunk)[-SEAM_BYTES:]
        squeezed = chunk.translate(None, _WHITESPACE)
        self._found = (self._raw.found_in(chunk) or self._exact.found_in(squeezed)
                       or self._folded.found_in(squeezed.translate(_FOLD))
                       or self._hexed.found_in(chunk.translate(_HEX_LOWER, _NOT_HEX))
                       or self._rot.found_in(chunk.translate(_ROT_HEX_LOWER, _NOT_ROT_HEX)))
        if self._found or self._depth >= MAX_DEPTH:
            return
        self._containers(chunk)
        if self._found:
            return
        if self._normal_room <= 0:
            return  # past NORMALISED_BYTES: the forms above only (a flood's cost stays flat)
        self._normal_room -= len(chunk)
        self._pending.append(chunk)
        self._pending_size += len(chunk)
        if self._pending_size >= BLOCK_BYTES:
            self._block()

    def _nested(self, data: bytes) -> bool:
        """Whether `data` (a normalised or decoded text) holds a needle, one level down."""
        inner = StreamScanner(self.forms, _depth=self._depth + 1, shared=self._budget)
        try:
            for at in range(0, len(data), BLOCK_BYTES):
                inner.feed(data[at : at + BLOCK_BYTES])
                if inner._found:
                    return True
            return inner.found
        finally:
            inner.close()

    def _block(self) -> None:
        """The normalised pass over the pending block (after the carried end of the last)."""
        data = self._carry + b"".join(self._pending)
        self._pending, self._pending_size = [], 0
        self._carry = _carry(data)
        if self._budget.expired():
            return
        self._budget.slice_done()
        wide = _wide(data)
        if wide is not None and self._nested(wide):
            self._found = True
            return
        # sparse escapes decoded alone in a stream's or file's own text only, not in what that
        # decodes to: two texts at every level would double a crafted flood's cost at each
        chained, once = _normalised(data, once=self._depth == 0)
        if chained is not None:
            # the nested scan of the normalised text decodes its runs itself
            self._found = self._nested(chained)
        else:
            decoded = _decode_runs(data)
            self._found = bool(decoded) and self._nested(b"\n".join(decoded))
        if not self._found and once is not None:
            self._found = self._nested(once)

    def _containers(self, chunk: bytes) -> None:
        """Feed the members already open, then open one at each new container magic."""
        for member in self._members:
            member.push(chunk)
            if member.found:
                self._found = True
                return
        for member in self._members:
            if member.done:
                member.close()
        self._members = [m for m in self._members if not m.done]
        data = self._magic_tail + chunk if self._magic_tail else chunk
        for magic, kind in _MAGICS:
            at = _find_magic(data, magic, 0)
            while at != -1:
                if self._budget.room <= 0:
                    self._budget.out_of_room()  # a container (or stray magic) left unread
                    break
                # at most _GZIP_ACTIVE open at once in the whole scan, nested ones included:
                # each holds a decompressor's window and a nested scanner's carry
                if self._budget.open < _GZIP_ACTIVE:
                    inner = StreamScanner(self.forms, _depth=self._depth + 1, shared=self._budget)
                    member = _Member(kind, inner, self._budget)
                    self._budget.open += 1
                    member.push(data[at:])
                    if member.found:
                        self._found = True
                        return
                    if member.done:
                        member.close()
                    else:
                        self._members.append(member)
                at = _find_magic(data, magic, at + 1)
        self._magic_tail = data[-_MAGIC_TAIL:]

    def close(self) -> None:
        """Let go of the members still open (their count is the whole scan's)."""
        for member in self._members:
            member.close()
        self._members = []

    def seam_found(self, following: StreamScanner) -> bool:
        """Whether a needle lies across the end of this stream and the start of `following`."""
        if not self._active or not self.tail or not following.head:
            return False
        return StreamScanner(self.forms, shared=ScanBudget(0)).feed_found(self.tail + following.head)

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
