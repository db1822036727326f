"""Canary scanning, redaction and the output cap, on real files and byte streams."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evalrig.attempt.streams import CappedSink, Redactor, StreamScanner, encoded_forms, scan

CANARY = b"evalrig-canary-7f3a9c0e51d24b68"


def feed_all(scanner: StreamScanner, data: bytes, size: int) -> bool:
    for i in range(0, len(data), size):
        scanner.feed(data[i : i + size])
    return scanner.found


def test_plain_hex_lower_and_upper_are_found() -> None:
    assert scan(b"noise " + CANARY + b" noise", [CANARY])
    assert scan(b"id=" + CANARY.hex().encode() + b";", [CANARY])
    assert scan(b"ID=" + CANARY.hex().upper().encode() + b";", [CANARY])


@pytest.mark.parametrize("offset", [0, 1, 2])
def test_base64_found_at_every_alignment_inside_a_longer_blob(offset: int) -> None:
    blob = base64.b64encode(os.urandom(30) + b"\x01" * offset + CANARY + os.urandom(17))
    # the 30 random bytes keep the alignment at `offset` modulo 3
    assert scan(b"data:" + blob + b"\n", [CANARY])


@pytest.mark.parametrize("offset", [0, 1, 2])
def test_urlsafe_base64_found(offset: int) -> None:
    needle = bytes(range(250, 256)) + CANARY  # bytes that encode to + and /
    blob = base64.urlsafe_b64encode(b"\x02" * (3 + offset) + needle + b"tail")
    assert scan(blob, [needle])


def wrapped(text: bytes, width: int, sep: bytes = b"\n") -> bytes:
    return sep.join(text[i : i + width] for i in range(0, len(text), width))


@pytest.mark.parametrize("offset", range(40))
def test_wrapped_base64_is_found(offset: int) -> None:
    """`base64` wraps at 76 columns; the canary may straddle a line break."""
    blob = base64.b64encode(b"p" * offset + CANARY + b"s" * 30)
    assert scan(wrapped(blob, 76), [CANARY]) and scan(wrapped(blob, 76, b"\r\n"), [CANARY])


def test_wrapped_and_spaced_hex_is_found() -> None:
    hex_text = (b"\x00" * 7 + CANARY).hex().encode()
    assert scan(wrapped(hex_text, 60), [CANARY])  # xxd -p
    assert scan(b" ".join(hex_text[i : i + 2] for i in range(0, len(hex_text), 2)), [CANARY])


@given(size=st.integers(min_value=1, max_value=80))
def test_stream_scanner_finds_wrapped_base64_across_chunks(size: int) -> None:
    data = b"log: " + wrapped(base64.b64encode(b"q" + CANARY + b"tail"), 20) + b"\n"
    assert feed_all(StreamScanner([CANARY]), data, size)


def test_unrelated_text_is_not_a_finding() -> None:
    assert not scan(base64.b64encode(os.urandom(4096)) + os.urandom(4096).hex().encode(), [CANARY])
    assert not scan(b"evalrig-canary-7f3a9c0e51d24b6", [CANARY])  # one byte short


def test_edge_characters_of_each_alignment_are_left_out() -> None:
    # every form must appear in the encoding of the needle at its own alignment
    for form in encoded_forms(CANARY)[3:]:
        assert any(
            form in base64.b64encode(b"\0" * k + CANARY)
            or form in base64.urlsafe_b64encode(b"\0" * k + CANARY)
            for k in range(3)
        )


@given(split=st.integers(min_value=1, max_value=200), size=st.integers(min_value=1, max_value=64))
def test_stream_scanner_finds_a_needle_split_across_chunks(split: int, size: int) -> None:
    data = b"a" * split + CANARY + b"b" * 50
    assert feed_all(StreamScanner([CANARY]), data, size)


@given(size=st.integers(min_value=1, max_value=64))
def test_stream_scanner_finds_base64_split_across_chunks(size: int) -> None:
    data = b"prefix " + base64.b64encode(b"zz" + CANARY + b"zz") + b" suffix"
    assert feed_all(StreamScanner([CANARY]), data, size)


def test_stream_scanner_without_needles_finds_nothing() -> None:
    scanner = StreamScanner([])
    scanner.feed(CANARY)
    assert not scanner.found


def redact_in_chunks(secrets: dict[str, bytes], data: bytes, size: int) -> bytes:
    redactor = Redactor(secrets)
    out = b"".join(redactor.feed(data[i : i + size]) for i in range(0, len(data), size))
    return out + redactor.flush()


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 11, 1000])
def test_redaction_across_chunk_boundaries(size: int) -> None:
    data = b"key=sk-live-12345 and again sk-live-12345."
    out = redact_in_chunks({"API_KEY": b"sk-live-12345"}, data, size)
    assert out == b"key=[REDACTED:API_KEY] and again [REDACTED:API_KEY]."


_NO_FF = st.binary(max_size=40).map(lambda b: b.replace(b"\xff", b""))


@given(before=_NO_FF, after=_NO_FF, size=st.integers(min_value=1, max_value=50))
def test_redaction_keeps_everything_else_byte_for_byte(
    before: bytes, after: bytes, size: int
) -> None:
    secret = b"\xffSECRET\xfe"  # cannot occur in before/after, which hold no 0xff byte
    out = redact_in_chunks({"S": secret}, before + secret + after, size)
    assert out == before + b"[REDACTED:S]" + after


def test_a_longer_secret_containing_a_shorter_one_is_redacted_whole() -> None:
    out = redact_in_chunks({"SHORT": b"abc", "LONG": b"abcdef"}, b"xabcdefy abcx", 2)
    assert out == b"x[REDACTED:LONG]y [REDACTED:SHORT]x"


def test_capped_sink_keeps_a_prefix_counts_everything_and_flags_truncation(tmp_path: Path) -> None:
    sink = CappedSink(tmp_path / "out.txt", 10, {})
    for piece in (b"0123", b"4567", b"89ab", b"cdef"):
        sink.feed(piece)
    sink.close()
    assert (tmp_path / "out.txt").read_bytes() == b"0123456789"
    assert sink.total == 16 and sink.truncated


def test_capped_sink_exactly_at_the_cap_is_not_truncated(tmp_path: Path) -> None:
    sink = CappedSink(tmp_path / "out.txt", 8, {})
    sink.feed(b"01234567")
    sink.close()
    assert (tmp_path / "out.txt").read_bytes() == b"01234567" and not sink.truncated


def test_capped_sink_redacts_what_it_keeps(tmp_path: Path) -> None:
    sink = CappedSink(tmp_path / "out.txt", 1000, {"TOKEN": b"hunter2hunter2"})
    for piece in (b"pw: hunter2", b"hunter2\n"):
        sink.feed(piece)
    sink.close()
    assert (tmp_path / "out.txt").read_bytes() == b"pw: [REDACTED:TOKEN]\n"
    assert sink.total == 19 and not sink.truncated


# -- the canary's random part in the forms the scan looks for (docs/attempts.md, "The canary") --

HEX = b"9f86d081884c7d659a2feaa0c55ad015"  # a canary's random part: 16 bytes as hex
RAW = bytes.fromhex(HEX.decode())


def _forms_of_the_random_part(pad: bytes) -> dict[str, bytes]:
    import gzip

    return {
        "plain": HEX, "upper": HEX.upper(), "mixed": HEX[:10].upper() + HEX[10:], "reversed": HEX[::-1],
        "reversed-upper": HEX[::-1].upper(),
        "b64-text": base64.b64encode(pad + HEX), "b64-upper-text": base64.b64encode(pad + HEX.upper()),
        "b64-raw": base64.b64encode(pad + RAW), "b64url-raw": base64.urlsafe_b64encode(pad + RAW),
        "b32-text": base64.b32encode(pad + HEX), "b32-text-lower": base64.b32encode(pad + HEX).lower(),
        "b32-raw": base64.b32encode(pad + RAW), "hex-text": (pad + HEX).hex().encode(),
        "hex-text-upper": (pad + HEX).hex().upper().encode(), "hex-raw-upper": RAW.hex().upper().encode(),
        "raw": pad + RAW, "gzip": gzip.compress(pad + b"token=rst_" + HEX),
        "gzip-of-b32": gzip.compress(base64.b32encode(HEX)), "gzip-in-gzip": gzip.compress(gzip.compress(HEX)),
    }


@pytest.mark.parametrize("pad", [b"", b"a", b"ab", b"abc", b"abcd"])
def test_every_form_of_the_random_part_is_found(pad: bytes) -> None:
    for name, form in _forms_of_the_random_part(pad).items():
        data = b"noise " + form + b" noise"
        assert scan(data, [HEX]), name
        assert feed_all(StreamScanner([HEX]), data, 7), name


def test_forms_of_another_value_are_not_findings() -> None:
    # another random value (edge characters drop a few bits at each end, so two values
    # alike in all but their first or last digit could match: 16 random bytes never are)
    other = b"4e07408562bedb8b60ce05c1decfe3ad"
    for name, form in _forms_of_the_random_part(b"xy").items():
        assert not scan(b"noise " + form + b" noise", [other]), name
    assert not scan(os.urandom(1 << 20) + base64.b32encode(os.urandom(1 << 16)), [HEX])


def test_a_value_split_between_two_streams_is_found_at_their_seam() -> None:
    out, err = StreamScanner([HEX]), StreamScanner([HEX])
    out.feed(b"x" * 10000 + HEX[:11])
    err.feed(HEX[11:] + b"y" * 10000)
    assert not out.found and not err.found
    assert out.seam_found(err)
    assert not err.seam_found(out)  # stderr then stdout is not the order the rig joins


def test_a_gzip_bomb_costs_no_more_than_the_budget() -> None:
    import gzip
    import time

    bomb = gzip.compress(b"\0" * (256 << 20), compresslevel=1) + gzip.compress(HEX)
    began = time.monotonic()
    scanner = StreamScanner([HEX], budget=8 << 20)
    scanner.feed(bomb)
    assert time.monotonic() - began < 5
    assert not scanner.found  # behind the bomb, past the budget: the documented limit
    assert scan(gzip.compress(b"\0" * (1 << 20)) + gzip.compress(HEX), [HEX])  # within it


def test_base32_fragments_are_the_encoders_own_lower_cased() -> None:
    from evalrig.attempt.streams import _base32_fragments

    for needle in (HEX, RAW, os.urandom(37)):
        for k in range(5):
            encoded = base64.b32encode(b"\x01" * k + needle + b"\x02").lower()
            assert any(f in encoded for f in _base32_fragments(needle)), k
