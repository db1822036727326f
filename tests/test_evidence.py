"""Evidence copy: regular files only, no links followed, FIFOs skipped, cap, redaction, canary."""

from __future__ import annotations

import base64
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import orjson
import pytest

from evalrig.attempt import evidence
from evalrig.attempt.evidence import collect, redact_bytes, scan_file
from evalrig.models.globs import glob_regex


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


# -- the walk, the index and removal on trees an agent can make (#10 attacks 7-10) --------


def _deep(base: Path, depth: int, width: int) -> None:
    """`depth` nested folders of `width`-character names under base, made fd-relatively
    (the full path is far past PATH_MAX), a file and a link at the bottom."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(depth):
            name = str(i % 10) * width
            os.mkdir(name, dir_fd=fd)
            nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        with open(os.open("deep.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as f:
            f.write("bottom\n")
        os.symlink("deep.txt", "link", dir_fd=fd)
        os.fchmod(fd, 0o500)
    finally:
        os.close(fd)


@pytest.mark.parametrize(("depth", "width"), [(20, 250), (1200, 3)])
def test_deep_and_long_trees_are_walked_noted_and_removed(tmp_path: Path, depth: int, width: int) -> None:
    from evalrig.attempt.evidence import remove_tree

    root = _root(tmp_path)
    _deep(root / "out", depth, width)
    ev = tmp_path / "ev"
    rep = _collect(root, ev)
    assert rep.files == ["out/answer.txt"]
    assert rep.skipped_count == 2 and all("path too long to keep" in s for s in rep.skipped)
    index = orjson.loads((ev / "evidence_index.json").read_bytes())
    paths = [e["path"] for e in index["entries"]]
    assert len(paths) == len(set(paths)) or depth == 1200  # cut paths may coincide
    assert sum(e["type"] == "dir" for e in index["entries"]) == 4 + depth  # out, work, work/src, pkg
    assert all(len(p.encode()) <= 1024 + 32 for p in paths)
    remove_tree(root)
    assert not root.exists()


def test_remove_tree_opens_up_read_only_folders_and_leaves_links_alone(tmp_path: Path) -> None:
    from evalrig.attempt.evidence import remove_tree

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep\n")
    root = tmp_path / "root"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f").write_text("x")
    os.symlink(outside, root / "a" / "to-outside")
    os.chmod(root / "a" / "b", 0)
    os.chmod(root / "a", 0o500)
    remove_tree(root)
    assert not root.exists() and (outside / "keep.txt").read_text() == "keep\n"
    remove_tree(root)  # gone already: nothing to do


def test_the_index_lists_every_entry_but_agent_kept_or_not(tmp_path: Path) -> None:
    root = _root(tmp_path)
    os.symlink("/etc/passwd", root / "stray-link")
    os.mkfifo(root / "stray-fifo")
    (root / "empty").mkdir()
    ev = tmp_path / "ev"
    _collect(root, ev, ["work/**/*.py"])
    index = orjson.loads((ev / "evidence_index.json").read_bytes())
    by_path = {e["path"]: (e["type"], e["kept"]) for e in index["entries"]}
    assert by_path == {
        "empty": ("dir", False), "out": ("dir", False), "out/answer.txt": ("file", True),
        "stray-fifo": ("fifo", False), "stray-link": ("link", False), "work": ("dir", False),
        "work/src": ("dir", False), "work/src/app.py": ("file", True), "work/src/notes.txt": ("file", False),
        "work/src/pkg": ("dir", False), "work/src/pkg/mod.py": ("file", True),
    }
    assert index["truncated"] is False and index["schema_version"] == "1.0"
    assert next(e for e in index["entries"] if e["path"] == "stray-link")["size"] == len("/etc/passwd")
    from evalrig.models.run import EvidenceIndex

    EvidenceIndex.model_validate(index)  # the published format


def test_reserved_names_at_the_root_are_never_taken_and_always_noted(tmp_path: Path) -> None:
    root = _root(tmp_path)
    (root / "evidence_index.json").write_text('{"entries": []}')
    (root / "driver").mkdir()
    (root / "network.jsonl").write_text("{}\n")
    (root / "model.jsonl").write_text("{}\n")  # the gateway's names, too: an agent cannot forge its calls
    (root / "model").mkdir()
    ev = tmp_path / "ev"
    rep = _collect(root, ev, ["*", "driver/**", "model/**"])
    assert {"evidence_index.json (reserved name)", "driver (reserved name)",
            "network.jsonl (reserved name)", "model.jsonl (reserved name)",
            "model (reserved name)"} <= set(rep.skipped)
    assert orjson.loads((ev / "evidence_index.json").read_bytes())["entries"]  # the rig's own


def test_notes_are_bounded_with_a_count(tmp_path: Path) -> None:
    root = _root(tmp_path)
    for i in range(300):
        os.symlink("answer.txt", root / "out" / (f"{i:04d}" + "n" * 250))
    rep = _collect(root, tmp_path / "ev")
    assert len(rep.skipped) == 100 and rep.skipped_count == 300
    assert all(len(s.encode()) < 256 + 40 for s in rep.skipped)
    assert rep.skipped[0].endswith("bytes] (symlink)")


def test_an_unreadable_folder_is_noted_and_the_walk_goes_on(tmp_path: Path) -> None:
    from evalrig.attempt.evidence import Walk, walk

    root = _root(tmp_path)
    (root / "out" / "locked").mkdir()
    (root / "out" / "zz.txt").write_text("after\n")
    real_open = os.open

    def refuse(path, flags, *a, **k):  # type: ignore[no-untyped-def]
        if path == "locked":
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *a, **k)

    os.open = refuse  # type: ignore[assignment]
    try:
        w: Walk = walk(root)
    finally:
        os.open = real_open  # type: ignore[assignment]
    assert ("out/locked", "unreadable folder: Permission denied") in w.problems
    assert "out/zz.txt" in [e.rel for e in w.entries]


def test_canary_in_names_links_and_gzip(tmp_path: Path) -> None:
    import gzip

    needle = b"0123456789abcdef0123456789abcdef"
    root = _root(tmp_path)
    (root / "work" / needle.decode().upper()).mkdir()
    rep = _collect(root, tmp_path / "ev1", canary=[needle])
    assert rep.canary_in == ["evidence_index.json"]
    root2 = tmp_path / "two"
    (root2 / "out").mkdir(parents=True)
    os.symlink("x/" + needle.decode()[::-1], root2 / "out" / "l")
    (root2 / "out" / "z.gz").write_bytes(gzip.compress(b"token " + needle))
    rep = _collect(root2, tmp_path / "ev2", canary=[needle])
    assert rep.canary_in == ["out/z.gz", "link targets"]


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_no_walk_leaves_a_descriptor_open(tmp_path: Path) -> None:
    """Every walk closes what it opened, also when its caller stops early (a run makes
    thousands of attempts in one process: one descriptor per attempt adds up)."""
    from evalrig.attempt.sandbox.disk import _tree_bytes

    root = tmp_path / "root"
    (root / "out" / "deep").mkdir(parents=True)
    (root / "out" / "a.txt").write_text("a")
    (root / "b.txt").write_text("b")
    before = _open_fds()
    list(evidence.iter_tree(root))
    for _ in evidence.iter_tree(root):
        break
    _tree_bytes(root)
    _tree_bytes(root, (1 << 30, 1))  # stops at its first folder's listing
    evidence.walk(root)
    evidence.collect(root, tmp_path / "evidence", [], 1 << 20, {}, [b"0123456789abcdef" * 2])
    evidence.remove_tree(root)
    assert _open_fds() == before


def test_rederive_canary_spends_one_budget_over_the_stored_evidence_and_says_when_it_runs_out(
        tmp_path: Path) -> None:
    """`verify`'s re-scan shares one decompression budget across the files as the attempt's
    scan did: two files of 40 MiB of zeros each fit a per-file budget, not one in all."""
    import bz2

    bomb = bz2.compress(bytes(40 << 20))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "a.bin").write_bytes(bomb)
    assert evidence.rederive_canary(tmp_path, b"0123456789abcdef0123456789abcdef") == []
    (tmp_path / "out" / "b.bin").write_bytes(bomb)
    assert evidence.rederive_canary(tmp_path, b"0123456789abcdef0123456789abcdef") == [
        "scan incomplete: decompression budget"]
