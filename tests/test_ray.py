"""`run --executor ray` on real Ray clusters started here, every listener on loopback.

Two clusters, one at a time (class-scoped, so the first is down before the second
starts — the machine is small): one node with 2 CPUs, then two nodes with 1 CPU each
(`ray.cluster_utils.Cluster`). Each is shut down by its fixture, never by process name.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'evalrig[ray]'")

from typer.testing import CliRunner  # noqa: E402

from evalrig.attempt.canary import CANARY_ENV  # noqa: E402
from evalrig.cli import app  # noqa: E402
from evalrig.core.plan import trial_seed  # noqa: E402
from evalrig.run.executors.ray import pack_tree, resolve_address, unpack_tree  # noqa: E402
from evalrig.store.bundle import final_results, load_run  # noqa: E402
from evalrig.store.checkpoint import seal  # noqa: E402
from evalrig.store.tree import hash_tree  # noqa: E402

AGENTS = Path(__file__).resolve().parent / "agents"
ROOT = Path(__file__).resolve().parent.parent
SEALED_AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
OBJECT_STORE = 100 << 20
LOOPBACK_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",  # recent Ray refuses a join by address without token auth
}
DOCUMENTED_ENV = {"PATH", "HOME", "LANG", "TMPDIR", "EVALRIG_PROMPT", "EVALRIG_WORK",
                  "EVALRIG_OUT", "EVALRIG_TASK_ID", "EVALRIG_ATTEMPT_ID", "EVALRIG_DEADLINE_S",
                  "EVALRIG_SEED"}


# -- builders ----------------------------------------------------------------------------


def make_checkpoint(root: Path, home: Path, *, estimate: bool = False) -> Path:
    d = root / "ckpt"
    d.mkdir()
    shutil.copy(AGENTS / "ray_agent.py", d / "agent.py")
    text = 'name = "exo"\n[agent]\ncommand = ["python3", "agent.py"]\n'
    if estimate:  # an estimate command: the estimate phase runs on a worker too
        text += 'estimate = ["python3", "agent.py", "--estimate"]\n'
    (d / "checkpoint.toml").write_text(text)
    seal(d, home, SEALED_AT)
    return d


def add_task(tasks: Path, task_id: str, prompt: str, *, cpus: int = 1, suite: str = "fixed") -> None:
    d = tasks / suite / task_id
    d.mkdir(parents=True)
    (d / "prompt.md").write_text(prompt)
    created = "created_at = 2026-12-01T10:00:00.000000Z\n" if suite == "fresh" else ""
    (d / "task.toml").write_text(f"timeout_s = 150\n{created}[resources]\ncpus = {cpus}\n"
                                 '[verifier]\nkind = "exact"\nexpected = "even"\n')


def make_tasks(root: Path, n: int, extra: dict[str, str] | None = None) -> Path:
    """n tasks answering the seed's parity (half pass); `extra` adds prompt lines by task id."""
    tasks = root / "tasks"
    for i in range(n):
        tid = f"t{i}"
        add_task(tasks, tid, "answer: parity\n" + (extra or {}).get(tid, ""),
                 suite="fresh" if i % 2 else "fixed")
    return tasks


def cli(*args: str | Path) -> object:
    return CliRunner().invoke(app, [str(a) for a in args])


def run_args(ck: Path, tasks: Path, out: Path, *more: str) -> list[str | Path]:
    return ["run", "--checkpoint", ck, "--tasks", tasks, "--out", out, "--repeat", "2",
            "--jobs", "2", *more]


def outcomes(bundle: Path) -> dict[str, tuple[str, bool | None, str]]:
    """trial id -> (status, passed, evidence digest) of the result that counts."""
    return {k: (r.status, r.passed, r.evidence_digest)
            for k, r in final_results(load_run(bundle)).items()}


# -- clusters on loopback ----------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def loopback_env() -> Iterator[None]:
    """Every process of the clusters and every driver binds to 127.0.0.1.

    Ray reads RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER once, when it is imported: "0" makes a node
    take the loopback address as its own (and bind there) instead of the address it sees
    the world from. The variable covers the processes started from here (the CLI driver
    under test); this process imported Ray before the fixture ran, so its copy of the
    flag is set too.
    """
    from ray._private import ray_constants

    with pytest.MonkeyPatch.context() as mp:
        for k, v in LOOPBACK_ENV.items():
            mp.setenv(k, v)
        mp.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
        yield


@pytest.fixture(scope="class")
def one_node() -> Iterator[str]:
    # address="local": a new cluster of this test's own, even where RAY_ADDRESS is set or
    # `ray start` left /tmp/ray/ray_current_cluster behind (ray.init would join that one).
    ctx = ray.init(address="local", num_cpus=2, include_dashboard=False,
                   _node_ip_address="127.0.0.1",
                   object_store_memory=OBJECT_STORE, logging_level=logging.ERROR,
                   log_to_driver=False)
    try:
        yield str(ctx.address_info["gcs_address"])
    finally:
        ray.shutdown()


@pytest.fixture(scope="class")
def two_nodes() -> Iterator[object]:
    from ray.cluster_utils import Cluster

    node = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "object_store_memory": OBJECT_STORE}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    try:
        cluster.add_node(**node)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level=logging.ERROR, log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


# -- /proc: listeners, agents, workers ---------------------------------------------------


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            ppid = _ppid(int(p.name))
            if ppid is not None:
                children.setdefault(ppid, []).append(int(p.name))
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        out.add(pid)
        todo += children.get(pid, [])
    return out


def _ppid(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("PPid:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _socket_inodes(pids: set[int]) -> set[str]:
    inodes = set()
    for pid in pids:
        try:
            for fd in os.scandir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(fd.path)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    return inodes


def _listeners() -> list[tuple[str, str]]:
    """(local address hex, inode) of every TCP socket in LISTEN (state 0A)."""
    out = []
    for name in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A":
                out.append((f[1].rsplit(":", 1)[0], f[9]))
    return out


def _is_loopback(hex_addr: str) -> bool:
    if len(hex_addr) == 8:  # IPv4, little-endian
        return socket.inet_ntoa(bytes.fromhex(hex_addr)[::-1]).startswith("127.")
    raw = b"".join(bytes.fromhex(hex_addr[i:i + 8])[::-1] for i in range(0, 32, 8))
    addr = socket.inet_ntop(socket.AF_INET6, raw)
    return addr == "::1" or addr.startswith("::ffff:127.")


def assert_listeners_on_loopback() -> int:
    """Every TCP listener of this process and its descendants (the cluster's processes)."""
    ours = _socket_inodes(_descendants(os.getpid()))
    mine = [(a, i) for a, i in _listeners() if i in ours]
    outside = [a for a, _ in mine if not _is_loopback(a)]
    assert not outside, f"listeners outside loopback: {outside}"
    return len(mine)


def _environ(pid: int) -> dict[bytes, bytes]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(kv.split(b"=", 1) for kv in raw.split(b"\0") if b"=" in kv)


def find_agent(marker: bytes, timeout: float = 60) -> int:
    """The pid of our agent process whose EVALRIG_ATTEMPT_ID contains `marker`, started
    after this call.

    Only among this process's descendants (the clusters' workers are): other test runs
    on the machine start agents with the same attempt ids. And only one started since the
    call: an agent of an earlier test of the same cluster, still being reaped, has the same
    attempt id (it was found instead of this run's once, and the test read a bundle that
    did not exist yet)."""
    since = _boot_ticks()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in _descendants(os.getpid()):
            aid = _environ(pid).get(b"EVALRIG_ATTEMPT_ID", b"")
            if marker in aid and b"agent.py" in _cmdline(pid) and _started_at(pid) >= since:
                return pid
        time.sleep(0.1)
    raise AssertionError(f"no agent with attempt id containing {marker!r} appeared")


def _boot_ticks() -> int:
    """Now, in the clock ticks since boot that /proc/<pid>/stat's start time counts."""
    return int(float(Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK"))


def _started_at(pid: int) -> int:
    """When `pid` started, in clock ticks since boot (-1 when it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return -1
    return int(stat.rsplit(")", 1)[1].split()[19])  # field 22; the name may hold spaces


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _alive(pid: int) -> bool:
    """Running, not a zombie: an in-process run made this process a child subreaper, so
    a killed agent may wait here, dead, to be reaped."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in status


def _describe_process(pid: int) -> str:
    chain = []
    cur: int | None = pid
    while cur and cur > 1:
        try:
            state = next(ln for ln in Path(f"/proc/{cur}/status").read_text().splitlines()
                         if ln.startswith("State:"))
        except (OSError, StopIteration):
            state = "?"
        chain.append(f"{cur} {state} {_cmdline(cur)[:60]!r}")
        cur = _ppid(cur)
    return "the dead driver's attempt still runs: " + " <- ".join(chain)


def ray_worker_of(pid: int) -> int:
    """The Ray worker process running the attempt: the agent's first `ray::` ancestor."""
    cur: int | None = pid
    while cur and cur > 1:
        if _cmdline(cur).startswith(b"ray::"):
            return cur
        cur = _ppid(cur)
    raise AssertionError(f"process {pid} has no Ray worker among its ancestors")


def all_cpus_free(cpus: float = 2, within_s: float = 10) -> bool:
    """Whether the cluster's CPUs are all free within `within_s` (ended runners, and
    those of a dead driver, give theirs back a moment after)."""
    until = time.monotonic() + within_s
    while ray.available_resources().get("CPU", 0.0) < cpus and time.monotonic() < until:
        time.sleep(0.1)
    return ray.available_resources().get("CPU", 0.0) == cpus


@contextlib.contextmanager
def interrupted_if_stalled(seconds: float = 180) -> Iterator[None]:
    """A run that stalls would wait forever: Ctrl-C it (exit 130, not 0) after `seconds`.
    The bound tells a stall from a slow run only: twelve trials whose runners are ended and
    started again as task sizes alternate took 44 s beside the rest of the suite, and over
    60 s on a machine busier still."""
    stall = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
    stall.start()
    try:
        yield
    finally:
        stall.cancel()


# -- no cluster needed -------------------------------------------------------------------


def test_a_packed_tree_unpacks_to_the_same_digest(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "a" / "b" / "run.sh").write_text("#!/bin/sh\n")
    (src / "a" / "b" / "run.sh").chmod(0o755)
    (src / "data.bin").write_bytes(bytes(range(256)) * 100)
    (src / "empty").mkdir()
    (src / "link").symlink_to("a/b/run.sh")
    unpack_tree(pack_tree(src), tmp_path / "dst")
    assert hash_tree(tmp_path / "dst").digest == hash_tree(src).digest
    assert os.access(tmp_path / "dst" / "a" / "b" / "run.sh", os.X_OK)
    assert (tmp_path / "dst" / "empty").is_dir()


def test_a_packed_checkpoint_unpacks_with_its_folder_modes_and_seal_digest(tmp_path: Path) -> None:
    """A worker's copy of a checkpoint holds what its seal (hash version 2) covers: folder
    bits as they are, a read-only folder included (docs/checkpoint.md)."""
    src = tmp_path / "src"
    (src / "ro" / "deep").mkdir(parents=True)
    (src / "ro" / "deep" / "f.txt").write_text("f\n")
    (src / "ro" / "deep").chmod(0o550)
    (src / "ro").chmod(0o555)
    (src / "agent.py").write_text("print()\n")
    (src / "agent.py").chmod(0o640)
    unpack_tree(pack_tree(src), tmp_path / "dst")
    assert hash_tree(tmp_path / "dst", version=2).digest == hash_tree(src, version=2).digest
    assert (tmp_path / "dst" / "ro").stat().st_mode & 0o7777 == 0o555
    assert (tmp_path / "dst" / "ro" / "deep").stat().st_mode & 0o7777 == 0o550
    assert (tmp_path / "dst" / "ro" / "deep" / "f.txt").read_text() == "f\n"


def test_a_packed_tree_reaching_outside_its_directory_is_refused(tmp_path: Path) -> None:
    link = ("l", "link", 0, str(tmp_path))
    for n, name in enumerate(("../evil", "/abs/evil", "link/evil", "./evil", "a//evil")):
        dest = tmp_path / f"dst-{n}"
        with pytest.raises(OSError, match="tree entry"):
            unpack_tree([link, ("f", name, 0o644, b"x")], dest)
    with pytest.raises(OSError, match="not a file, directory or link"):
        unpack_tree([("p", "fifo", 0o644, b"")], tmp_path / "dst-kind")
    with pytest.raises(OSError, match="not a file, directory or link"):
        unpack_tree([("f", "text", 0o644, "a str is a link's content")], tmp_path / "dst-str")
    assert not (tmp_path / "evil").exists() and not (tmp_path / "abs").exists()


def test_the_address_is_the_flag_else_ray_address_else_auto() -> None:
    assert resolve_address("10.0.0.1:6379", {"RAY_ADDRESS": "10.0.0.2:6379"}) == "10.0.0.1:6379"
    assert resolve_address(None, {"RAY_ADDRESS": "10.0.0.2:6379"}) == "10.0.0.2:6379"
    assert resolve_address(None, {"RAY_ADDRESS": ""}) == "auto"
    assert resolve_address(None, {}) == "auto"


def test_an_address_nothing_answers_at_is_refused_before_any_bundle_exists(
        tmp_path: Path, evalrig_home: Path) -> None:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ck, tasks = make_checkpoint(tmp_path, evalrig_home), make_tasks(tmp_path, 1)
    t0 = time.monotonic()
    r = cli(*run_args(ck, tasks, tmp_path / "b", "--executor", "ray",
                      "--ray-address", f"127.0.0.1:{port}"))
    assert r.exit_code == 4, r.stderr
    assert f"--ray-address: 127.0.0.1:{port}: nothing answers there" in r.stderr
    assert "docs/ray.md" in r.stderr
    assert not (tmp_path / "b").exists() and time.monotonic() - t0 < 10


# -- one node ----------------------------------------------------------------------------


class TestOneNode:
    def test_a_ray_run_equals_a_local_run(self, one_node: str, tmp_path: Path,
                                          evalrig_home: Path) -> None:
        ck, tasks = make_checkpoint(tmp_path, evalrig_home, estimate=True), make_tasks(tmp_path, 3)
        local = cli(*run_args(ck, tasks, tmp_path / "local"))
        assert local.exit_code == 0, local.stderr
        remote = cli(*run_args(ck, tasks, tmp_path / "ray", "--executor", "ray",
                               "--ray-address", one_node))
        assert remote.exit_code == 0, remote.stderr
        a, b = outcomes(tmp_path / "local"), outcomes(tmp_path / "ray")
        assert len(a) == 6 and a == b  # same trials, statuses, verdicts and evidence digests
        assert {s for s, _, _ in a.values()} == {"passed", "failed"}
        ray_bundle = load_run(tmp_path / "ray")
        assert ray_bundle.manifest.settings.executor == "ray"
        assert {r.inputs_id for r in ray_bundle.results} == {
            r.inputs_id for r in load_run(tmp_path / "local").results}
        estimates = [{e.trial_id: (e.state, e.p_success) for e in load_run(tmp_path / name).estimates}
                     for name in ("local", "ray")]
        assert estimates[0] == estimates[1] and {s for s, _ in estimates[0].values()} == {"valid"}
        assert {p for _, p in estimates[0].values()} == {0.25, 0.75}
        v = cli("verify", tmp_path / "ray")
        assert v.exit_code == 0, v.stderr

    def test_an_episode_task_on_ray_gives_the_local_runs_results(self, one_node: str, tmp_path: Path,
                                                                   evalrig_home: Path) -> None:
        from tests.episodes import add_episode_task, episode_checkpoint

        tasks = tmp_path / "tasks"
        add_episode_task(tasks, "bank")
        add_episode_task(tasks, "short", bounds="max_turns = 1\n")
        ck = episode_checkpoint(tmp_path / "ck", "gold")
        seal(ck, evalrig_home, SEALED_AT)
        runs = {}
        for name, more in (("local", ()), ("ray", ("--executor", "ray", "--ray-address", one_node))):
            got = cli(*run_args(ck, tasks, tmp_path / name, *more))
            assert got.exit_code == 0, got.stderr
            runs[name] = {k: (r.status, r.passed, r.termination)
                          for k, r in final_results(load_run(tmp_path / name)).items()}
        assert runs["local"] == runs["ray"]
        assert {t for _, _, t in runs["ray"].values()} == {"driver_end", "max_turns"}
        for r in load_run(tmp_path / "ray").results:
            assert (tmp_path / "ray" / "attempts" / r.attempt_id / "transcript.jsonl").is_file()
        v = cli("verify", tmp_path / "ray")
        assert v.exit_code == 0, v.stderr

    def test_each_worker_serves_its_attempts_model_calls_with_the_key_from_its_runtime_env(
            self, one_node: str, tmp_path: Path, evalrig_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """The gateway on Ray (docs/gateway.md "Under Ray"): each runner's process makes its own
        Gateway; the key reaches it in the actor's runtime environment (the stand-in checks
        it), never in the bundle; the spend is metered as under local."""
        key = "sk-ray-standin-7d3f0a9c1b2e"
        agent = ("import json, os, urllib.request\n"
                 "base = json.loads(os.environ['EVALRIG_GATEWAY_UPSTREAMS'])['openai']\n"
                 "body = json.dumps({'model': 'standin-small', 'messages': [{'role': 'user', "
                 "'content': 'Answer ok.'}]}).encode()\n"
                 "req = urllib.request.Request(base + '/chat/completions', data=body, headers={"
                 "'Content-Type': 'application/json', 'Authorization': 'Bearer ' + os.environ['OPENAI_API_KEY']})\n"
                 "said = json.load(urllib.request.urlopen(req, timeout=30))['choices'][0]['message']['content']\n"
                 "open(os.path.join(os.environ['EVALRIG_OUT'], 'answer.txt'), 'w').write(said)\n")
        ck = tmp_path / "ck"
        ck.mkdir()
        (ck / "agent.py").write_text(agent)
        (ck / "checkpoint.toml").write_text('name = "exo"\n[agent]\ncommand = ["python3", "agent.py"]\n'
                                            '[models]\nallowed = ["openai/standin-small"]\n')
        seal(ck, evalrig_home, SEALED_AT)
        tasks = tmp_path / "tasks"
        for tid in ("a", "b"):
            (tasks / "fixed" / tid).mkdir(parents=True)
            (tasks / "fixed" / tid / "prompt.md").write_text("Answer ok.\n")
            (tasks / "fixed" / tid / "task.toml").write_text('timeout_s = 60\n[verifier]\nkind = "exact"\n'
                                                             'expected = "ok"\n')
        (tmp_path / "answers.json").write_text('{"Answer ok.": "ok"}')
        port_file, log = tmp_path / "port", tmp_path / "standin.jsonl"
        standin = subprocess.Popen([sys.executable, str(ROOT / "examples" / "model-standin" / "standin.py"),
                                    "--port", "0", "--port-file", str(port_file), "--key", key,
                                    "--log", str(log), "--answers", str(tmp_path / "answers.json")])
        try:
            for _ in range(200):
                if port_file.is_file() and port_file.read_text().strip():
                    break
                time.sleep(0.05)
            gw = tmp_path / "gateway.toml"
            gw.write_text(f'[upstreams.openai]\napi = "openai"\nbase_url = "http://127.0.0.1:{port_file.read_text().strip()}/v1"\n'
                          'key_env = "RAY_STANDIN_KEY"\n[prices]\n"openai/standin-small" = { input = 1.0, output = 2.0 }\n')
            monkeypatch.setenv("RAY_STANDIN_KEY", key)
            got = cli(*run_args(ck, tasks, tmp_path / "ray", "--executor", "ray", "--ray-address", one_node,
                                "--gateway", str(gw)))
            assert got.exit_code == 0, got.stderr
        finally:
            standin.kill()
            standin.wait()
        bundle = load_run(tmp_path / "ray")
        assert {r.status for r in bundle.results} == {"passed"} and len(bundle.results) == 4
        assert all(a.spend is not None and a.spend.candidate is not None and a.spend.candidate.source == "metered"
                   and a.spend.candidate.calls == 1 for a in bundle.actuals)
        sent = [orjson.loads(x) for x in log.read_bytes().splitlines()]
        assert len(sent) == 4 and all(r["key_ok"] for r in sent)
        for path in (tmp_path / "ray").rglob("*"):
            if path.is_file():
                assert key.encode() not in path.read_bytes(), path

    def test_the_agent_sees_no_ray_variables_and_cannot_reach_the_cluster(
            self, one_node: str, tmp_path: Path, evalrig_home: Path) -> None:
        ck = make_checkpoint(tmp_path, evalrig_home)
        tasks = make_tasks(tmp_path, 1, {"t0": f"env: dump\nprobe: {one_node}\n"})
        r = cli(*run_args(ck, tasks, tmp_path / "b", "--repeat", "1", "--executor", "ray",
                          "--ray-address", one_node))
        assert r.exit_code == 0, r.stderr
        (res,) = load_run(tmp_path / "b").results
        ev = tmp_path / "b" / "attempts" / res.attempt_id / "out"
        env = orjson.loads((ev / "env.json").read_bytes())
        assert not [k for k in env if k.startswith("RAY")]
        assert set(env) == DOCUMENTED_ENV | {CANARY_ENV}  # nothing of the worker's
        if res.sandbox != "bwrap":
            pytest.skip("no network namespace without bwrap on this machine")
        # the test process itself can reach the GCS port; the agent must not
        host, port = one_node.rsplit(":", 1)
        socket.create_connection((host, int(port)), timeout=2).close()
        assert (ev / "probe.txt").read_text().strip() != "connected"

    def test_kill_9_of_the_driver_then_resume_on_ray(self, one_node: str, tmp_path: Path,
                                                      evalrig_home: Path) -> None:
        ck = make_checkpoint(tmp_path, evalrig_home)
        tasks = make_tasks(tmp_path, 2, {"t1": "hang: 0:1\n"})
        out = tmp_path / "b"
        argv = [sys.executable, "-m", "evalrig",
                *map(str, run_args(ck, tasks, out, "--executor", "ray", "--ray-address", one_node))]
        driver = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, env=dict(os.environ))
        try:
            agent = find_agent(b"t1-0-1-")
            # mid-run, the driver (a child of this process) and its workers listen too
            assert driver.pid in _descendants(os.getpid())
            assert_listeners_on_loopback()
        finally:
            driver.send_signal(signal.SIGKILL)
            driver.wait()
        gone_by = time.monotonic() + 30  # Ray ends a dead driver's jobs, and bwrap the agent
        while _alive(agent) and time.monotonic() < gone_by:
            time.sleep(0.1)
        assert not _alive(agent), _describe_process(agent)
        before = load_run(out)
        assert before.manifest.status == "running"
        r = cli("run", "--out", out, "--resume", "--executor", "ray", "--ray-address", one_node)
        assert r.exit_code == 0, r.stderr
        after = load_run(out)
        assert after.manifest.status == "complete" and after.manifest.counts.unscored == 0
        ends = [e for e in after.attempts if e.event == "end" and e.trial_id == "t1:0"]
        assert [e.status for e in ends][:1] == ["interrupted"]
        assert final_results(after)["t1:0"].attempt == 2
        v = cli("verify", out)
        assert v.exit_code == 0, v.stderr

    def test_a_run_interrupted_locally_resumes_on_ray(self, one_node: str, tmp_path: Path,
                                                      evalrig_home: Path) -> None:
        """--executor is a setting that cannot change an outcome (docs/release-flow.md)."""
        ck = make_checkpoint(tmp_path, evalrig_home)
        tasks = make_tasks(tmp_path, 2, {"t1": "hang: 0:1\n"})
        out = tmp_path / "b"
        argv = [sys.executable, "-m", "evalrig", *map(str, run_args(ck, tasks, out))]
        driver = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, env=dict(os.environ))
        try:
            find_agent(b"t1-0-1-")
            until = time.monotonic() + 30  # the three other trials end; t1:0 hangs
            while time.monotonic() < until and len(
                    (out / "results.jsonl").read_bytes().splitlines()) < 3:
                time.sleep(0.1)
            driver.send_signal(signal.SIGINT)
            _, stderr = driver.communicate(timeout=30)
        finally:
            driver.kill()
        assert driver.returncode == 130, stderr.decode()[-2000:]
        assert load_run(out).manifest.settings.executor == "local"
        r = cli("run", "--out", out, "--resume", "--executor", "ray", "--ray-address", one_node)
        assert r.exit_code == 0, r.stderr
        after = load_run(out)
        assert after.manifest.status == "complete" and after.manifest.settings.executor == "ray"
        (resume,) = orjson.loads((out / "provenance.json").read_bytes())["resumes"]
        assert (resume["kept"], resume["rerun"]) == (3, 1)
        assert final_results(after)["t1:0"].attempt == 2
        assert cli("verify", out).exit_code == 0

    def test_ctrl_c_of_the_driver_interrupts_the_attempts_on_the_workers(
            self, one_node: str, tmp_path: Path, evalrig_home: Path) -> None:
        ck = make_checkpoint(tmp_path, evalrig_home)
        tasks = make_tasks(tmp_path, 1, {"t0": "hang: 0:1\n"})
        out = tmp_path / "b"
        argv = [sys.executable, "-m", "evalrig",
                *map(str, run_args(ck, tasks, out, "--repeat", "1", "--executor", "ray",
                                   "--ray-address", one_node))]
        driver = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, env=dict(os.environ))
        try:
            agent = find_agent(b"t0-0-1-")
            t0 = time.monotonic()
            driver.send_signal(signal.SIGINT)
            _, stderr = driver.communicate(timeout=30)
        finally:
            driver.kill()
        assert driver.returncode == 130, stderr.decode()[-2000:]
        assert time.monotonic() - t0 < 15  # the agent sleeps 120 s: it was stopped, not waited for
        assert not _alive(agent)
        (res,) = load_run(out).results
        assert res.status == "interrupted"

    def test_tasks_asking_one_and_two_cpus_share_the_node(
            self, one_node: str, tmp_path: Path, evalrig_home: Path) -> None:
        """Runners of one size that sit idle hold CPUs a task of the other size needs: the
        executor ends them while such a task waits, so the run never stalls."""
        ck = make_checkpoint(tmp_path, evalrig_home)
        tasks = tmp_path / "tasks"
        for i in range(4):
            add_task(tasks, f"t{i}", "answer: even\n", cpus=2 if i % 2 else 1)
        with interrupted_if_stalled():
            r = cli(*run_args(ck, tasks, tmp_path / "b", "--repeat", "3", "--max-retries", "0",
                              "--executor", "ray", "--ray-address", one_node))
        assert r.exit_code == 0, r.stderr
        b = load_run(tmp_path / "b")
        assert b.manifest.status == "complete" and len(b.results) == 12
        assert {x.status for x in b.results} == {"passed"}

    def test_more_jobs_than_the_cluster_has_cpus(self, one_node: str, tmp_path: Path,
                                                 evalrig_home: Path) -> None:
        """--jobs 5 on 2 CPUs: runners Ray cannot place yet wait, holding nothing, while
        the placed ones take the queued attempts; the run completes and ends them all."""
        ck = make_checkpoint(tmp_path, evalrig_home)
        tasks = tmp_path / "tasks"
        for i in range(5):
            add_task(tasks, f"t{i}", "answer: even\n", cpus=2 if i == 4 else 1)
        with interrupted_if_stalled():
            r = cli(*run_args(ck, tasks, tmp_path / "b", "--repeat", "3", "--max-retries", "0",
                              "--jobs", "5", "--executor", "ray", "--ray-address", one_node))
        assert r.exit_code == 0, r.stderr
        b = load_run(tmp_path / "b")
        assert b.manifest.status == "complete" and {x.status for x in b.results} == {"passed"}
        assert all_cpus_free()  # the run ended every runner it started

    def test_a_task_asking_two_cpus_holds_two_cpus_of_the_cluster(
            self, one_node: str, tmp_path: Path, evalrig_home: Path) -> None:
        ck = make_checkpoint(tmp_path, evalrig_home)
        tasks = tmp_path / "tasks"
        add_task(tasks, "big", "answer: even\nhang: 0:1\n", cpus=2)
        assert all_cpus_free()  # else an earlier test's runner could hold what this one reads
        free_cpus: list[float] = []

        def look_then_end_the_agent() -> None:
            agent = find_agent(b"big-0-1-")
            until = time.monotonic() + 5  # the cluster's resource view lags a little
            while True:
                free_cpus.append(ray.available_resources().get("CPU", 0.0))
                if free_cpus[-1] == 0 or time.monotonic() > until:
                    break
                time.sleep(0.1)
            os.kill(agent, signal.SIGKILL)

        looker = threading.Thread(target=look_then_end_the_agent, daemon=True)
        looker.start()
        r = cli(*run_args(ck, tasks, tmp_path / "b", "--repeat", "1", "--max-retries", "0",
                          "--executor", "ray", "--ray-address", one_node))
        looker.join()
        assert r.exit_code == 0, r.stderr
        assert free_cpus and free_cpus[-1] == 0, free_cpus  # both of the node's CPUs
        (res,) = load_run(tmp_path / "b").results
        assert res.status == "agent_error"

    def test_kept_workspaces_stay_on_the_worker_node(self, one_node: str, tmp_path: Path,
                                                     evalrig_home: Path) -> None:
        # The node is this machine, its workers started with this process's environment.
        scratch = Path(os.environ.get("EVALRIG_SCRATCH") or tempfile.gettempdir())
        ck, tasks = make_checkpoint(tmp_path, evalrig_home), make_tasks(tmp_path, 1)
        r = cli(*run_args(ck, tasks, tmp_path / "b", "--repeat", "1", "--keep-workspaces",
                          "--executor", "ray", "--ray-address", one_node))
        assert r.exit_code == 0, r.stderr
        assert "--keep-workspaces: the attempt workspaces are on the nodes of the Ray " \
               "workers that ran them" in r.stderr
        (res,) = load_run(tmp_path / "b").results
        kept = list(scratch.glob(f"evalrig-ray-kept-{os.getuid()}/*/scratch/{res.attempt_id}"))
        try:
            assert len(kept) == 1 and (kept[0] / "agent" / "agent.py").is_file()
            assert (kept[0] / "out" / "answer.txt").read_text().strip() in ("even", "odd")
        finally:
            for k in kept:
                shutil.rmtree(k.parent.parent, ignore_errors=True)  # the runner's kept dir

    def test_every_listener_is_on_loopback(self, one_node: str) -> None:
        assert assert_listeners_on_loopback() >= 2  # at least the GCS and the raylet


# -- two nodes ---------------------------------------------------------------------------


class TestTwoNodes:
    def test_a_worker_killed_mid_attempt_is_an_infra_error_then_retried(
            self, two_nodes: object, tmp_path: Path, evalrig_home: Path) -> None:
        ck = make_checkpoint(tmp_path, evalrig_home)
        tasks = make_tasks(tmp_path, 2, {"t0": "hang: 1:1\n"})
        killed: list[int] = []
        listeners: list[int | str] = []

        def kill_the_worker() -> None:
            worker = ray_worker_of(find_agent(b"t0-1-1-"))
            try:  # mid-run, with every worker of the run alive
                listeners.append(assert_listeners_on_loopback())
            except AssertionError as e:
                listeners.append(str(e))
            os.kill(worker, signal.SIGKILL)
            killed.append(worker)

        killer = threading.Thread(target=kill_the_worker, daemon=True)
        killer.start()
        r = cli(*run_args(ck, tasks, tmp_path / "b", "--executor", "ray",
                          "--ray-address", two_nodes.address))  # type: ignore[attr-defined]
        killer.join()
        assert killed and r.exit_code == 0, r.stderr
        assert isinstance(listeners[0], int) and listeners[0] >= 4, listeners
        b = load_run(tmp_path / "b")
        assert b.manifest.status == "complete"
        t = [x for x in b.results if x.trial_id == "t0:1"]
        assert [x.status for x in t][0] == "infra_error" and len(t) == 2
        assert "the rig failed while running the attempt" in (t[0].error or "")
        expected = "failed" if trial_seed(0, "t0", 1) % 2 else "passed"
        assert t[1].status == expected and t[1].attempt == 2
        assert b.manifest.counts.infra_error == 1
        assert cli("verify", tmp_path / "b").exit_code == 0

    def test_a_task_asking_more_cpus_than_any_node_has_is_an_infra_error(
            self, two_nodes: object, tmp_path: Path, evalrig_home: Path) -> None:
        ck = make_checkpoint(tmp_path, evalrig_home)
        tasks = tmp_path / "tasks"
        add_task(tasks, "big", "answer: even\n", cpus=2)
        r = cli(*run_args(ck, tasks, tmp_path / "b", "--repeat", "1", "--max-retries", "0",
                          "--executor", "ray", "--ray-address", two_nodes.address))  # type: ignore[attr-defined]
        assert r.exit_code == 5, r.stderr
        (res,) = load_run(tmp_path / "b").results
        assert res.status == "infra_error"
        assert "asks for 2 CPUs and no live node of the cluster has more than 1" in (res.error or "")

    def test_a_runner_that_cannot_start_is_an_infra_error_then_retried(
            self, two_nodes: object, tmp_path: Path, evalrig_home: Path,
            monkeypatch: pytest.MonkeyPatch) -> None:
        """A node whose worker cannot construct the runner (evalrig missing there, say)."""
        from evalrig.run.executors import ray as ray_executor

        class Broken(ray_executor.AttemptRunner):  # local: Ray ships it by value
            def __init__(self) -> None:
                raise RuntimeError("no evalrig on this node")

        monkeypatch.setattr(ray_executor, "AttemptRunner", Broken)
        ck, tasks = make_checkpoint(tmp_path, evalrig_home), make_tasks(tmp_path, 1)
        with interrupted_if_stalled():
            r = cli(*run_args(ck, tasks, tmp_path / "b", "--repeat", "1", "--max-retries", "1",
                              "--executor", "ray", "--ray-address", two_nodes.address))  # type: ignore[attr-defined]
        assert r.exit_code == 5, r.stderr
        results = load_run(tmp_path / "b").results
        assert [(x.status, x.attempt) for x in results] == [("infra_error", 1), ("infra_error", 2)]
        for x in results:  # why, in one line, without Ray's terminal colour codes
            assert "the Ray worker could not start: ActorDiedError" in (x.error or ""), x.error
            assert "RuntimeError: no evalrig on this node" in (x.error or ""), x.error
            assert "\x1b" not in (x.error or "") and "\n" not in (x.error or "")

    def test_every_listener_is_on_loopback(self, two_nodes: object) -> None:
        assert assert_listeners_on_loopback() >= 4  # a GCS and two raylets at least
