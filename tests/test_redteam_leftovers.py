"""Issue 20, finding 9: under `--sandbox process` as root an attempt with a 64 MiB allowance
passed and left 320 MiB in the host's /dev/shm, System V segments and files in /tmp and
/var/tmp. And the host-wide uid lease: two runs at once on one host each gave their slot 0
agent uid 61000.

Each attack is a checkpoint taken through `eval.sh run --sandbox process` as root; what is
asserted is the host after the run (nothing of the agent's left) and the run's records.
"""

from __future__ import annotations

import os
import secrets
import textwrap
import threading
from pathlib import Path

import pytest
from redteam import add_task, eval_sh, make_checkpoint, results

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="process as root")

SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")
# Where the host has it, /run/lock (= /var/lock) is world-writable too: under the private view
# it is read-only, and the fallback sweep searches it (a red team's litter stayed there).
LOCKS = tuple(d for d in ("/run/lock",) if os.path.isdir(d) and os.stat(d).st_mode & 0o002)


def _sysv_keys() -> set[int]:
    """The keys of every System V object on the host (its own IPC namespace's)."""
    keys = set()
    for kind in ("shm", "msg", "sem"):
        for line in Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]:
            keys.add(int(line.split()[0]))
    return keys


LITTERING_AGENT = """\
import ctypes, os, sys
mark, key = {mark!r}, {key}
libc = ctypes.CDLL(None, use_errno=True)
IPC_CREAT = 0o1000
made = [libc.shmget(key, 1 << 20, IPC_CREAT | 0o666), libc.msgget(key + 1, IPC_CREAT | 0o666),
        libc.semget(key + 2, 1, IPC_CREAT | 0o666)]
print("sysv", made, "uid", os.getuid(), flush=True)
for folder in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock"):
    try:
        with open(os.path.join(folder, mark), "w") as f:
            f.write("left behind\\n")
        os.makedirs(os.path.join(folder, mark + "-dir", "deep"))
        print("wrote", folder, flush=True)
    except OSError as e:
        print("could not write", folder, e, flush=True)
root = os.statvfs("/")
print("umask", oct(os.umask(0)), "root_ro", bool(root.f_flag & os.ST_RDONLY),
      "root_nosuid", bool(root.f_flag & os.ST_NOSUID),
      "procs", len([p for p in os.listdir("/proc") if p.isdigit()]), flush=True)
with open(os.path.join(os.environ["EVALRIG_OUT"], "answer.txt"), "w") as f:
    f.write("ok\\n")
"""


def _run(home: Path, root: Path, agent: str, *, env: dict[str, str] | None = None,
         out: str = "out", tasks: int = 1, jobs: int = 1) -> tuple[int, str, Path]:
    ck = root / f"ck-{out}"
    make_checkpoint(ck, textwrap.dedent(agent))
    task_dir = root / f"tasks-{out}"
    for i in range(tasks):
        add_task(task_dir, "fixed", f"fx{i}")
    assert eval_sh(home, "seal", ck).code == 0
    step = eval_sh(home, "run", "--checkpoint", ck, "--tasks", task_dir, "--out", root / out,
                   "--sandbox", "process", "--repeat", "1", "--jobs", str(jobs), env=env)
    return step.code, step.stderr, root / out


def test_process_as_root_leaves_no_file_or_ipc_object_on_the_host(tmp_path: Path) -> None:
    """Files and folders in /tmp, /var/tmp and /dev/shm, a System V segment, queue and
    semaphore set: after the run the host holds none of them (they lived in the attempt's
    own tmpfs and IPC namespace, gone with it)."""
    mark = f"evalrig-litter-{secrets.token_hex(6)}"
    key = 0x5E000000 + secrets.randbelow(1 << 20) * 4
    before = _sysv_keys()
    try:
        code, stderr, out = _run(tmp_path / "home", tmp_path, LITTERING_AGENT.format(mark=mark, key=key))
        assert code == 0, stderr
        [r] = results(out)
        assert r["status"] == "passed", r
        stdout = (out / "attempts" / str(r["attempt_id"]) / "stdout.txt").read_text()
        assert "wrote /tmp" in stdout and "wrote /dev/shm" in stdout  # the agent did write them
        # and saw: umask 077, the host's mounts read-only and nosuid, a /proc of its own
        # PID namespace (itself alone)
        assert "umask 0o77 root_ro True root_nosuid True procs 1" in stdout, stdout
        left = [f"{d}/{n}" for d in SCRATCH + LOCKS if os.path.isdir(d) for n in os.listdir(d) if n.startswith(mark)]
        assert left == [], f"left on the host: {left}"
        assert not {key, key + 1, key + 2} & (_sysv_keys() - before), "a System V object was left"
    finally:  # never leave the litter for the next test, whatever happened
        import shutil
        for d in SCRATCH + LOCKS:
            for n in os.listdir(d) if os.path.isdir(d) else []:
                if n.startswith(mark):
                    p = os.path.join(d, n)
                    shutil.rmtree(p) if os.path.isdir(p) else os.unlink(p)
        os.system(f"ipcrm -M {key} -Q {key + 1} -S {key + 2} 2>/dev/null")


FLOODING_AGENT = """\
import os
with open(os.path.join(os.environ["EVALRIG_OUT"], "answer.txt"), "w") as f:
    f.write("ok\\n")
block = b"x" * (1 << 20)
written = 0
try:
    with open("/dev/shm/{mark}", "wb") as f:
        for _ in range(320):
            f.write(block)
            f.flush()
            written += 1
except OSError as e:
    print("stopped at", written, "MiB:", e, flush=True)
print("wrote", written, "MiB", flush=True)
import time
time.sleep(2)  # the disk watch looks at least every few tenths of a second
"""


def test_the_disk_allowance_counts_the_agents_tmpfs(tmp_path: Path) -> None:
    """320 MiB written to /dev/shm with a 64 MiB allowance: the attempt is killed for its
    disk use (an agent_error, never a pass), and the host's /dev/shm keeps none of it."""
    mark = f"evalrig-flood-{secrets.token_hex(6)}"
    try:
        code, stderr, out = _run(tmp_path / "home", tmp_path, FLOODING_AGENT.format(mark=mark))
        [r] = results(out)
        assert r["status"] == "agent_error", r
        assert "disk allowance" in str(r["error"]), r
        assert not os.path.exists(f"/dev/shm/{mark}")
    finally:
        if os.path.exists(f"/dev/shm/{mark}"):
            os.unlink(f"/dev/shm/{mark}")


UID_AGENT = """\
import os, time
began = time.time()
time.sleep(1.0)
with open(os.path.join(os.environ["EVALRIG_OUT"], "answer.txt"), "w") as f:
    f.write("ok\\n")
print("lived", os.getuid(), began, time.time(), flush=True)
"""


def test_two_runs_at_once_never_share_a_uid_between_live_sandboxes(tmp_path: Path) -> None:
    """Two `run`s started together, two slots each: no uid is held by two attempts whose
    lifetimes overlap (before the lease, both runs' slot 0 ran as 61000 at once)."""
    done: dict[str, tuple[int, str, Path]] = {}

    def one(name: str) -> None:
        done[name] = _run(tmp_path / f"home-{name}", tmp_path, UID_AGENT, out=name, tasks=4, jobs=2)

    threads = [threading.Thread(target=one, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lives: list[tuple[int, float, float]] = []
    for code, stderr, out in done.values():
        assert code == 0, stderr
        for r in results(out):
            assert r["status"] == "passed", r
            text = (out / "attempts" / str(r["attempt_id"]) / "stdout.txt").read_text().split()
            lives.append((int(text[1]), float(text[2]), float(text[3])))
    assert len(lives) == 8
    for i, (uid, start, end) in enumerate(lives):
        assert 61000 <= uid < 62000, uid  # the agents' pool
        for other_uid, other_start, other_end in lives[i + 1:]:
            if uid == other_uid:
                assert end <= other_start or other_end <= start, f"uid {uid} held by two live sandboxes: {lives}"


def test_without_private_namespaces_the_rig_removes_what_the_agents_uid_left(tmp_path: Path) -> None:
    """Where the namespaces cannot be made (a host that refuses them, played by
    tests/agents/rig_without_private_mounts.py), the same litter is removed after the
    attempt, each thing named in the result's leftovers_removed, and the run says why in
    its sandbox warnings."""
    import subprocess
    import sys

    import orjson

    mark = f"evalrig-litter-{secrets.token_hex(6)}"
    key = 0x5E000000 + secrets.randbelow(1 << 20) * 4
    home = tmp_path / "home"
    ck = make_checkpoint(tmp_path / "ck", textwrap.dedent(LITTERING_AGENT.format(mark=mark, key=key)))
    add_task(tmp_path / "tasks", "fixed", "fx0")
    assert eval_sh(home, "seal", ck).code == 0
    rig = Path(__file__).parent / "agents" / "rig_without_private_mounts.py"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALRIG_")}
    env.update({"EVALRIG_HOME": str(home), "NO_COLOR": "1"})
    try:
        p = subprocess.run([sys.executable, str(rig), "run", "--checkpoint", str(ck), "--tasks",
                            str(tmp_path / "tasks"), "--out", str(tmp_path / "out"), "--sandbox",
                            "process", "--repeat", "1"], capture_output=True, text=True, env=env,
                           timeout=300, stdin=subprocess.DEVNULL)
        assert p.returncode == 0, p.stderr
        assert "no private mount and IPC namespaces" in p.stderr
        [r] = results(tmp_path / "out")
        assert r["status"] == "passed", r
        removed = r["leftovers_removed"]
        for folder in SCRATCH + LOCKS:
            assert f"{folder}/{mark}" in removed and f"{folder}/{mark}-dir" in removed, removed
        assert sum(str(x).startswith("System V ") for x in removed) == 3, removed
        left = [f"{d}/{n}" for d in SCRATCH + LOCKS for n in os.listdir(d) if n.startswith(mark)]
        assert left == [], f"left on the host: {left}"
        assert not {key, key + 1, key + 2} & _sysv_keys()
        prov = orjson.loads((tmp_path / "out" / "provenance.json").read_bytes())
        assert any("no private mount and IPC namespaces" in w for w in prov["sandbox_warnings"])
    finally:
        import shutil
        for d in SCRATCH + LOCKS:
            for n in os.listdir(d):
                if n.startswith(mark):
                    q = os.path.join(d, n)
                    shutil.rmtree(q) if os.path.isdir(q) else os.unlink(q)
        os.system(f"ipcrm -M {key} -Q {key + 1} -S {key + 2} 2>/dev/null")
