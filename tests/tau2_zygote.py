"""A parent process that has imported tau2 once, for the sweep of every converted tau2 task
(tests/test_tau2.py), which starts a driver and a verifier for each of 328 episodes.

Importing tau2 (pydantic models, deepdiff, pandas) costs about a second of CPU in each new
interpreter, more than the episode itself; over the sweep that was a third of the test
suite's CPU. Here one process imports those modules, then forks a child per script: the
child takes its own stdin/stdout/stderr (pipes the test made), working directory,
environment and argv, and runs the script file unchanged as `__main__` with `runpy`, as
`python script.py` would. Only the imports happened earlier, in the parent: the modules
preloaded are ones the driver and verifier import anyway, under the same environment, and
none of them holds an episode's state at import.

What is not preloaded: tau2's NL-assertion evaluator and its `llm_utils`, which the verifier
replaces with its judge before importing them (examples/tau2/verify.py).

The other tests of test_tau2.py start the driver and verifier as real interpreters
(subprocess), so the path a run takes is still covered whole.

Run as `python tau2_zygote.py FD`, FD being one end of a SOCK_SEQPACKET socketpair: each
message is a JSON request {script, cwd, env} with four file descriptors (stdin, stdout,
stderr, and a socket on which the child writes its exit code before it exits).
"""

from __future__ import annotations

import importlib
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

PRELOAD = (
    "loguru",
    "tau2.data_model.message",
    "tau2.data_model.tasks",
    "tau2.domains.retail.environment",
    "tau2.domains.retail.utils",
    "tau2.domains.airline.environment",
    "tau2.domains.airline.utils",
    "tau2.evaluator.evaluator_action",
    "tau2.evaluator.evaluator_communicate",
    "tau2.evaluator.evaluator_env",
)
NOT_PRELOADED = ("tau2.utils.llm_utils", "tau2.evaluator.evaluator_nl_assertions")


# ---- the parent's side (this file run as a script) ----

def serve(control: socket.socket) -> None:
    for name in PRELOAD:
        importlib.import_module(name)
    leaked = [name for name in NOT_PRELOADED if name in sys.modules]
    if leaked:  # the verifier must get to install its judge first
        raise SystemExit(f"tau2_zygote: preloading imported {leaked}")
    sys.stdout.flush()
    sys.stderr.flush()
    control.send(b"ready")
    while True:
        msg, fds, _, _ = socket.recv_fds(control, 1 << 20, 4)
        if not msg:  # the test closed its end
            return
        pid = os.fork()
        if pid == 0:
            control.close()
            run_child(json.loads(msg), fds)
        for fd in fds:
            os.close(fd)
        reap()


def reap() -> None:
    """Collect children that have exited (their exit codes travel over their own sockets)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def run_child(request: dict[str, Any], fds: list[int]) -> None:
    stdin, stdout, stderr, status = fds
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
    for fd in (stdin, stdout, stderr):
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    script = str(Path(request["script"]).resolve())
    sys.argv = [script]
    sys.path[0] = os.path.dirname(script)
    # fresh stdio objects on the new descriptors, as a new interpreter would make them
    sys.stdin = open(0, encoding="utf-8", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1)
    code = 0
    try:
        import runpy

        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = exit_code(e.code)
    except BaseException:  # noqa: BLE001 - as the interpreter would: a traceback, then 1
        import traceback

        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed pipe: the reader has gone
            pass
    os.write(status, str(code).encode())
    os._exit(code)


def exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


# ---- the test's side ----

class Child:
    """What subprocess.Popen would give for `python script` with three pipes (text mode)."""

    def __init__(self, stdin: IO[str], stdout: IO[str], stderr: IO[str], status: socket.socket) -> None:
        self.stdin, self.stdout, self.stderr, self._status = stdin, stdout, stderr, status

    def wait(self, timeout: float) -> int:
        self._status.settimeout(timeout)
        got = b""
        while chunk := self._status.recv(16):
            got += chunk
        self._status.close()
        return int(got) if got else -9  # no code: the child died before it could write one

    def run_to_end(self, timeout: float) -> tuple[int, str, str]:
        """stdin closed, both outputs read whole: subprocess.run(..., capture_output=True)."""
        self.stdin.close()
        err: list[str] = []
        reader = threading.Thread(target=lambda: err.append(self.stderr.read()))
        reader.start()
        out = self.stdout.read()
        reader.join(timeout)
        rc = self.wait(timeout)
        self.stdout.close()
        self.stderr.close()
        return rc, out, "".join(err)


class Zygote:
    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._proc = subprocess.Popen([sys.executable, __file__, str(theirs.fileno())], pass_fds=[theirs.fileno()],
                                      env=env, cwd=cwd, stdin=subprocess.DEVNULL)
        theirs.close()
        self._control.settimeout(120)
        if self._control.recv(16) != b"ready":
            raise RuntimeError("tau2_zygote did not start")
        self._lock = threading.Lock()

    def spawn(self, script: str, cwd: Path, env: dict[str, str]) -> Child:
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        status, theirs = socket.socketpair()
        request = json.dumps({"script": script, "cwd": str(cwd), "env": env}).encode()
        with self._lock:
            socket.send_fds(self._control, [request], [in_r, out_w, err_w, theirs.fileno()])
        for fd in (in_r, out_w, err_w):
            os.close(fd)
        theirs.close()
        return Child(open(in_w, "w", encoding="utf-8"), open(out_r, encoding="utf-8"),
                     open(err_r, encoding="utf-8", errors="backslashreplace"), status)

    def close(self) -> None:
        self._control.close()
        self._proc.wait(timeout=60)


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])))
