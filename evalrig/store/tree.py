"""Content hash of a directory tree, with the byte framing `seal` uses (docs/checkpoint.md, "Sealing and what it covers").

Every entry except the excluded names, in order of its `/`-separated relative path
compared as bytes; for each: a type byte (`f` file, `x` owner-executable file, `l`
symbolic link, never followed), the path, NUL, the content length in decimal, NUL, the
content (a link's content is its target). sha256 over the stream, `sha256:<hex>`.
Directories contribute only through their entries. Sockets, FIFOs and devices are refused.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from evalrig.core.errors import invalid

_CHUNK = 1 << 20


@dataclass(frozen=True)
class TreeDigest:
    digest: str
    files: int
    bytes: int


def _entries(root: Path, exclude: frozenset[str],
             exclude_dirs: bool = True) -> list[tuple[bytes, bytes, os.stat_result]]:
    """(relative path, absolute path, lstat) of every non-directory entry.

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
                    walk(e.path, r)
                elif stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                    out.append((r, e.path, st))
                else:
                    kind = "socket" if stat.S_ISSOCK(st.st_mode) else (
                        "FIFO" if stat.S_ISFIFO(st.st_mode) else "device")
                    raise invalid(
                        f"{kind} at {os.fsdecode(r)} cannot be part of a sealed tree",
                        file=root,
                        hint="remove it (only regular files and symbolic links are hashed)",
                    )

    walk(root_s, b"")
    out.sort(key=lambda t: t[0])
    return out


def hash_tree(root: Path, exclude: frozenset[str] = frozenset(),
              exclude_dirs: bool = True) -> TreeDigest:
    """The tree's content hash; `exclude` names top-level entries to leave out (SEAL.json).

    With `exclude_dirs=False` only a file or link of such a name is left out: a directory
    of that name is hashed like any other (a checkpoint's SEAL.json/ must not hide content).
    """
    root = Path(root)
    if not root.is_dir():
        raise invalid("not a directory", file=root, hint="give the path of an existing directory")
    h = hashlib.sha256()
    files = 0
    total = 0
    for rel, path, st in _entries(root, exclude, exclude_dirs):
        if stat.S_ISLNK(st.st_mode):
            target = os.fsencode(os.readlink(path))
            h.update(b"l" + rel + b"\0" + str(len(target)).encode() + b"\0" + target)
            total += len(target)
        else:
            kind = b"x" if st.st_mode & stat.S_IXUSR else b"f"
            h.update(kind + rel + b"\0" + str(st.st_size).encode() + b"\0")
            # O_NOFOLLOW: an entry swapped for a link since the walk is refused, not followed.
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                n = 0
                while block := os.read(fd, _CHUNK):
                    h.update(block)
                    n += len(block)
            finally:
                os.close(fd)
            if n != st.st_size:
                raise invalid(f"{os.fsdecode(rel)} changed while it was hashed", file=root,
                              hint="stop whatever writes to it and seal again")
            total += n
        files += 1
    return TreeDigest("sha256:" + h.hexdigest(), files, total)
