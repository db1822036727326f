"""Evidence copy: regular files only, no links followed, FIFOs skipped, cap, redaction, canary."""

from __future__ import annotations

import base64
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from evalrig.evidence import collect, glob_regex, redact_bytes, scan_file


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "attempt"
    for d in ("out", "work/src/pkg", "agent"):
        (root / d).mkdir(parents=True)
    (root / "out" / "answer.txt").write_text("42\n")
    (root / "work" / "src" / "app.py").write_text("print(1)\n")
    (root / "work" / "src" / "pkg" / "mod.py").write_text("x = 1\n")
    (root / "work" / "src" / "notes.txt").write_text("n\n")
    (root / "agent" / "agent.py").write_text("pass\n")
    return root


def _collect(root: Path, ev: Path, globs: Sequence[str] = (), cap: int = 1 << 20,
             secrets: Mapping[str, bytes] | None = None, canary: Sequence[bytes] = ()):
    return collect(root, ev, globs, cap, secrets or {}, canary)


def test_out_always_and_globs_at_their_paths(tmp_path: Path) -> None:
    root = _root(tmp_path)
    ev = tmp_path / "ev"
    rep = _collect(root, ev, ["work/**/*.py"])
    assert rep.files == ["out/answer.txt", "work/src/app.py", "work/src/pkg/mod.py"]
    assert (ev / "work/src/pkg/mod.py").read_text() == "x = 1\n"
    assert rep.bytes == 3 + 9 + 6 and not rep.truncated and rep.skipped == []


@pytest.mark.parametrize(
    ("pattern", "path", "match"),
    [
        ("work/**/*.py", "work/a.py", True),
        ("work/**/*.py", "work/x/y/a.py", True),
        ("work/**/*.py", "work/a.pyc", False),
        ("work/*.py", "work/x/a.py", False),
        ("work/**", "work/x/a.txt", True),
        ("work/a?.txt", "work/ab.txt", True),
        ("work/[ab].txt", "work/b.txt", True),
        ("work/[!ab].txt", "work/b.txt", False),
        ("prompt.md", "prompt.md", True),
    ],
)
def test_glob(pattern: str, path: str, match: bool) -> None:
    rx = glob_regex(pattern)
    assert rx is not None and (rx.fullmatch(path) is not None) is match


@pytest.mark.parametrize("pattern", ["/etc/passwd", "../x", "work/../../x", ""])
def test_glob_outside_root_refused(pattern: str) -> None:
    assert glob_regex(pattern) is None


def test_symlink_not_followed(tmp_path: Path) -> None:
    root = _root(tmp_path)
    (root / "out" / "etc").symlink_to("/etc")
    (root / "out" / "passwd").symlink_to("/etc/passwd")
    ev = tmp_path / "ev"
    rep = _collect(root, ev)
    assert rep.files == ["out/answer.txt"]
    assert sorted(rep.skipped) == ["out/etc (symlink)", "out/passwd (symlink)"]
    assert sorted(os.listdir(ev / "out")) == ["answer.txt"]


def test_fifo_skipped_without_hanging(tmp_path: Path) -> None:
    root = _root(tmp_path)
    os.mkfifo(root / "out" / "pipe")
    done = threading.Event()
    result: list[object] = []

    def go() -> None:
        result.append(_collect(root, tmp_path / "ev"))
        done.set()

    threading.Thread(target=go, daemon=True).start()
    assert done.wait(10), "collect hung on a FIFO"
    rep = result[0]
    assert rep.skipped == ["out/pipe (fifo)"]  # type: ignore[attr-defined]


def test_reserved_names_skipped(tmp_path: Path) -> None:
    root = _root(tmp_path)
    (root / "verifier").mkdir()
    (root / "verifier" / "reward.json").write_text('{"reward": 1}')
    (root / "stdout.txt").write_text("forged")
    rep = _collect(root, tmp_path / "ev", ["**"])
    assert "verifier/reward.json (reserved name)" in rep.skipped
    assert "stdout.txt (reserved name)" in rep.skipped
    assert not (tmp_path / "ev" / "verifier").exists()


def test_a_name_that_is_not_utf8_is_skipped_and_noted(tmp_path: Path) -> None:
    # The manifest's digest table is JSON: such a name would make the bundle unverifiable.
    root = _root(tmp_path)
    with open(os.fsencode(root / "out") + b"/\xff.txt", "wb") as f:
        f.write(b"x")
    rep = _collect(root, tmp_path / "ev")
    assert rep.skipped == ["out/\\xff.txt (name is not UTF-8)"]
    assert rep.files == ["out/answer.txt"]
    assert os.listdir(tmp_path / "ev" / "out") == ["answer.txt"]


def test_the_answer_goes_first_within_the_cap(tmp_path: Path) -> None:
    # A big log sorted before the answer must not push the answer out of the cap.
    root = _root(tmp_path)
    (root / "out" / "aaa.log").write_bytes(b"x" * 1000)
    (root / "out" / "answer.json").write_text("1")
    rep = _collect(root, tmp_path / "ev", cap=500)
    assert rep.truncated
    assert rep.files == ["out/answer.json", "out/answer.txt"]


def test_cap_stops_and_marks_truncated(tmp_path: Path) -> None:
    root = _root(tmp_path)
    (root / "out" / "big.bin").write_bytes(b"x" * 1000)
    rep = _collect(root, tmp_path / "ev", ["work/**/*.py"], cap=500)
    assert rep.truncated
    assert "out/answer.txt" in rep.files and "out/big.bin" not in rep.files
    # nothing after the file that did not fit (sorted: answer.txt, big.bin, then work/...)
    assert rep.files == ["out/answer.txt"]
    assert rep.bytes <= 500


def test_cap_counts_bytes_already_spent(tmp_path: Path) -> None:
    root = _root(tmp_path)
    rep = collect(root, tmp_path / "ev", [], 10, {}, [], already=9)
    assert rep.truncated and rep.files == []


def test_secret_redacted_in_copied_files(tmp_path: Path) -> None:
    root = _root(tmp_path)
    secret = b"sk-live-0123456789abcdef"
    # a secret straddling the 1 MiB read boundary is still caught
    big = b"a" * ((1 << 20) - 5) + secret + b"tail"
    (root / "out" / "big.txt").write_bytes(big)
    (root / "out" / "small.txt").write_bytes(b"key=" + secret + b"\n")
    ev = tmp_path / "ev"
    _collect(root, ev, cap=4 << 20, secrets={"KEY": secret})
    for f in ("big.txt", "small.txt"):
        assert secret not in (ev / "out" / f).read_bytes()
    assert (ev / "out" / "small.txt").read_bytes() == b"key=[REDACTED:KEY]\n"
    assert (ev / "out" / "big.txt").read_bytes().endswith(b"[REDACTED:KEY]tail")


def test_redact_bytes_overlapping_secrets() -> None:
    assert redact_bytes(b"xxABCDyy", {"S": b"ABC", "L": b"ABCD"}) == b"xx[REDACTED:L]yy"
    assert redact_bytes(b"nothing", {}) == b"nothing"


@pytest.mark.parametrize("form", ["plain", "base64", "hex"])
def test_canary_found_in_evidence(tmp_path: Path, form: str) -> None:
    root = _root(tmp_path)
    canary = b"rst_0123456789abcdef0123456789abcdef"
    enc = {"plain": canary, "base64": base64.b64encode(b"prefix:" + canary), "hex": canary.hex().encode()}[form]
    (root / "work" / "src" / "leak.py").write_bytes(b"# " + enc + b"\n")
    rep = _collect(root, tmp_path / "ev", ["work/**/*.py"], canary=[canary])
    assert rep.canary_in == ["work/src/leak.py"]


def test_canary_absent(tmp_path: Path) -> None:
    rep = _collect(_root(tmp_path), tmp_path / "ev", ["work/**"], canary=[b"rst_" + b"f" * 32])
    assert rep.canary_in == []


def test_scan_file_across_chunks(tmp_path: Path) -> None:
    canary = b"rst_" + b"e" * 32
    p = tmp_path / "f"
    p.write_bytes(b"z" * ((1 << 20) - 10) + canary.hex().encode())
    assert scan_file(p, [canary])
    assert not scan_file(tmp_path / "missing", [canary])


def test_out_itself_a_symlink_is_not_followed(tmp_path: Path) -> None:
    root = tmp_path / "attempt"
    (root / "work").mkdir(parents=True)
    (root / "out").symlink_to("/etc")
    (root / "work" / "src").symlink_to("/usr/lib/python3")
    rep = _collect(root, tmp_path / "ev", ["work/**/*.py"])
    assert rep.files == [] and rep.skipped == ["out (symlink)"]
    assert os.listdir(tmp_path / "ev" / "out") == []


def test_exclude_and_duplicate_globs(tmp_path: Path) -> None:
    root = _root(tmp_path)
    (root / "home").mkdir()
    (root / "home" / ".release-token").write_text("rst_x\n")
    rep = collect(root, tmp_path / "ev", ["out/**", "**"], 1 << 20, {}, [],
                  exclude=frozenset({"home/.release-token"}))
    assert rep.files.count("out/answer.txt") == 1
    assert "home/.release-token" not in rep.files and "agent/agent.py" in rep.files
