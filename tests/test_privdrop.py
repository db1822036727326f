"""evalrig-drop (evalrig/attempt/drop.c, privdrop.py): an agent's launch under process as root
ends with it, or, where it cannot be built, with prlimit and setpriv. Both are tested for what
the agent can see and do, with real processes, as a hostile agent would probe them."""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from test_sandbox import QUIET_SLOTS, SYSTEM_PY, Box, agent_json, make_box, tagged_alive

from evalrig.attempt import privdrop, sandbox
from evalrig.attempt.sandbox import launch

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists(SYSTEM_PY) or not shutil.which("cc"),
    reason="needs root (the uid drop), /usr/bin/python3 and a C compiler")

LOOK = """
import json, os, subprocess, sys
status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines() if ':' in l)
limits = {l[:26].strip(): l[26:].split()[:2] for l in open('/proc/self/limits').read().splitlines()[1:]}
suid = subprocess.run([sys.argv[1], '-u'], capture_output=True, text=True).stdout.strip()
print(json.dumps({'uid': os.getuid(), 'gid': os.getgid(), 'groups': os.getgroups(),
                  'caps': {k: status[k].strip() for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb')},
                  'no_new_privs': status['NoNewPrivs'].strip(), 'limits': limits, 'setuid_id': suid,
                  'pid': os.getpid()}))
"""


@pytest.fixture(params=["evalrig-drop", "prlimit and setpriv"])
def way(request: pytest.FixtureRequest) -> Iterator[str]:
    built = sandbox.plan._drop_helper()
    assert built is not None, "cc is here, so the helper must build"
    sandbox.HOST.pretend("tool: evalrig-drop", built if request.param == "evalrig-drop" else None)
    try:
        yield request.param
    finally:
        sandbox.HOST.pretend("tool: evalrig-drop", built)


@pytest.fixture
def setuid_root_id() -> Iterator[str]:
    """A set-user-ID root copy of `id`, where the slot uid can reach it (not a folder the
    rig chowns to the agent, which would clear the bit)."""
    d = tempfile.mkdtemp(prefix="evalrig-suid-", dir="/var/tmp")
    try:
        os.chmod(d, 0o755)
        target = Path(d) / "id"
        shutil.copy("/usr/bin/id", target)
        os.chmod(target, 0o4755)
        yield str(target)
    finally:
        shutil.rmtree(d)


def looked(box: Box, setuid_id: str, **changes: object) -> dict:
    spec = box.spec("sandbox_env.py", unprivileged=True, slot=QUIET_SLOTS["privdrop"], **changes)
    # its folder is bound in read-only: the agent's own /var/tmp is a fresh tmpfs
    spec = replace(spec, argv=[SYSTEM_PY, "-I", "-c", LOOK, setuid_id], ro_paths=[Path(setuid_id).parent])
    return agent_json(box, launch(spec))


def test_the_agent_runs_as_the_slot_uid_without_capabilities_within_its_limits(
        tmp_path: Path, way: str, setuid_root_id: str) -> None:
    box = make_box(tmp_path, "process")
    seen = looked(box, setuid_root_id, memory_bytes=1 << 30, max_file_bytes=5 << 20, max_processes=40)
    slot = sandbox.BASE_UID + QUIET_SLOTS["privdrop"]
    assert (seen["uid"], seen["gid"], seen["groups"]) == (slot, slot, [])
    assert set(seen["caps"].values()) == {"0000000000000000"}, seen["caps"]
    assert seen["limits"]["Max address space"] == [str(1 << 30)] * 2
    assert seen["limits"]["Max file size"] == [str(5 << 20)] * 2
    assert seen["limits"]["Max processes"] == ["40", "40"]
    # no new privileges: a set-user-ID root program runs as the agent, not as root
    assert seen["no_new_privs"] == "1" and seen["setuid_id"] == str(slot)
    assert seen["pid"] == 1  # PID 1 of its own namespace: no helper stayed as its parent


def test_the_helper_is_the_one_exec_before_the_agent(tmp_path: Path, way: str) -> None:
    box = make_box(tmp_path, "process")
    spec = replace(box.spec("sandbox_env.py", unprivileged=True, memory_bytes=1 << 30),
                   argv=[SYSTEM_PY, "-I", "sandbox_env.py"], ro_paths=[])
    argv = sandbox.plan._plan(spec).argv
    if way == "evalrig-drop":
        assert argv[:5] == [sandbox.plan._drop_helper(), str(1 << 30), "-", "-", str(sandbox.BASE_UID)]
        end = argv.index("--")  # between: the private view it makes first (docs/security.md)
        assert argv[5:end] == (sandbox.plan._private_args(spec) if sandbox.private_view_why() is None else [])
        assert argv[end + 1:] == spec.argv
    else:
        assert [Path(a).name for a in argv if a.startswith("/") and Path(a).name in ("prlimit", "setpriv")] == [
            "prlimit", "setpriv"]
        assert "--no-new-privs" in argv


def test_the_agent_dies_with_the_rig(tmp_path: Path, way: str) -> None:
    """kill -9 of the rig: the agent's parent-death signal, set after the uid drop, ends it."""
    box = make_box(tmp_path, "process")
    spec = replace(box.spec("sandbox_env.py", unprivileged=True, slot=QUIET_SLOTS["privdrop"]),
                   argv=[SYSTEM_PY, "-I", "-c", "import time; time.sleep(600)"], ro_paths=[])
    code = ("import pickle, sys\nfrom evalrig.attempt import sandbox\n"
            f"sandbox.HOST.pretend('tool: evalrig-drop', {sandbox.plan._drop_helper()!r} if {way == 'evalrig-drop'} else None)\n"
            "sandbox.launch(pickle.loads(sys.stdin.buffer.read()))\n")
    rig = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    assert rig.stdin is not None
    rig.stdin.write(pickle.dumps(spec))
    rig.stdin.close()
    try:
        agents: list[int] = []
        for _ in range(200):
            agents = [p for p in tagged_alive(box.tag) if _uid_of(str(p)) == sandbox.BASE_UID + QUIET_SLOTS["privdrop"]]
            if agents:
                break
            subprocess.run(["sleep", "0.05"])
        assert agents, "the agent runs, as the slot uid"
        rig.kill()
        rig.wait()
        for _ in range(100):
            if not [p for p in agents if _state(str(p)) not in ("gone", "Z")]:
                break
            subprocess.run(["sleep", "0.05"])
        assert not [p for p in agents if _state(str(p)) not in ("gone", "Z")]
    finally:
        if rig.poll() is None:
            rig.kill()


def _uid_of(pid: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _state(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


@pytest.mark.parametrize(("args", "says"), [
    (["-", "-", "-", "0", "--", "true"], "UID (a uid other than root's)"),
    (["-1", "-", "-", "61000", "--", "true"], "RLIMIT_AS"),
    (["12x", "-", "-", "61000", "--", "true"], "RLIMIT_AS"),
    (["-", "-", "-", "61000", "true"], "usage"),
    (["-", "-", "-", "61000", "--", "/nonexistent/agent"], "/nonexistent/agent"),
])
def test_the_helper_refuses_what_it_cannot_do_exactly(args: list[str], says: str) -> None:
    """Nothing runs with a step left out: exit 127, naming the step."""
    helper = sandbox.plan._drop_helper()
    assert helper is not None
    done = subprocess.run([helper, *args], capture_output=True, text=True, timeout=30)
    assert done.returncode == 127 and done.stderr.startswith("evalrig-drop: ") and says in done.stderr


def test_a_cached_helper_is_used_only_while_it_is_the_rigs_own(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    built = privdrop.built(sandbox.BASE_UID, cache=cache)
    assert built is not None and Path(built).parent == cache
    assert privdrop.built(sandbox.BASE_UID, cache=cache) == built  # found, not rebuilt
    os.chmod(built, 0o777)  # anyone could replace what it runs
    assert privdrop.built(sandbox.BASE_UID, cache=cache) is None
    os.chmod(built, 0o755)
    os.chmod(cache, 0o777)
    assert privdrop.built(sandbox.BASE_UID, cache=cache) is None
    os.chmod(cache, 0o700)
    os.chown(built, sandbox.BASE_UID, sandbox.BASE_UID)
    assert privdrop.built(sandbox.BASE_UID, cache=cache) is None
    os.unlink(built)
    os.symlink("/bin/true", built)
    assert privdrop.built(sandbox.BASE_UID, cache=cache) is None
    assert stat.S_ISLNK(os.lstat(built).st_mode)  # left as found: the rig does not repair it


def test_a_helper_that_does_not_run_is_not_used(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    built = privdrop.built(sandbox.BASE_UID, cache=cache)
    assert built is not None
    Path(built).write_bytes(b"#!/bin/sh\nshift 5\nexec \"$@\"\n")  # runs the command, drops nothing
    assert privdrop.built(sandbox.BASE_UID, cache=cache) is None
    Path(built).write_bytes(b"#!/bin/sh\nexit 3\n")
    assert privdrop.built(sandbox.BASE_UID, cache=cache) is None


X32_GETPID = "import ctypes; ctypes.CDLL(None).syscall(0x40000000 | 39); print('ran on')"


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x32 is an ABI of x86_64")
@pytest.mark.parametrize("level", ["process", "bwrap"])
def test_a_system_call_of_another_abi_kills_the_agent(tmp_path: Path, level: str) -> None:
    """The seccomp filter (evalrig.attempt.seccomp) knows the calls by their x86_64 numbers;
    an x32 call, numbered otherwise, could pass it unseen, so it ends the process (SIGSYS)."""
    box = make_box(tmp_path, level)
    spec = replace(box.spec("sandbox_env.py", unprivileged=True), argv=[SYSTEM_PY, "-I", "-c", X32_GETPID])
    done = launch(spec)
    assert done.error is None, done
    assert done.signal == signal.SIGSYS or done.exit_code == 128 + signal.SIGSYS, done
    assert "ran on" not in box.stdout()
