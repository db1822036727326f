"""Content hash of a directory tree, with the byte framing `seal` uses (docs/checkpoint.md, "Sealing and what it covers").

Every entry except the excluded names, in order of its `/`-separated relative path
compared as bytes, then sha256 over the stream, `sha256:<hex>`. Symbolic links are never
followed; sockets, FIFOs and devices are refused. Two framings (the hash version):

- version 1 (task files, evidence, and checkpoints sealed before version 2): files and
  links only, each a type byte (`f` file, `x` owner-executable file, `l` link), the path,
  NUL, the content length in decimal, NUL, the content (a link's content is its target).
  Directories contribute only through their entries.
- version 2 (checkpoints): directories are entries too, and every entry's permission bits
  are hashed: type (`d`, `f` or `l`), the path, NUL, `st_mode & 0o7777` as four octal
  digits (links `0777`), NUL, the length in decimal, NUL, the content (a directory's is
  empty). The root itself is not an entry. An added empty folder or a changed mode bit
  changes the id.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evalrig.core.errors import invalid
from evalrig.models.run import HashVersion

_CHUNK = 1 << 20


@dataclass(frozen=True)
class TreeDigest:
    digest: str
    files: int
    bytes: int
    version: HashVersion = 1


def _entries(root: Path, exclude: frozenset[str], exclude_dirs: bool = True,
             dirs: bool = False) -> list[tuple[bytes, bytes, os.stat_result]]:
    """(relative path, absolute path, lstat) of every non-directory entry, and of every
    directory too when `dirs`, sorted by relative path as bytes.

    The lstat is the walk's own, kept so that hashing does not stat every file again.
    """
    out: list[tuple[bytes, bytes, os.stat_result]] = []
    root_s = os.fsencode(root)

    def walk(dir_abs: bytes, rel: bytes) -> None:
        with os.scandir(dir_abs) as it:
            for e in it:
                name = e.name
                r = rel + b"/" + name if rel else name
                st = e.stat(follow_symlinks=False)
                if (not rel and os.fsdecode(name) in exclude
                        and (exclude_dirs or not stat.S_ISDIR(st.st_mode))):
                    continue
                if stat.S_ISDIR(st.st_mode):
                    if dirs:
                        out.append((r, e.path, st))
                    walk(e.path, r)
                elif stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                    out.append((r, e.path, st))
                else:
                    kind = "socket" if stat.S_ISSOCK(st.st_mode) else (
                        "FIFO" if stat.S_ISFIFO(st.st_mode) else "device")
                    raise invalid(
                        f"{kind} at {os.fsdecode(r)} cannot be part of a sealed tree",
                        file=root,
                        hint="remove it (only regular files, folders and symbolic links are hashed)",
                    )

    walk(root_s, b"")
    out.sort(key=lambda t: t[0])
    return out


def _head(version: HashVersion, rel: bytes, st: os.stat_result, length: int) -> bytes:
    """An entry's framing up to its content, in the given hash version."""
    if stat.S_ISLNK(st.st_mode):
        kind, mode = b"l", 0o777
    elif stat.S_ISDIR(st.st_mode):
        kind, mode = b"d", stat.S_IMODE(st.st_mode)
    else:
        kind, mode = b"f", stat.S_IMODE(st.st_mode)
        if version == 1 and st.st_mode & stat.S_IXUSR:
            kind = b"x"
    if version == 1:
        return kind + rel + b"\0" + str(length).encode() + b"\0"
    return kind + rel + b"\0" + b"%04o" % mode + b"\0" + str(length).encode() + b"\0"


def hash_trees(root: Path, versions: Sequence[HashVersion], exclude: frozenset[str] = frozenset(),
               exclude_dirs: bool = True) -> dict[HashVersion, TreeDigest]:
    """The tree's content hash in each of `versions`, from one walk and one read of every file.

    `exclude` names top-level entries to leave out (SEAL.json). With `exclude_dirs=False`
    only a file or link of such a name is left out: a directory of that name is hashed like
    any other (a checkpoint's SEAL.json/ must not hide content).
    """
    root = Path(root)
    if not root.is_dir():
        raise invalid("not a directory", file=root, hint="give the path of an existing directory")
    hashers = {v: hashlib.sha256() for v in dict.fromkeys(versions)}
    files = 0
    total = 0
    for rel, path, st in _entries(root, exclude, exclude_dirs, dirs=2 in hashers):
        if stat.S_ISDIR(st.st_mode):  # version 2 only: an entry with empty content
            hashers[2].update(_head(2, rel, st, 0))
            continue
        if stat.S_ISLNK(st.st_mode):
            target = os.fsencode(os.readlink(path))
            for v, h in hashers.items():
                h.update(_head(v, rel, st, len(target)) + target)
            total += len(target)
        else:
            for v, h in hashers.items():
                h.update(_head(v, rel, st, st.st_size))
            # O_NOFOLLOW: an entry swapped for a link since the walk is refused, not followed.
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                n = 0
                while block := os.read(fd, _CHUNK):
                    for h in hashers.values():
                        h.update(block)
                    n += len(block)
            finally:
                os.close(fd)
            if n != st.st_size:
                raise invalid(f"{os.fsdecode(rel)} changed while it was hashed", file=root,
                              hint="stop whatever writes to it and seal again")
            total += n
        files += 1
    return {v: TreeDigest("sha256:" + h.hexdigest(), files, total, v) for v, h in hashers.items()}


def hash_tree(root: Path, exclude: frozenset[str] = frozenset(),
              exclude_dirs: bool = True, version: HashVersion = 1) -> TreeDigest:
    """The tree's content hash in one hash version (see hash_trees)."""
    return hash_trees(root, (version,), exclude, exclude_dirs)[version]
