"""The untrusted-run service: a command verifier asks the rig to run the agent's code
(docs/tasks.md, "A verifier never runs the agent's code itself"; docs/security.md).

A verifier that declares `[verifier] untrusted = true` finds `$EVALRIG_RUN_UNTRUSTED`: the
path of a small client (`untrusted_client.py`, copied beside a Unix socket in a folder of
the verifier's alone). `$EVALRIG_RUN_UNTRUSTED -- CMD ARGS...` sends CMD and its stdin over
the socket; the rig runs CMD in a **fresh sandbox of the attempt's level, as the agent's
uid** (the attempt's slot), with a fresh writable copy of the agent's evidence as it stood
when the attempt ended as its directory (never the verifier's output, `driver/` or the
model lines), no network, a minimal environment (nothing of the verifier's), the task's
memory and process limits and `untrusted_timeout_s`; it answers with the exit status
(124 time-out, 128+N signal N, 127/126 a program named by a path into the evidence
is not there / not executable, 125 the rig could not start it: `rig_error`), stdout and
stderr (each capped at 1 MiB). The verifier's own time limit stops while a call runs.

The socket is the verifier's only way in: its folder is the judge's uid's alone (under
`process` as root; no agent uid can reach it) and, under bwrap, it exists only in the
verifier's view. Each call is a line of `untrusted.jsonl` (argv, exit, bytes each way, time).

The wire format is the client's and this module's alone: the client sends one JSON line
`{"argv": [...]}` and then its stdin to the end; the rig answers one JSON line
`{"exit", "stdout", "stderr", "error"}` (the two lengths) and then those bytes.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from evalrig.core.digest import canonical_line
from evalrig.core.environment import MINIMAL_PATH
from evalrig.store.layout import DRIVER_DIR, MODEL_DIR, MODEL_JSONL, VERIFIER_DIR

RUN_UNTRUSTED_ENV = "EVALRIG_RUN_UNTRUSTED"
CLIENT = "evalrig-run-untrusted"
SOCKET = "run.sock"
OUTPUT_CAP = 1 << 20  # each of stdout and stderr passed back
STDIN_CAP = 64 << 20  # what a verifier may send one call
HEADER_CAP = 1 << 20  # the request's JSON line
MAX_CALLS = 1000  # per verifier run: the service's time does not count against timeout_s
EXIT_TIMEOUT = 124
EXIT_RIG_ERROR = 125
# Evidence the agent's code never gets back: the verifier's output and what the
# counterpart or the gateway wrote (docs/tasks.md).
NOT_COPIED = frozenset({VERIFIER_DIR, DRIVER_DIR, MODEL_JSONL, MODEL_DIR})
_CLIENT_SOURCE = Path(__file__).with_name("untrusted_client.py")


@dataclass(frozen=True)
class AgentSide:
    """The sandbox an untrusted call runs in: the attempt's level, slot (so the agent's
    uid), limits, and its judged evidence."""

    level: str
    slot: int
    evidence: Path  # the agent's evidence as it stood when the attempt ended
    timeout_s: float  # [verifier] untrusted_timeout_s, scaled by --timeout-scale
    memory_bytes: int | None = None
    max_processes: int | None = None
    disk_bytes: int | None = None  # what the call may add to its copy (the attempt's allowance)
    redact: Mapping[str, bytes] = field(default_factory=dict)


@dataclass
class Call:
    """One call's answer and its record."""

    exit: int
    stdout: bytes
    stderr: bytes
    record: dict[str, Any]


class Service:
    """The socket served for one verifier run: start(), then the verifier runs, then close().

    `paused_s()` is the time spent inside calls, which the verifier's limit does not count.
    """

    def __init__(self, side: AgentSide, folder: Path, scratch: Path, log: Path, run: int) -> None:
        self.side, self.folder, self.scratch, self.log, self.run = side, folder, scratch, log, run
        self.calls = 0
        self.rig_errors = 0
        self._paused = 0.0
        self._busy_since: float | None = None
        self._lock = threading.Lock()  # one call at a time: one agent uid, one sandbox
        self._closing = threading.Event()  # the verifier's run is over: kill a call still running
        folder.mkdir(mode=0o700)
        shutil.copyfile(_CLIENT_SOURCE, folder / CLIENT)
        os.chmod(folder / CLIENT, 0o755)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # A socket's path may hold 107 bytes; the folder's through /proc is always short.
        fd = os.open(folder, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self.listener.bind(f"/proc/self/fd/{fd}/{SOCKET}")
        except OSError:
            self.listener.close()
            raise
        finally:
            os.close(fd)
        self.listener.listen(8)
        self.thread = threading.Thread(target=self._serve, name="untrusted-run", daemon=True)
        self.thread.start()

    @property
    def client(self) -> Path:
        return self.folder / CLIENT

    def paused_s(self) -> float:
        since = self._busy_since
        return self._paused + (0.0 if since is None else time.monotonic() - since)

    def close(self) -> None:
        """Stop serving; a call still running (its verifier died) is killed, and its line
        is written before close returns, so the record is whole when it is kept."""
        self._closing.set()
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        self.thread.join(timeout=self.side.timeout_s + 30)
        with self._lock:
            pass

    # -- serving -----------------------------------------------------------------------

    def _serve(self) -> None:
        while not self._closing.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(self.side.timeout_s + 30)
                argv, stdin = _read_request(conn)
            except (OSError, ValueError) as e:
                _answer(conn, EXIT_RIG_ERROR, b"", b"", f"bad request: {e}")
                return
            with self._lock:
                if self._closing.is_set():
                    _answer(conn, EXIT_RIG_ERROR, b"", b"", "the verifier's run is over")
                    return
                self._busy_since = time.monotonic()
                try:
                    call = self._call(argv, stdin)
                finally:
                    self._paused += time.monotonic() - self._busy_since
                    self._busy_since = None
                self._record(call.record)
            try:
                _answer(conn, call.exit, call.stdout, call.stderr, call.record.get("rig_error"))
            except OSError:
                pass  # the verifier went away; its call is recorded all the same

    def _record(self, record: dict[str, Any]) -> None:
        line = canonical_line(record)
        for value in self.side.redact.values():
            if value:
                line = line.replace(value, b"[redacted]")
        with open(self.log, "ab") as f:
            f.write(line)

    def _call(self, argv: list[str], stdin: bytes) -> Call:
        from evalrig.attempt import sandbox  # a verifier without the service never loads it

        self.calls += 1
        n = self.calls
        began = time.monotonic()
        record: dict[str, Any] = {"run": self.run, "call": n, "argv": argv, "stdin_bytes": len(stdin)}
        if n > MAX_CALLS:
            return self._rig_error(record, began, f"more than {MAX_CALLS} calls in one verifier run")
        if not argv or not all(isinstance(a, str) and "\0" not in a for a in argv):
            return self._rig_error(record, began, "argv: expected a non-empty list of strings")
        root = self.scratch / f"call-{self.run}-{n}"
        try:
            root.mkdir(parents=True)
            work = root / "evidence"
            shutil.copytree(self.side.evidence, work, symlinks=True,
                            ignore=lambda d, names: [x for x in names if Path(d) == self.side.evidence
                                                     and x in NOT_COPIED])
            for sub in ("home", "tmp"):
                (root / sub).mkdir()
            stdin_path = self.scratch / f"call-{self.run}-{n}.stdin"
            stdin_path.write_bytes(stdin)
            stdin_fd = os.open(stdin_path, os.O_RDONLY | os.O_CLOEXEC)
            stdin_path.unlink()  # no later call finds it
            size, entries = _tree_size(work)
        except OSError as e:
            return self._rig_error(record, began, f"the rig could not prepare the sandbox: {e}")
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        chan = sandbox.Channel(stdin_fd, out_w)
        got = _Drain(out_r)
        tmp = "/tmp" if self.side.level == "bwrap" else str(root / "tmp")
        env = {"PATH": MINIMAL_PATH, "HOME": str(root / "home"), "LANG": "C.UTF-8", "TMPDIR": tmp,
               "EVALRIG_ATTEMPT_ID": f"untrusted-{root.name}-{os.urandom(8).hex()}"}
        try:
            fin = sandbox.launch(sandbox.Launch(
                argv=list(argv), cwd=work, env=env, level=self.side.level,  # type: ignore[arg-type]
                rw_paths=[root], ro_paths=[], network=False,
                timeout_s=self.side.timeout_s, max_output_bytes=OUTPUT_CAP,
                stdout_path=root.parent / f"{root.name}.stdout", stderr_path=root.parent / f"{root.name}.stderr",
                memory_bytes=self.side.memory_bytes, max_processes=self.side.max_processes,
                max_file_bytes=self.side.disk_bytes,
                disk_watch=None if self.side.disk_bytes is None else (root, size + self.side.disk_bytes),
                disk_watch_entries=entries + sandbox.MAX_NEW_ENTRIES,
                slot=self.side.slot, attempt_tag=env["EVALRIG_ATTEMPT_ID"], cancel=self._closing,
                unprivileged=True, channel=chan))
        finally:
            chan.close()
            stdout = got.join()
            shutil.rmtree(root, ignore_errors=True)
        stderr = _read_capped(root.parent / f"{root.name}.stderr")
        record.update(wall_s=round(time.monotonic() - began, 3), stdout_bytes=got.total,
                      stderr_bytes=fin.stderr_bytes)
        if fin.error and fin.shell_status is not None and _in_evidence(argv[0]):
            # The agent left no such program, or one without its exec bit, where the
            # verifier looks for it: the agent's failure, answered as a shell would.
            record.update(exit=fin.shell_status, unstartable=fin.error)
            return Call(fin.shell_status, b"", fin.error.encode() + b"\n", record)
        if fin.error:
            return self._rig_error(record, began, fin.error)
        if fin.timed_out:
            code = EXIT_TIMEOUT
        elif fin.killed_for == "disk":  # the agent's code filled its copy: killed, as by SIGKILL
            code = 128 + 9
            record.update(killed_for="disk")
        elif fin.interrupted or fin.killed_for is not None:
            return self._rig_error(record, began, f"stopped ({fin.killed_for})")
        elif fin.signal is not None:
            code = 128 + fin.signal
        else:
            code = fin.exit_code if fin.exit_code is not None else EXIT_RIG_ERROR
        record.update(exit=code)
        return Call(code, stdout, stderr, record)

    def _rig_error(self, record: dict[str, Any], began: float, why: str) -> Call:
        self.rig_errors += 1
        record.setdefault("wall_s", round(time.monotonic() - began, 3))
        record.update(exit=EXIT_RIG_ERROR, rig_error=why)
        return Call(EXIT_RIG_ERROR, b"", why.encode() + b"\n", record)


class _Drain:
    """Reads the child's stdout to its end on a thread, keeping the first OUTPUT_CAP bytes."""

    def __init__(self, fd: int) -> None:
        self.fd, self.kept, self.total = fd, bytearray(), 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while chunk := os.read(self.fd, 1 << 16):
                self.total += len(chunk)
                room = OUTPUT_CAP - len(self.kept)
                if room > 0:
                    self.kept += chunk[:room]
        finally:
            os.close(self.fd)

    def join(self) -> bytes:
        self.thread.join()
        return bytes(self.kept)


def _in_evidence(argv0: str) -> bool:
    """Whether a call's program is named by a path relative to its working directory, the
    copy of the agent's evidence: whether it is there, and executable, is the agent's
    doing. A bare name (looked up on the call's PATH) or an absolute path is the
    verifier's and the rig's: one that cannot start is a rig_error."""
    return "/" in argv0 and not argv0.startswith("/")


def _tree_size(root: Path) -> tuple[int, int]:
    """(bytes as the disk watch counts them, entries) of a fresh copy, before the call."""
    from evalrig.attempt.sandbox import entry_bytes

    total, count = entry_bytes(0), 1
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            total += entry_bytes(os.lstat(os.path.join(folder, name)).st_size)
            count += 1
    return total, count


def _read_capped(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(OUTPUT_CAP)
    except OSError:
        return b""
    finally:
        path.unlink(missing_ok=True)


def _read_request(conn: socket.socket) -> tuple[list[str], bytes]:
    buf = bytearray()
    while b"\n" not in buf:
        chunk = conn.recv(1 << 16)
        if not chunk:
            raise ValueError("no request line")
        buf += chunk
        if len(buf) > HEADER_CAP + STDIN_CAP:
            raise ValueError("request too long")
    head, _, rest = bytes(buf).partition(b"\n")
    if len(head) > HEADER_CAP:
        raise ValueError("request line too long")
    doc = orjson.loads(head)
    argv = doc.get("argv") if isinstance(doc, dict) else None
    if not isinstance(argv, list):
        raise ValueError("argv missing")
    stdin = bytearray(rest)
    while chunk := conn.recv(1 << 16):
        stdin += chunk
        if len(stdin) > STDIN_CAP:
            raise ValueError(f"stdin over {STDIN_CAP} bytes")
    return argv, bytes(stdin)


def _answer(conn: socket.socket, code: int, stdout: bytes, stderr: bytes, error: str | None) -> None:
    head = orjson.dumps({"exit": code, "stdout": len(stdout), "stderr": len(stderr), "error": error})
    conn.sendall(head + b"\n" + stdout + stderr)


def start(side: AgentSide, folder: Path, scratch: Path, log: Path, run: int) -> Service:
    """Bind and serve the socket in `folder` (made here; must not exist)."""
    return Service(side, folder, scratch, log, run)
