"""The disk allowance (docs/attempts.md, "Limits"): what an entry counts, and the watch
that polls an attempt's tree (and, under bwrap, its tmpfs mounts) while it runs.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

DISK_BLOCK = 4096
MIN_DISK_ALLOWANCE = 64 << 20
MAX_NEW_ENTRIES = 100_000
"""Entries (files, folders, links, FIFOs...) an attempt may add to its root; beyond, or
beyond the disk allowance, the agent is killed (an `agent_error`)."""


def disk_allowance(max_evidence_bytes: int) -> int:
    """What the agent's code may add to its root, in an attempt or an untrusted call:
    four times the evidence cap, at least 64 MiB."""
    return max(4 * max_evidence_bytes, MIN_DISK_ALLOWANCE)


def entry_bytes(size: int) -> int:
    """What one entry of any kind counts against the disk allowance (docs/attempts.md,
    "Limits"): its size rounded up to whole 4 KiB blocks, and at least one block, since
    every file, folder, link and FIFO takes an inode and (on tmpfs, for a link with a
    long target too) a page of its own."""
    return max(1, -(-size // DISK_BLOCK)) * DISK_BLOCK


def _tree_bytes(root: Path, stop_at: tuple[int, int] | None = None) -> tuple[int, int]:
    """(bytes as `entry_bytes` counts them, entries) of root and everything under it.

    No link followed, no recursion, any depth or name length (evidence.iter_tree). With
    `stop_at` (bytes, entries) the count ends as soon as either is passed.
    """
    from evalrig.attempt.evidence import Visit, iter_tree

    total, count = 0, 0

    def room() -> int:  # a folder's listing need not go past the entry limit
        return (stop_at[1] - count + 1) if stop_at is not None else 1 << 62

    try:
        total, count = entry_bytes(os.lstat(root).st_size), 1
        for v in iter_tree(root, room=room):
            if isinstance(v, Visit):
                total += entry_bytes(v.st.st_size)
                count += 1
                if stop_at is not None and (total > stop_at[0] or count > stop_at[1]):
                    break
            elif v.stop and v.why == "too many entries":
                count = max(count, (stop_at[1] if stop_at is not None else count) + 1)
                break
    except OSError:
        pass  # the root is gone: nothing left to count
    return total, count


_WATCH_FIRST_S = 0.075


class _DiskWatch:
    """Polls the attempt's disk use; the interval grows with the cost of one walk.

    The use is the watched tree plus, under bwrap, what the sandbox's own tmpfs mounts
    (/tmp and /dev/shm) hold: those are RAM, invisible from the tree,
    and bwrap before 0.9 cannot cap /tmp's size. They are read through /proc/PID/root of
    the sandbox's init, one statvfs each.
    """

    def __init__(self, watch: tuple[Path, int], max_entries: int | None = None) -> None:
        self.root, self.limit = watch
        self.max_entries = max_entries if max_entries is not None else 1 << 62
        # The first look one interval in: at the start the tree is the rig's own.
        self.next_at = time.monotonic() + _WATCH_FIRST_S
        self.mounts: list[str] = []
        self.private_pid: int | None = None

    def see_sandbox(self, init_pid: int) -> None:
        self.mounts = [f"/proc/{init_pid}/root/tmp", f"/proc/{init_pid}/root/dev/shm"]

    def see_private(self, pid: int) -> None:
        """process as root with private mounts (evalrig-drop --private, in `pid` or, after
        `unshare --fork`, its child): its fresh /tmp, /var/tmp and /dev/shm, each counted
        once it is a mount of its own (until the helper has made them, the path is still the
        host's folder, which is not the agent's)."""
        self.private_pid = pid

    def _private_mounts(self) -> list[str]:
        pid = self.private_pid
        assert pid is not None
        for p in (pid, *_children(pid)):
            if not _same_mount(f"/proc/{p}/root/dev/shm", "/dev/shm"):
                return [m for m in (f"/proc/{p}/root{d}" for d in _PRIVATE)
                        if not _same_mount(m, m[len(f"/proc/{p}/root"):])]
        return []

    def exceeded(self, now: float) -> bool:
        if now < self.next_at:
            return False
        began = time.monotonic()
        size, entries = 0, 0
        for m in self.mounts if self.private_pid is None else self._private_mounts():
            used, inodes = _mount_used(m)
            size, entries = size + used, entries + inodes
        tree, count = _tree_bytes(self.root, (self.limit - size, self.max_entries - entries))
        size, entries = size + tree, entries + count
        cost = time.monotonic() - began
        self.next_at = time.monotonic() + max(0.075, 10 * cost)
        return size > self.limit or entries > self.max_entries


_PRIVATE = ("/tmp", "/var/tmp", "/dev/shm")


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def _same_mount(a: str, b: str) -> bool:
    try:
        return os.stat(a).st_dev == os.stat(b).st_dev
    except OSError:
        return True  # gone: nothing to count


def _mount_used(path: str) -> tuple[int, int]:
    """(bytes, inodes) in use on a mount; an empty file costs an inode and no block."""
    try:
        st = os.statvfs(path)
    except OSError:
        return 0, 0  # the sandbox is gone, or not ours to look into
    inodes = max(st.f_files - st.f_ffree, 0) if st.f_files else 0
    return (st.f_blocks - st.f_bfree) * st.f_frsize, inodes
