"""What an agent's uid leaves on the host where `process` as root could not give it private
mount and IPC namespaces (docs/security.md, "What `process` leaves on the host").

After such a launch the rig removes every file, folder and IPC object the launch's uid owns
outside its own directories: in the folders any user may write (/tmp, /var/tmp, /dev/shm,
/dev/mqueue and the world-writable folders below them) and System V shared memory, message
queues and semaphore sets. The uid is leased to that launch alone (evalrig.attempt.sandbox.uids),
so whatever it owns there is the launch's. Returned: what was removed, for the record.
"""

from __future__ import annotations

import ctypes
import os
import stat
from collections.abc import Sequence
from pathlib import Path

SCRATCH = ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue", "/run/lock")  # /var/lock is /run/lock
_IPC_RMID = 0
_WALK_MAX = 100_000  # entries looked at per sweep: a flood of names is removed with its folder
_RECORD_MAX = 100


def sweep(uid: int, keep: Sequence[Path]) -> list[str]:
    """Remove what `uid` owns in the shared scratch folders and in System V IPC (never
    below `keep`, the launch's own directories); what was removed, at most 100 entries
    with a last one saying how many more."""
    kept = {os.path.abspath(p) for p in keep}
    removed: list[str] = []
    for top in SCRATCH:
        _sweep_folder(top, uid, kept, removed)
    removed += _sweep_ipc(uid)
    if len(removed) > _RECORD_MAX:
        removed = removed[: _RECORD_MAX - 1] + [f"... and {len(removed) - _RECORD_MAX + 1} more"]
    return removed


def _sweep_folder(top: str, uid: int, kept: set[str], removed: list[str]) -> None:
    """Only folders the uid could write into are searched: world-writable ones (what it
    owns is removed whole, with everything below it)."""
    from evalrig.attempt.evidence import remove_tree

    stack = [top]
    looked = 0
    while stack:
        if looked >= _WALK_MAX:
            # a flood of names can starve the sweep: say so rather than stop silently
            removed.append(f"{top}: the sweep stopped after {_WALK_MAX} entries; what lies beyond was not searched")
            return
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            looked += 1
            path = entry.path
            if path in kept or any(k.startswith(path + "/") for k in kept):
                continue  # the launch's own, or the way to it
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if st.st_uid == uid:
                try:
                    if stat.S_ISDIR(st.st_mode):
                        remove_tree(path)
                    else:
                        os.unlink(path)
                    removed.append(path)
                except OSError:
                    removed.append(f"{path} (could not be removed)")
            elif stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_IWOTH:
                stack.append(path)


def _libc() -> ctypes.CDLL:
    from evalrig.attempt.sandbox.host import HOST

    return HOST.get("libc", lambda: ctypes.CDLL(None, use_errno=True))


def _sweep_ipc(uid: int) -> list[str]:
    """System V objects whose owner or creator is `uid`, from /proc/sysvipc."""
    libc = _libc()
    removed = []
    # (file, what, column of the owner's uid, column of the creator's uid, remover)
    kinds = (("shm", "shared memory segment", 7, 9, lambda i: libc.shmctl(i, _IPC_RMID, None)),
             ("msg", "message queue", 7, 9, lambda i: libc.msgctl(i, _IPC_RMID, None)),
             ("sem", "semaphore set", 4, 6, lambda i: libc.semctl(i, 0, _IPC_RMID)))
    for name, what, owner, creator, remove in kinds:
        try:
            lines = Path(f"/proc/sysvipc/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            try:
                ident, uids = int(cols[1]), {int(cols[owner]), int(cols[creator])}
            except (IndexError, ValueError):
                continue
            if uid in uids:
                gone = remove(ident) == 0
                removed.append(f"System V {what} {ident}" + ("" if gone else " (could not be removed)"))
    return removed
