"""The canary scan's normalised forms (docs/attempts.md "The canary"): the second red
team's encodings, each found in a text and in a stream fed in small chunks, and what must
not be found (other values, random binaries, the two forms out of reach)."""

from __future__ import annotations

import base64
import bz2
import codecs
import gzip
import html
import io
import json
import lzma
import os
import re
import unicodedata
import urllib.parse
import zipfile
import zlib
from collections.abc import Callable

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from evalrig.attempt.canary import needle, new_canary
from evalrig.attempt.streams import _COMPAT, BLOCK_BYTES, StreamScanner, scan, scan_body

VALUE = "rst_9f86d081884c7d659a2feaa0c55ad015"
HEX = needle(VALUE)
TEXT = HEX.decode()
RAW = bytes.fromhex(TEXT)


def _zip(data: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("token.txt", data)
    return buf.getvalue()


def _between(text: str, sep: str) -> str:
    return sep.join(text)


def _uuid(text: str) -> str:
    return "-".join([text[:8], text[8:12], text[12:16], text[16:20], text[20:]])


def _ansi(text: str) -> str:
    return "".join(f"\x1b[3{i % 8}m{c}" for i, c in enumerate(text)) + "\x1b[0m"


# The red team's forms (issue 20 finding 8), each a function of the canary's value.
FORMS: dict[str, Callable[[str], bytes]] = {
    "utf16-le": lambda v: ("token " + v).encode("utf-16-le"),
    "utf16-be": lambda v: ("token " + v).encode("utf-16-be"),
    "utf16-bom": lambda v: ("token " + v).encode("utf-16"),
    "utf32-le": lambda v: ("token " + v).encode("utf-32-le"),
    "utf32-be": lambda v: ("token " + v).encode("utf-32-be"),
    "fullwidth": lambda v: "".join(chr(ord(c) + 0xFEE0) for c in v).encode(),
    "uuid": lambda v: _uuid(v[4:]).encode(),
    "uuid-upper-braced": lambda v: ("{" + _uuid(v[4:]).upper() + "}").encode(),
    "dashed": lambda v: _between(v[4:], "-").encode(),
    "colon-pairs": lambda v: ":".join(v[4:][i : i + 2] for i in range(0, 32, 2)).encode(),
    "colon-raw-upper": lambda v: ":".join(f"{b:02X}" for b in bytes.fromhex(v[4:])).encode(),
    "zip": lambda v: _zip(v.encode()),
    "zip-in-zip": lambda v: _zip(_zip(v.encode())),
    "zlib": lambda v: zlib.compress(v.encode()),
    "bz2": lambda v: bz2.compress(v.encode()),
    "xz": lambda v: lzma.compress(b"log line " * 50 + v.encode()),
    "base64-of-gzip": lambda v: base64.b64encode(gzip.compress(v.encode())),
    "base64-of-zlib-in-json": lambda v: json.dumps({"blob": base64.b64encode(zlib.compress(v.encode())).decode()}).encode(),
    "base85": lambda v: base64.b85encode(v.encode()),
    "a85": lambda v: base64.a85encode(v.encode()),
    "a85-delimited": lambda v: base64.a85encode(v.encode(), adobe=True),
    "base85-raw": lambda v: base64.b85encode(bytes.fromhex(v[4:])),
    "a85-raw": lambda v: base64.a85encode(bytes.fromhex(v[4:])),
    "percent": lambda v: "".join(f"%{b:02X}" for b in v.encode()).encode(),
    "percent-raw": lambda v: urllib.parse.quote_from_bytes(bytes.fromhex(v[4:])).encode(),
    "json-u": lambda v: "".join(f"\\u{ord(c):04x}" for c in v).encode(),
    "json-dumps-fullwidth": lambda v: json.dumps("".join(chr(ord(c) + 0xFEE0) for c in v)).encode(),
    "html-decimal": lambda v: "".join(f"&#{ord(c)};" for c in v).encode(),
    "html-hex": lambda v: "".join(f"&#x{ord(c):x};" for c in v).encode(),
    "html-named": lambda v: html.escape("&".join(v)).encode(),
    "rot13": lambda v: codecs.encode(v, "rot13").encode(),
    "rot13-upper": lambda v: codecs.encode(v, "rot13").upper().encode(),
    "bytes-repr": lambda v: repr(bytes.fromhex(v[4:])).encode(),
    "hex-of-base64": lambda v: base64.b64encode(v.encode()).hex().encode(),
    "hex-of-base64-raw": lambda v: base64.b64encode(bytes.fromhex(v[4:])).hex().encode(),
    "base32-of-upper": lambda v: base64.b32encode(v.upper().encode()),
    "base64-of-reversed": lambda v: base64.b64encode(v[::-1].encode()),
    "base64-of-reversed-hex": lambda v: base64.b64encode(v[4:][::-1].encode()),
    "ansi-between-digits": lambda v: _ansi(v[4:]).encode(),
    "zero-width-joiners": lambda v: "\u200d".join(v[4:]).encode(),
    "zero-width-spaces": lambda v: "\u200b".join(v[4:]).encode(),
    "mixed-case": lambda v: "".join(c.upper() if i % 2 else c for i, c in enumerate(v)).encode(),
    "base64-of-base64": lambda v: base64.b64encode(base64.b64encode(v.encode())),
    "base64-of-gzip-wrapped": lambda v: base64.encodebytes(gzip.compress(os.urandom(200) + v.encode())),
    "a85-wrapped": lambda v: base64.a85encode(os.urandom(100) + v.encode(), wrapcol=40),
    "c-array": lambda v: ", ".join(f"0x{b:02x}" for b in bytes.fromhex(v[4:])).encode(),
    "one-character-a-line": lambda v: "\n".join(v).encode(),
    "octal-escapes": lambda v: "".join(f"\\{b:03o}" for b in bytes.fromhex(v[4:])).encode(),
    "hex-of-gzip-wrapped": lambda v: b"\n".join(gzip.compress(v.encode()).hex().encode()[i : i + 60] for i in range(0, 200, 60)),
    "gzip-in-gzip-in-gzip": lambda v: gzip.compress(gzip.compress(gzip.compress(b"log line " * 50 + v.encode()))),
    # one escape among plain characters (a bytes repr of random bytes can have one)
    "percent-one-character": lambda v: (v[:10] + f"%{ord(v[10]):02x}" + v[11:]).encode(),
    "json-u-one-character": lambda v: (v[:10] + f"\\u{ord(v[10]):04x}" + v[11:]).encode(),
    "html-one-character": lambda v: (v[:10] + f"&#{ord(v[10])};" + v[11:]).encode(),
}


@pytest.mark.parametrize("name", sorted(FORMS))
def test_each_red_team_form_is_found(name: str) -> None:
    form = FORMS[name](VALUE)
    data = b"log line one\nthe value: " + form + b"\nlog line two\n"
    assert scan(data, [HEX]), name
    scanner = StreamScanner([HEX])
    for at in range(0, len(data), 7):
        scanner.feed(data[at : at + 7])
    assert scanner.found, name


@pytest.mark.parametrize("name", sorted(FORMS))
def test_a_form_of_another_value_is_not_found(name: str) -> None:
    assert not scan(FORMS[name](new_canary()), [HEX]), name


def _random_hex_text(rng: bytes) -> bytes:
    """Lines of other random values in every layout the forms use."""
    lines = []
    for i in range(0, len(rng) - 16, 16):
        other = rng[i : i + 16].hex()
        lines += [other, _uuid(other), ":".join(other[j : j + 2] for j in range(0, 32, 2)),
                  base64.b64encode(other.encode()).decode(), codecs.encode(other, "rot13")]
    return "\n".join(lines).encode()


def test_random_binaries_and_other_random_values_are_not_findings() -> None:
    assert not scan(os.urandom(4 << 20), [HEX])
    assert not scan(_random_hex_text(os.urandom(1 << 16)), [HEX])
    assert not scan(gzip.compress(os.urandom(1 << 20)) + zlib.compress(os.urandom(1 << 16)), [HEX])
    assert not scan(base64.b64encode(os.urandom(1 << 20)), [HEX])
    assert not scan(os.urandom(1 << 16).hex().encode(), [HEX])


# The two known misses (docs/security.md, "Residual risks"): printable bytes of a repr that
# spell a percent escape or an HTML entity (`%8d`), decoded as one (about 1 value in
# 2,300); and a repr of 8 escapes or more whose bytes NFKC changes once decoded (a
# superscript's UTF-8), decoded and folded in one chain.
_LITERAL_ESCAPE = re.compile(rb"%[0-9A-Fa-f]{2}|&(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")


def _known_miss(raw: bytes) -> bool:
    text = repr(raw).encode()
    decoded = raw.decode("utf-8", "surrogateescape")
    folded = any(lead in raw for lead in _COMPAT) and unicodedata.normalize("NFKC", decoded) != decoded
    return bool(_LITERAL_ESCAPE.search(text)) or (text.count(b"\\") >= 8 and folded)


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=16, max_size=16))
# CI found the first: seven escapes only. The others decode to ESC, a soft hyphen, ESC A.
@example(bytes.fromhex("dc6bc9c95e01771b4c7a4a26ef8e28c8"))
@example(bytes.fromhex("99e67e31baf0c0697032005cc2adcebb"))
@example(bytes.fromhex("1b411b5b33316d1b5d1b411b5b33316d"))
@example(b"0123456789abcdef")
def test_a_bytes_repr_of_any_value_is_found(raw: bytes) -> None:
    """A Python bytes repr shows printable bytes as they are and escapes the rest, so the
    value's repr can hold one escape or none (fewer than 8 are decoded around each
    escape), and ESC or a soft hyphen among the bytes it decodes to."""
    assume(not _known_miss(raw))
    value = "rst_" + raw.hex()
    assert scan(b"debug: " + repr(raw).encode() + b"\n", [needle(value)]), repr(raw)


@pytest.mark.xfail(strict=True, reason="a known limit (docs/security.md): printable bytes of a repr that spell "
                   "`%1e` are decoded as an escape; when this passes, update the docs and drop the mark")
def test_a_bytes_repr_whose_characters_spell_an_escape_is_found() -> None:
    raw = bytes.fromhex("8d5a968e3ae0a8500db01cb3bd253165")
    assert _known_miss(raw)
    assert scan(b"debug: " + repr(raw).encode() + b"\n", [needle("rst_" + raw.hex())])


@settings(max_examples=40, deadline=None)
@given(st.binary(min_size=0, max_size=4096), st.sampled_from(sorted(FORMS)), st.binary(max_size=4096))
def test_a_form_is_found_whatever_surrounds_it(before: bytes, name: str, after: bytes) -> None:
    # whatever an agent writes around a form, on its own line, it is still found (NUL
    # bytes left out: a UTF-16 run is read to the next character that is not wide)
    assert scan(before.replace(b"\x00", b"") + b"\n" + FORMS[name](VALUE) + b"\n" + after.replace(b"\x00", b""), [HEX])


@pytest.mark.parametrize("name", ["percent", "json-u", "html-decimal", "base64-of-gzip", "a85", "ansi-between-digits"])
def test_a_form_across_a_block_boundary_is_found(name: str) -> None:
    """The normalised pass runs per block; the end of one block is looked at again with
    the next, so a form that straddles the boundary is still found."""
    form = FORMS[name](VALUE)
    for cut in (1, len(form) // 2, len(form) - 1):
        data = b"x" * (BLOCK_BYTES - cut) + b"\n" + form + b"\n"
        scanner = StreamScanner([HEX])
        for at in range(0, len(data), 1 << 16):
            scanner.feed(data[at : at + (1 << 16)])
        assert scanner.found, (name, cut)


def test_a_form_split_across_stdout_and_stderr_is_found_at_the_seam() -> None:
    form = FORMS["percent"](VALUE)
    out, err = StreamScanner([HEX]), StreamScanner([HEX])
    out.feed(b"noise\n" + form[:40])
    err.feed(form[40:] + b"\nmore")
    assert not out.found and not err.found
    assert out.seam_found(err)


def test_a_request_body_is_scanned_within_a_cpu_bound() -> None:
    body = json.dumps({"messages": [{"role": "user", "content": FORMS["percent"](VALUE).decode()}]}).encode()
    assert scan_body(body, [HEX])
    clean = json.dumps({"messages": [{"role": "user", "content": "hello " * 1000}]}).encode()
    assert not scan_body(clean, [HEX])
    # a body the scan cannot finish within its CPU time is not clean
    assert scan_body(base64.b64encode(os.urandom(4 << 20)), [HEX], cpu_s=0.0)


def test_members_open_at_once_are_bounded_across_nesting() -> None:
    """Truncated containers nested three deep, forty times over, then a gzip of the
    value: every member that ended (or was cut short) is let go, so the last one is still
    opened, and no more than 16 are ever open at once in the whole scan."""
    from evalrig.attempt.streams import ScanBudget

    cut = b"".join(gzip.compress(gzip.compress(gzip.compress(os.urandom(1000))))[:-5] for _ in range(40))
    budget = ScanBudget(64 << 20)
    scanner = StreamScanner([HEX], shared=budget)
    data = cut + gzip.compress(b"log line " * 50 + VALUE.encode())
    most = 0
    for at in range(0, len(data), 100):
        scanner.feed(data[at : at + 100])
        most = max(most, budget.open)
    assert scanner.found
    assert most <= 16


def test_a_sparse_escape_is_found_however_the_stream_is_cut_and_beside_a_far_nul() -> None:
    """A form with one escape is decoded in an excerpt around it; an excerpt is judged
    binary by its own bytes, so a NUL byte 10 KiB away in the same block does not hide it,
    and the run (pipe reads) and verify (1 MiB reads) agree wherever blocks start."""
    form = FORMS["percent-one-character"](VALUE)
    lines = b"".join(b"log line %d of the service\n" % i for i in range(60000))
    # the NUL and the form 10 KiB apart, in the first block however the stream is cut
    data = lines[: (1 << 20) - 20000] + b"\x00" + lines[:10000] + b"\n" + form + b"\n" + lines[: 1 << 20]
    for first in (1 << 20, (1 << 20) - 100, 4096):
        scanner = StreamScanner([HEX])
        scanner.feed(data[:first])
        for at in range(first, len(data), 1 << 16):
            scanner.feed(data[at : at + (1 << 16)])
        assert scanner.found, first
