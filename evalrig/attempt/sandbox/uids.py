"""The host-wide uid lease (docs/attempts.md, "Whose uid"): every sandbox the rig runs as
root runs as a uid of a pool, leased for the sandbox's lifetime, never shared by two live
sandboxes of any run on the host.

A lease is an exclusive flock(2) on one lock file per uid in `LEASE_DIR`, a folder of
root's that no one else may write; the kernel drops the lock when the holder closes it or
dies, so a rig killed with -9 leaves nothing held. Two pools: the agents' (attempts,
estimates, the agent's code run for a verifier) and the judges' (command verifiers and
episode drivers), never overlapping.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path
from types import TracebackType
from typing import Literal

Pool = Literal["agents", "judges"]

POOLS: dict[str, tuple[int, int]] = {"agents": (61000, 1000), "judges": (62000, 1000)}
"""pool -> (first uid, how many). The agents' pool starts at BASE_UID."""

LEASE_DIR = Path("/run/evalrig/uids")
"""One lock file per uid (`<uid>.lock`): root's, 0700; under the temporary folder where
there is no /run."""

_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_LOCK = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class Lease:
    """One uid, held until `release()` (or the end of a `with` block)."""

    def __init__(self, uid: int, fd: int) -> None:
        self.uid = uid
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # the lock goes with the last descriptor
            self._fd = -1

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def lease_uid(pool: Pool = "agents", prefer: int = 0, directory: Path | None = None) -> Lease:
    """A uid of `pool` that no live sandbox on the host holds, leased until released.

    `prefer` is where the search starts (a run's slot: the same uid for the same slot when
    nothing else runs, so the search costs one open and one flock). OSError when the pool
    has no free uid or the lease folder is not root's alone."""
    first, size = POOLS[pool]
    folder = _lease_dir(directory or _default_dir())
    try:
        for i in range(size):
            uid = first + (prefer + i) % size
            fd = os.open(f"{uid}.lock", _OPEN_LOCK, 0o600, dir_fd=folder)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    continue
                raise
            return Lease(uid, fd)
    finally:
        os.close(folder)
    raise OSError(errno.EBUSY, f"every uid of the {pool} pool ({first}..{first + size - 1}) "
                               "is leased by a live sandbox on this host")


def _default_dir() -> Path:
    if os.path.isdir("/run"):
        return LEASE_DIR
    import tempfile

    return Path(tempfile.gettempdir()) / f"evalrig-{os.geteuid()}" / "uids"


def _lease_dir(path: Path) -> int:
    """An open descriptor of the lease folder, made if missing; refused unless it (and
    the folder holding it) is a directory of the rig's user that no one else may write."""
    for folder, mode in ((path.parent, 0o755), (path, 0o700)):
        try:
            os.mkdir(folder, mode)
        except FileExistsError:
            pass
    parent = os.open(path.parent, _OPEN_DIR)
    try:
        _closed(parent, path.parent)
        fd = os.open(path.name, _OPEN_DIR, dir_fd=parent)
    finally:
        os.close(parent)
    try:
        _closed(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _closed(fd: int, path: Path) -> None:
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise OSError(errno.EPERM, f"the uid lease folder {path} must be a directory of uid "
                                   f"{os.geteuid()} that no one else may write")
