"""What a launch is given (`Launch`, `Channel`) and what it returns (`Finished`); the
levels' names (docs/attempts.md, "Limits"; docs/security.md).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # the egress proxy needs pydantic; a launch without one must not
    from evalrig.attempt.gateway import CallLedger, Gateway, Grant
    from evalrig.attempt.streams import ScanBudget
    from evalrig.models.run import NetworkConnection


Level = Literal["bwrap", "process"]


BASE_UID = 61000


"""Under bwrap as root, slot N runs as uid/gid BASE_UID + N."""


@dataclass(frozen=True)
class LevelChoice:
    """The isolation level an attempt will run under, and why if it is not the one asked."""

    level: Level
    warning: str | None
    bwrap_path: str | None


@dataclass(frozen=True)
class GatewayGrant:
    """A launch's way to the model gateway (docs/gateway.md): the rig process's `Gateway`,
    what this sandbox's calls may do (`Grant`: role, models, budget, canary needles) and
    the attempt's `CallLedger` (model.jsonl and model/ in its evidence). The listener at
    evalrig.attempt.gateway.GATEWAY_ADDRESS is bound inside the sandbox's own network
    namespace, as the egress proxy's is; the session ends after every process is dead."""

    gateway: Gateway
    grant: Grant
    ledger: CallLedger


@dataclass(frozen=True)
class Launch:
    """Everything launch() needs; see the module docstring for what each level does."""

    argv: list[str]
    cwd: Path  # host path; under bwrap every bound path appears at the same path inside
    env: Mapping[str, str]  # the complete environment (nothing inherited)
    level: Level
    rw_paths: Sequence[Path]  # bound read-write under bwrap (the attempt root)
    ro_paths: Sequence[Path]  # extra read-only binds (verifier dir, evidence, interpreter)
    network: bool  # True: the host's network (a command verifier's setting); never an agent's
    timeout_s: float  # wall-clock limit
    max_output_bytes: int  # cap on stdout and on stderr each; the excess is dropped
    stdout_path: Path
    stderr_path: Path
    memory_bytes: int | None = None  # RLIMIT_AS
    max_processes: int | None = None  # RLIMIT_NPROC, only with a slot uid (bwrap as root)
    max_file_bytes: int | None = None  # RLIMIT_FSIZE (a single file)
    disk_watch: tuple[Path, int] | None = None  # kill when this tree exceeds N bytes
    disk_watch_entries: int | None = None  # ... or holds more than N entries (inodes)
    slot: int = 0  # 0..jobs-1: where the uid lease's search starts (the uid BASE_UID + slot when free)
    # The uid pool a launch as root leases from (evalrig.attempt.sandbox.uids): "agents"
    # for an agent's code, "judges" for a command verifier's or an episode driver's.
    pool: Literal["agents", "judges"] = "agents"
    # The subreaper fallback's mark: `tag_var`=attempt_tag in env (the attempt id, for an
    # agent). An episode's driver carries its attempt's id as the agent does, so it has a
    # mark of its own, which the agent's launch names as `spare` ("NAME=value"): a leftover
    # carrying it is the driver's, left to the driver's launch (docs/security.md).
    attempt_tag: str = ""
    tag_var: str = "EVALRIG_ATTEMPT_ID"
    spare: str = ""
    scan_for: Sequence[bytes] = ()  # canary values looked for in the complete streams
    # The attempt's canary-scan budget, shared with its evidence scan (streams.ScanBudget);
    # None: one of the launch's own. While a stream's scan is busy the limits are watched.
    scan_budget: ScanBudget | None = None
    redact: Mapping[str, bytes] | None = None  # secret name -> value, redacted when kept
    cancel: threading.Event | None = None  # set: kill everything now, interrupted=True
    bwrap_path: str | None = None  # from resolve_level(); None: find it again
    # process as root: the agent too runs as the slot uid (an agent's launch; a task's
    # verifier, the operator's code, keeps the rig's uid there)
    unprivileged: bool = False
    # names handed to the program alone (after the uid drop), never to the helpers before
    # it that run as root: the checkpoint's env (docs/attempts.md "The agent's environment")
    agent_only: frozenset[str] = frozenset()
    # The operator's grant (--allow-host values): an egress proxy reached at
    # evalrig.attempt.egress.PROXY_ADDRESS inside the sandbox's own network namespace. None: no proxy.
    egress: tuple[str, ...] | None = None
    # The model gateway (docs/gateway.md): its listener at 127.0.0.1:4000 in the same
    # namespace. None: no gateway. Refused (an infra error) where no namespace of the
    # sandbox's own can hold it (process without root or nsenter).
    gateway: GatewayGrant | None = None
    # An episode's process (evalrig.attempt.episode): stdin and stdout are the relay's
    # pipes instead of /dev/null and a capped file, and the relay may stop it.
    channel: Channel | None = None
    # Seconds the limit does not count (a command verifier's time inside the untrusted-run
    # service, evalrig.attempt.untrusted); read on every turn of the supervision loop.
    paused: Callable[[], float] | None = None


class Channel:
    """The child's ends of a relay's two pipes, and a way to stop the launch.

    launch() hands `stdin_fd` and `stdout_fd` to the child and closes the rig's copies as
    soon as it has started (or failed to), so that the relay sees end of file when the
    child and everything it started are gone. `stop()` kills the launch's processes
    (Finished.killed_for "stopped"); it is a pipe the launch's selector waits on, so the
    kill follows at once, with no polling."""

    def __init__(self, stdin_fd: int, stdout_fd: int) -> None:
        self.stdin_fd: int | None = stdin_fd
        self.stdout_fd: int | None = stdout_fd
        self.stop_r, self.stop_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._lock = threading.Lock()

    def release(self) -> None:
        """Close the child's ends in the rig (idempotent)."""
        with self._lock:
            for name in ("stdin_fd", "stdout_fd"):
                fd = getattr(self, name)
                if fd is not None:
                    setattr(self, name, None)
                    os.close(fd)

    def stop(self) -> None:
        try:
            os.write(self.stop_w, b"x")
        except OSError:
            pass  # already asked (the pipe is full) or closed

    def close(self) -> None:
        self.release()
        with self._lock:
            for fd in (self.stop_r, self.stop_w):
                if fd >= 0:
                    os.close(fd)
            self.stop_r = self.stop_w = -1


@dataclass(frozen=True)
class Finished:
    """What happened to one launched process.

    `error` is set only when the agent never ran, and `error_kind` says whose fault that
    is. "agent": its argv[0] cannot be found or executed (in the sandbox's view, for
    bwrap): the checkpoint names a program that is not there, so the caller records an
    ``agent_error``. "infra": a path the rig passed does not exist, the rig could not
    fork, chown or make a pipe, or bwrap failed before it made the sandbox: an
    ``infra_error``, worth another attempt.

    `cpu_s` and `peak_rss` come from os.wait4 of the direct child and of bwrap's init
    (which the rig reaps), each including every descendant it reaped. Under bwrap the
    init's figure is the agent's peak exactly. Under process, Linux starts the direct
    child's peak RSS at the rig's own (its exec happens in the rig's address space), so a
    peak no higher than the rig's cannot be told from it and is reported as None; a
    higher one is the agent's.
    """

    exit_code: int | None
    signal: int | None
    timed_out: bool
    interrupted: bool
    killed_for: str | None  # "timeout" | "disk" | "interrupt" | "stopped" (Channel.stop) | None
    wall_s: float
    cpu_s: float | None  # user + system of the process tree (reaped descendants included)
    peak_rss: int | None  # bytes; None when it cannot be told from the rig's own (below)
    stdout_bytes: int  # everything the process wrote, before capping
    stderr_bytes: int
    stdout_truncated: bool
    stderr_truncated: bool
    canary_found_in: tuple[str, ...]
    containment: Literal["namespace", "subreaper"]
    level: Level
    network: bool
    error: str | None = None
    error_kind: Literal["agent", "infra"] | None = None
    # The egress proxy's records (spec.egress given and enforced); None: no proxy ran.
    egress: tuple[NetworkConnection, ...] | None = None
    egress_hosts: tuple[str, ...] = ()
    # Of wall_s and the rig's time around it, what reading, scanning, redacting and
    # keeping the two streams cost the rig (evalrig.attempt.stages); never recorded.
    streams_s: float = 0.0
    # Under process as root without private namespaces (evalrig.attempt.sandbox.leftovers):
    # what the launch's uid left outside its own directories, removed after it ended.
    removed: tuple[str, ...] = ()
    # For an "agent" error: the status a shell gives the same failure, 127 (argv[0] not
    # found) or 126 (found, not executable); None for any other reason it cannot start.
    shell_status: int | None = None
