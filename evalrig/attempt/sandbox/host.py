"""What the host is, asked once per process (`HOST`), and the kernel calls the sandbox makes
(unshare(2), setns(2), prctl(2)) on a thread of their own (docs/attempts.md, "Limits").
"""

from __future__ import annotations

import ctypes
import os
import shutil
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from evalrig.core.environment import MINIMAL_PATH

T = TypeVar("T")


_PR_SET_CHILD_SUBREAPER = 36


class HostAnswers:
    """Answers to questions about the host, each asked once per process: which bwrap runs,
    whether unshare can make a PID or a network namespace, where a helper is, whether a
    bwrap can size its /tmp, the /etc view. None of them changes while the rig runs, and
    each costs a process start, more than an attempt itself, so they are process-wide on
    purpose, in this one place. Tests `pretend` a host through it."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # the bwrap probe goes through launch(), which asks too
        self._known: dict[str, object] = {}

    def get(self, question: str, ask: Callable[[], T]) -> T:
        with self._lock:
            if question not in self._known:
                self._known[question] = ask()
            return self._known[question]  # type: ignore[return-value]

    def pretend(self, question: str, answer: object) -> None:
        """Take `answer` as the host's (a test that plays another host)."""
        with self._lock:
            self._known[question] = answer


HOST = HostAnswers()


def _is_root() -> bool:
    return os.geteuid() == 0


def _become_subreaper() -> None:
    """Make the rig a child subreaper (once per process).

    Orphans of a launch are then reparented to the rig rather than to the host's init:
    bwrap's init, which outlives bwrap by a moment and whose rusage holds the agent's, and
    in the fallback the agent's escaped descendants. launch() reaps exactly those (by
    pidfd, never waitpid(-1), which would steal other children's statuses).
    """
    def ask() -> bool:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
        return True

    HOST.get("the rig is a child subreaper", ask)


def _tool(name: str) -> str | None:
    """A util-linux/coreutils helper on the minimal PATH (looked up once)."""
    return HOST.get(f"tool: {name}", lambda: shutil.which(name, path=MINIMAL_PATH))


_CLONE_NEWNET = 0x40000000


_CLONE_NEWPID = 0x20000000


_CLONE_NEWUSER = 0x10000000


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _on_thread(work: Callable[[], T]) -> T:
    """Run `work` on a fresh thread and return its value. Network namespaces belong to a
    thread: the one that entered another dies with it, and the rig's stay where they were."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as e:  # handed to the caller
            box["error"] = e

    thread = threading.Thread(target=run, name="evalrig-netns")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]
