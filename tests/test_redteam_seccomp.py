"""Issue 20, the red team's findings 5 and 6, under both sandboxes as root:

- the pool uid's kernel user keyring outlived every sandbox: a key one attempt added
  (add_key @u) was found by a later attempt of another run, in another home;
- a child of the agent made its own user and mount namespace, mounted a tmpfs there and
  wrote 320 MiB under a 64 MiB disk allowance: the attempt passed.

Both are closed by the seccomp filter (evalrig.attempt.seccomp) every sandbox's program runs
under: no keyring calls, no new user namespace, clone3 refused with ENOSYS (the C library
falls back to clone, so threads and children still work). Each attack is a checkpoint taken
through `eval.sh run`; what is asserted is what the agent saw and the run's records.
"""

from __future__ import annotations

import errno
import os
import platform
import secrets
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest
from redteam import add_task, eval_sh, make_checkpoint, results

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the pool uids are given as root"),
    pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"), reason="a filter for x86_64 and aarch64"),
]

# add_key, request_key, keyctl, clone (the agents use libc's unshare)
_NR = {"x86_64": (248, 249, 250, 56), "aarch64": (217, 218, 219, 220)}[platform.machine()]

KEYRING_AGENT = """\
import ctypes, json, os, subprocess, threading
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
ADD_KEY, REQUEST_KEY, KEYCTL = {nr}
MARK = {mark!r}.encode()
USER_KEYRING = ctypes.c_long(-4)


def call(*args):
    ctypes.set_errno(0)
    got = libc.syscall(*args)
    return [got, ctypes.get_errno() if got < 0 else 0]


out = {{"uid": os.getuid(), "found": None}}
out["search"] = call(KEYCTL, 10, USER_KEYRING, b"user", MARK, 0)  # KEYCTL_SEARCH
if out["search"][0] > 0:
    buf = ctypes.create_string_buffer(256)
    n = libc.syscall(KEYCTL, 11, ctypes.c_long(out["search"][0]), buf, 256)  # KEYCTL_READ
    out["found"] = buf.raw[:n].decode()
payload = ("left by " + os.environ["EVALRIG_ATTEMPT_ID"]).encode()
out["add_key"] = call(ADD_KEY, b"user", MARK, payload, len(payload), USER_KEYRING)
out["request_key"] = call(REQUEST_KEY, b"user", MARK, None, USER_KEYRING)
out["clone3"] = call(435, 0, 0)
# clone3 refused, the C library falls back to clone: a thread and a child still start.
seen = []
t = threading.Thread(target=seen.append, args=("thread",))
t.start()
t.join()
seen.append(subprocess.run(["/bin/sh", "-c", "echo child"], capture_output=True, text=True).stdout.strip())
out["started"] = seen
print(json.dumps(out), flush=True)
with open(os.path.join(os.environ["EVALRIG_OUT"], "answer.txt"), "w") as f:
    f.write("ok\\n")
"""


def _forget_key(mark: str) -> None:
    """Invalidate a key named `mark` in the user and user-session keyrings of every pool uid
    the kernel counts keys for (what this test's attempts may have left, before the fix)."""
    code = textwrap.dedent(f"""\
        import ctypes
        libc = ctypes.CDLL(None)
        libc.syscall.restype = ctypes.c_long
        for ring in (-4, -5):
            kid = libc.syscall({_NR[2]}, 10, ctypes.c_long(ring), b"user", {mark.encode()!r}, 0)
            if kid > 0:
                libc.syscall({_NR[2]}, 21, ctypes.c_long(kid))  # KEYCTL_INVALIDATE
        """)
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    for line in Path("/proc/key-users").read_text().splitlines():
        uid = int(line.split(":")[0])
        if 61000 <= uid < 63000:
            subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                            python, "-c", code], capture_output=True, timeout=30, cwd="/")


def _run(home: Path, root: Path, agent: str, sandbox: str, out: str, extra: str = "") -> dict:
    ck = make_checkpoint(root / f"ck-{out}", agent)
    add_task(root / f"tasks-{out}", "fixed", "fx0", extra=extra)
    assert eval_sh(home, "seal", ck).code == 0
    step = eval_sh(home, "run", "--checkpoint", ck, "--tasks", root / f"tasks-{out}", "--out", root / out,
                   "--sandbox", sandbox, "--repeat", "1")
    assert step.code == 0, step
    [r] = results(root / out)
    return r


@pytest.mark.parametrize("sandbox", ["process", "bwrap"])
def test_a_key_one_attempt_adds_never_reaches_a_later_attempt(tmp_path: Path, sandbox: str) -> None:
    """Two runs in two homes, one after the other, both slot 0 (the same pool uid when no
    other run holds it): every keyring call fails with EPERM, so the first leaves nothing
    and the second finds nothing; clone3 says ENOSYS and threads and children still start."""
    mark = f"evalrig-key-{secrets.token_hex(6)}"
    agent = KEYRING_AGENT.format(nr=_NR[:3], mark=mark)
    try:
        for n in (1, 2):
            r = _run(tmp_path / f"home{n}", tmp_path, agent, sandbox, f"out{n}")
            assert r["status"] == "passed", r
            text = (tmp_path / f"out{n}" / "attempts" / str(r["attempt_id"]) / "stdout.txt").read_text()
            seen = orjson.loads(text.splitlines()[-1])
            assert 61000 <= seen["uid"] < 62000, seen
            assert seen["found"] is None, f"run {n} found a key an earlier sandbox left: {seen}"
            for call in ("add_key", "search", "request_key"):
                assert seen[call] == [-1, errno.EPERM], seen
            assert seen["clone3"] == [-1, errno.ENOSYS], seen
            assert seen["started"] == ["thread", "child"], seen
    finally:
        _forget_key(mark)


USERNS_AGENT = """\
import ctypes, json, os, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
CLONE_NEWUSER, CLONE_NEWNS, SIGCHLD = 0x10000000, 0x00020000, 17
uid, gid = os.getuid(), os.getgid()
r, w = os.pipe()
if os.fork() == 0:  # a child: the watch looks at the top process's /tmp
    res = {{}}
    ctypes.set_errno(0)
    got = libc.syscall({clone}, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)
    if got == 0:
        os._exit(0)  # the clone's child: made in a user namespace of its own
    res["clone"] = [got, ctypes.get_errno() if got < 0 else 0]
    if got > 0:
        os.waitpid(got, 0)
    ctypes.set_errno(0)
    got = libc.unshare(CLONE_NEWUSER | CLONE_NEWNS)
    res["unshare"] = [got, ctypes.get_errno() if got else 0]
    if got == 0:
        for f, t in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"0 {{uid}} 1"),
                     ("/proc/self/gid_map", f"0 {{gid}} 1")):
            with open(f, "w") as fh:
                fh.write(t)
        res["mount"] = libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 0, b"size=2g")
    print(json.dumps(res), flush=True)
    n = 0
    try:
        for i in range(20):  # 320 MiB in files of 16 MiB, each under RLIMIT_FSIZE
            with open(f"/tmp/blob{{i}}", "wb") as f:
                for _ in range(16):
                    f.write(b"x" * (1 << 20))
            n += 16
    except OSError as e:
        print("stopped:", e, flush=True)
    print("wrote_mb", n, flush=True)
    time.sleep(3)  # give the disk watch time to look
    os._exit(0)
os.close(w)
os.read(r, 1)  # the child's end closes when it ends
os.wait()
with open(os.path.join(os.environ["EVALRIG_OUT"], "answer.txt"), "w") as f:
    f.write("ok\\n")
"""


@pytest.mark.parametrize("sandbox", ["process", "bwrap"])
def test_no_user_namespace_of_its_own_and_no_write_past_the_disk_allowance(tmp_path: Path, sandbox: str) -> None:
    """unshare(CLONE_NEWUSER) and clone(CLONE_NEWUSER) fail with EPERM, so there is no tmpfs
    of its own to hide in; 320 MiB written under a 64 MiB allowance (max_evidence_bytes 16
    MiB) lands where the disk watch looks, and the attempt is an agent_error, never a pass."""
    r = _run(tmp_path / "home", tmp_path, USERNS_AGENT.format(clone=_NR[3]), sandbox, "out",
             extra="max_evidence_bytes = 16777216")
    text = (tmp_path / "out" / "attempts" / str(r["attempt_id"]) / "stdout.txt").read_text()
    seen = orjson.loads(text.splitlines()[0])
    assert seen["unshare"] == [-1, errno.EPERM], text
    assert seen["clone"] == [-1, errno.EPERM], text
    assert "mount" not in seen, text
    assert r["status"] == "agent_error", r
    assert "disk allowance" in str(r["error"]), r


def test_without_evalrig_drop_the_run_says_the_filter_is_missing(tmp_path: Path) -> None:
    """Where evalrig-drop cannot be built (played by tests/agents/rig_without_evalrig_drop.py),
    process as root falls back to prlimit and setpriv, which install no filter: the run says
    so on stderr and in its provenance's sandbox warnings, and still runs."""
    home = tmp_path / "home"
    ck = make_checkpoint(tmp_path / "ck", "import os\nopen(os.path.join(os.environ['EVALRIG_OUT'], 'answer.txt'), 'w').write('ok\\n')\n")
    add_task(tmp_path / "tasks", "fixed", "fx0")
    assert eval_sh(home, "seal", ck).code == 0
    rig = Path(__file__).parent / "agents" / "rig_without_evalrig_drop.py"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALRIG_")}
    env.update({"EVALRIG_HOME": str(home), "NO_COLOR": "1"})
    p = subprocess.run([sys.executable, str(rig), "run", "--checkpoint", str(ck), "--tasks", str(tmp_path / "tasks"),
                        "--out", str(tmp_path / "out"), "--sandbox", "process", "--repeat", "1"],
                       capture_output=True, text=True, env=env, timeout=300, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr
    said = "under --sandbox process the agent runs without the seccomp filter here"
    assert said in p.stderr
    [r] = results(tmp_path / "out")
    assert r["status"] == "passed", r
    prov = orjson.loads((tmp_path / "out" / "provenance.json").read_bytes())
    assert any(said in w and "evalrig-drop could not be built" in w for w in prov["sandbox_warnings"])


# A command verifier that runs a probe as the agent's code, through the untrusted-run service
# (docs/tasks.md), and says what the probe saw in its checks.
UNTRUSTED_PROBE_VERIFIER = '''\
import json, os, subprocess
PROBE = """
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
ctypes.set_errno(0)
k = libc.syscall({add_key}, b"user", {mark!r}, b"x", 1, ctypes.c_long(-4))
ke = ctypes.get_errno()
ctypes.set_errno(0)
u = libc.unshare(0x10000000)
ue = ctypes.get_errno()
print(json.dumps({{"add_key": [k, ke if k < 0 else 0], "unshare": [u, ue if u else 0]}}))
"""
p = subprocess.run([os.environ["EVALRIG_RUN_UNTRUSTED"], "--", "python3", "-c", PROBE], capture_output=True)
seen = json.loads(p.stdout)
with open(os.path.join(os.environ["EVALRIG_VERDICT"], "reward.json"), "w") as f:
    json.dump({{"reward": 1.0, "checks": {{"add_key_eperm": seen["add_key"] == [-1, 1],
                                          "unshare_eperm": seen["unshare"] == [-1, 1]}}}}, f)
'''


@pytest.mark.parametrize("sandbox", ["process", "bwrap"])
def test_the_agents_code_in_an_untrusted_call_runs_under_the_filter_too(tmp_path: Path, sandbox: str) -> None:
    """The untrusted-run service starts the agent's code in a sandbox of its own, as the agent:
    the same filter holds there (add_key and unshare(CLONE_NEWUSER) fail with EPERM)."""
    mark = f"evalrig-key-{secrets.token_hex(6)}"
    home = tmp_path / "home"
    add_task(tmp_path / "tasks", "fixed", "probe",
             verifier='kind = "command"\ncommand = ["python3", "check.py"]\nuntrusted = true',
             verifier_files={"check.py": UNTRUSTED_PROBE_VERIFIER.format(add_key=_NR[0], mark=mark.encode())})
    ck = make_checkpoint(tmp_path / "ck")
    assert eval_sh(home, "seal", ck).code == 0
    try:
        step = eval_sh(home, "run", "--checkpoint", ck, "--tasks", tmp_path / "tasks", "--out", tmp_path / "out",
                       "--sandbox", sandbox, "--repeat", "1")
        [r] = results(tmp_path / "out")
        assert step.code == 0, (step, r)
        assert r["status"] == "passed", r
        assert r["checks"] == {"add_key_eperm": True, "unshare_eperm": True}, r["checks"]
    finally:
        _forget_key(mark)
