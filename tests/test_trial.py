"""One attempt end to end, with real processes: tests/agents/trial_agent.py as the agent,
tests/agents/verifier_check.py as the command verifier."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from evalrig.attempt import sandbox
from evalrig.attempt.trial import (
    AttemptSpec,
    flush_removals,
    run_attempt,
    run_estimate,
    verify_evidence,
)
from evalrig.core.environment import minimal_path
from evalrig.store.checkpoint import load_checkpoint
from evalrig.store.tasks import LoadedTask, load_task

AGENTS = Path(__file__).parent / "agents"
INPUTS_ID = "sha256:" + "0" * 64
NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return orjson.dumps(v).decode()
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(v)


def make_checkpoint(tmp_path: Path, env: Mapping[str, str], estimate: bool = False,
                    command: list[str] | None = None, network: bool = False):
    d = tmp_path / "ckpt"
    d.mkdir()
    shutil.copy(AGENTS / "trial_agent.py", d / "agent.py")
    (d / "state").mkdir()
    (d / "state" / "memory.txt").write_text("remembered\n")
    lines = ['name = "test-agent"', "[agent]",
             f"command = {_toml_value(command or ['python3', 'agent.py'])}",
             f"env = {_toml_value(dict(env))}", f"network = {_toml_value(network)}"]
    if estimate:
        lines.append('estimate = ["python3", "agent.py", "--estimate"]')
    (d / "checkpoint.toml").write_text("\n".join(lines) + "\n")
    return load_checkpoint(d)


def make_task(tmp_path: Path, verifier: Mapping[str, Any], *, timeout_s: float = 20,
              evidence: list[str] | None = None, max_output_bytes: int | None = None,
              max_evidence_bytes: int | None = None, files: Mapping[str, str] | None = None,
              with_verifier_script: bool = False) -> LoadedTask:
    d = tmp_path / "tasks" / "fixed" / "t1"
    d.mkdir(parents=True)
    (d / "prompt.md").write_text("Answer the question.\n")
    lines = [f"timeout_s = {timeout_s!r}"]
    if evidence is not None:
        lines.append(f"evidence = {_toml_value(evidence)}")
    if max_output_bytes is not None:
        lines.append(f"max_output_bytes = {max_output_bytes}")
    if max_evidence_bytes is not None:
        lines.append(f"max_evidence_bytes = {max_evidence_bytes}")
    lines.append("[verifier]")
    lines += [f"{k} = {_toml_value(v)}" for k, v in verifier.items()]
    (d / "task.toml").write_text("\n".join(lines) + "\n")
    for rel, text in (files or {}).items():
        (d / "files" / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / "files" / rel).write_text(text)
    if with_verifier_script:
        (d / "verifier").mkdir()
        shutil.copy(AGENTS / "verifier_check.py", d / "verifier" / "check.py")
        (d / "verifier" / "expected-secret.txt").write_text("the verifier's own file\n")
    task = load_task(d, "fixed")
    assert isinstance(task, LoadedTask), task
    return task


def spec_for(tmp_path: Path, task: LoadedTask, ckpt: Any, *, level: str = "process",
             secrets: Mapping[str, str] | None = None, keep: bool = False, retries: int = 2,
             cancel: threading.Event | None = None, attempt_id: str = "a1",
             timeout_scale: float = 1.0, allow_network: bool = False,
             allow_hosts: tuple[str, ...] = ()) -> AttemptSpec:
    return AttemptSpec(
        trial_id="t1#0", attempt_id=attempt_id, attempt=1, rep=0, seed=12345,
        inputs_id=INPUTS_ID, task=task, checkpoint=ckpt, level=level,  # type: ignore[arg-type]
        slot=0, timeout_scale=timeout_scale, secrets=dict(secrets or {}),
        scratch_root=tmp_path / "scratch", evidence_dir=tmp_path / "bundle" / "attempts" / attempt_id,
        keep_workspace=keep, verifier_retries=retries, cancel=cancel,
        allow_network=allow_network, allow_hosts=allow_hosts,
    )


def attempt(tmp_path: Path, verifier: Mapping[str, Any], env: Mapping[str, str], **kw: Any):
    task_kw = {k: kw.pop(k) for k in list(kw) if k in (
        "timeout_s", "evidence", "max_output_bytes", "max_evidence_bytes", "files", "with_verifier_script")}
    ckpt = make_checkpoint(tmp_path, env, **{k: kw.pop(k) for k in list(kw)
                                             if k in ("estimate", "command", "network")})
    task = make_task(tmp_path, verifier, **task_kw)
    spec = spec_for(tmp_path, task, ckpt, **kw)
    return spec, run_attempt(spec)


EXACT_OK = {"kind": "exact", "expected": "ok"}


def bwrap_level() -> str:
    try:
        choice = sandbox.resolve_level("bwrap")
    except Exception as e:  # EvalrigError: bwrap asked for and not usable
        pytest.skip(f"bubblewrap cannot run here: {e}")
    if choice.level != "bwrap":
        pytest.skip("bubblewrap cannot run here")
    return "bwrap"


# -- statuses per verifier kind ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("verifier", "mode", "answer", "status"),
    [
        (EXACT_OK, "answer", "ok", "passed"),
        (EXACT_OK, "answer", "no", "failed"),
        ({"kind": "regex", "pattern": r"o+k"}, "answer", "oook", "passed"),
        ({"kind": "regex", "pattern": r"o+k"}, "answer", "oooka", "failed"),
        ({"kind": "json", "expected": {"n": 1, "ok": True}}, "json", '{"ok": true, "n": 1.0}', "passed"),
        ({"kind": "json", "expected": {"n": 1, "ok": True}}, "json", '{"ok": 1, "n": 1}', "failed"),
    ],
)
def test_builtin_kinds(tmp_path: Path, verifier: dict, mode: str, answer: str, status: str) -> None:
    spec, got = attempt(tmp_path, verifier, {"MODE": mode, "ANSWER": answer})
    r = got.result
    assert r.status == status
    assert r.passed is (status == "passed")
    assert r.reward == (1.0 if status == "passed" else 0.0)
    assert r.verifier == spec.task.verifier_identity
    assert r.sandbox == "process" and r.verifier_runs == 1
    assert got.actual.exit_code == 0 and not got.actual.timed_out
    assert (spec.evidence_dir / "stdout.txt").read_text() == "agent-ran\n"
    assert not (spec.evidence_dir / "verifier").exists()  # built-in kinds store nothing


def test_missing_answer_is_failed_not_fault(tmp_path: Path) -> None:
    _, got = attempt(tmp_path, EXACT_OK, {"MODE": "hang-never", "ANSWER": "x"})
    assert got.result.status == "failed" and got.result.passed is False


@pytest.mark.parametrize(
    ("mode", "answer", "status", "reward"),
    [("exit", "ok", "passed", 1.0), ("exit", "no", "failed", 0.0), ("full", "ok", "passed", 1.0),
     ("full", "no", "failed", 0.0)],
)
def test_command_verifier(tmp_path: Path, mode: str, answer: str, status: str, reward: float) -> None:
    spec, got = attempt(tmp_path, {"kind": "command", "command": ["python3", "check.py", mode]},
                        {"MODE": "answer", "ANSWER": answer}, with_verifier_script=True)
    r = got.result
    assert (r.status, r.reward, r.verifier_runs) == (status, reward, 1)
    run = spec.evidence_dir / "verifier" / "run-1"
    assert (run / "stdout.txt").read_text() == f"verifier-ran {mode}\n"
    if mode == "full":
        assert r.verifier_usage == {"cost_usd": 0.25, "input_tokens": 10}
        assert got.actual.cost_usd is None  # the judge's spend is never the agent's
        assert (run / "reward.json").is_file()
    else:
        assert r.verifier_usage is None


def test_partial_reward_with_checks(tmp_path: Path) -> None:
    _, got = attempt(tmp_path, {"kind": "command", "command": ["python3", "check.py", "reward"]},
                     {"MODE": "answer", "ANSWER": "ok"}, with_verifier_script=True)
    r = got.result
    assert (r.status, r.passed, r.reward) == ("failed", False, 0.5)
    assert r.checks == {"format": True, "value": True}


def _shared(tmp_path: Path) -> Path:
    """A folder outside the workspace that the agent may write to: as root, under process,
    the agent runs as an unprivileged uid of the pool, so only where others may write; and
    only without the private view (its /tmp is a fresh tmpfs), so the test plays a host
    where none can be made (`_host_view`)."""
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o777)
    for parent in d.parents:  # the rig opens its scratch's parents the same way (search only)
        if parent.stat().st_uid == os.geteuid() and parent.is_relative_to(tmp_path.parent.parent):
            parent.chmod(parent.stat().st_mode | 0o001)
    return d


@pytest.fixture
def _host_view(monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent under process sees the host's /tmp: a host where evalrig-drop --private
    cannot make its namespaces (the rig's fallback; docs/security.md)."""
    monkeypatch.setitem(sandbox.HOST._known, "private view", "played by the test")


@pytest.mark.usefixtures("_host_view")
def test_verifier_crashing_once_is_rerun_on_the_same_evidence(tmp_path: Path) -> None:
    counter = _shared(tmp_path) / "agent-runs"
    # the verifier's mark of its first run: where a judges'-pool uid may write it (as root,
    # under process, a verifier runs as one, never as the rig)
    state = counter.parent / "verifier-crashed"
    spec, got = attempt(
        tmp_path, {"kind": "command", "command": ["python3", "check.py", "crash-once", str(state)]},
        {"MODE": "answer", "ANSWER": "ok", "COUNTER": str(counter)}, with_verifier_script=True)
    r = got.result
    assert (r.status, r.passed, r.verifier_runs) == ("passed", True, 2)
    assert counter.read_text() == "ran\n"  # the agent ran once
    assert sorted(os.listdir(spec.evidence_dir / "verifier")) == ["run-1", "run-2", "verdict.json"]
    verdict = orjson.loads((spec.evidence_dir / "verifier" / "verdict.json").read_bytes())
    assert (verdict["outcome"], verdict["runs"]) == ("passed", 2)


@pytest.mark.usefixtures("_host_view")
def test_verifier_always_crashing_is_infra_error(tmp_path: Path) -> None:
    counter = _shared(tmp_path) / "agent-runs"
    _, got = attempt(tmp_path, {"kind": "command", "command": ["python3", "check.py", "crash"]},
                     {"MODE": "answer", "ANSWER": "ok", "COUNTER": str(counter)},
                     with_verifier_script=True, retries=2)
    r = got.result
    assert (r.status, r.passed, r.reward, r.verifier_runs) == ("infra_error", None, None, 3)
    assert r.error == "verifier fault: verifier exited 2 (0 pass, 1 fail, anything else is a fault)"
    assert counter.read_text() == "ran\n"


def test_malformed_reward_json_is_a_fault(tmp_path: Path) -> None:
    _, got = attempt(tmp_path, {"kind": "command", "command": ["python3", "check.py", "malformed"]},
                     {"MODE": "answer", "ANSWER": "ok"}, with_verifier_script=True, retries=0)
    r = got.result
    assert (r.status, r.verifier_runs) == ("infra_error", 1)
    assert r.error is not None and r.error.startswith("verifier fault: reward.json is not JSON")


def test_verifier_sees_exactly_the_evidence(tmp_path: Path) -> None:
    spec, got = attempt(tmp_path, {"kind": "command", "command": ["python3", "check.py", "ls"]},
                        {"MODE": "answer", "ANSWER": "ok"}, with_verifier_script=True,
                        evidence=["work/**/*.py"], files={"src/app.py": "x = 1\n", "notes.txt": "n"})
    assert got.result.status == "passed"
    assert sorted(got.result.checks) == ["evidence_index.json", "out/answer.txt", "stderr.txt", "stdout.txt", "work/src/app.py"]


def test_verifier_timeout_is_a_fault(tmp_path: Path) -> None:
    _, got = attempt(tmp_path, {"kind": "command", "command": ["python3", "check.py", "hang"],
                                "timeout_s": 0.5},
                     {"MODE": "answer", "ANSWER": "ok"}, with_verifier_script=True, retries=0)
    assert (got.result.status, got.result.verifier_runs) == ("infra_error", 1)
    assert got.result.error == "verifier fault: verifier ran past its limit of 0.5 s"


def test_verifier_env_and_cwd(tmp_path: Path) -> None:
    _, got = attempt(tmp_path, {"kind": "command", "command": ["python3", "check.py", "env"]},
                     {"MODE": "answer", "ANSWER": "ok"}, with_verifier_script=True,
                     secrets={"MODEL_API_KEY": "sk-never-for-the-judge"})
    assert got.result.status == "passed", got.result.error
    flush_removals()
    assert os.listdir(tmp_path / "scratch") == []  # attempt root and verifier scratch gone


def test_network_hole_recorded(tmp_path: Path) -> None:
    """Had network: the operator granted it and the checkpoint asks (docs/security.md)."""
    spec, got = attempt(tmp_path, EXACT_OK, {"MODE": "answer", "ANSWER": "ok"}, network=True,
                        allow_network=True)
    assert got.result.network is True and got.result.network_hosts == []
    assert (spec.evidence_dir / "network.jsonl").read_bytes() == b""  # had it, used none
    (tmp_path / "b").mkdir()
    spec, got = attempt(tmp_path / "b", EXACT_OK, {"MODE": "answer", "ANSWER": "ok"})
    assert got.result.network is False
    assert not (spec.evidence_dir / "network.jsonl").exists()
    (tmp_path / "c").mkdir()  # the grant alone, with nothing asking for it: no network
    _, got = attempt(tmp_path / "c", EXACT_OK, {"MODE": "answer", "ANSWER": "ok"}, allow_network=True)
    assert got.result.network is False


def test_verify_evidence_rederives_the_same_verdict(tmp_path: Path) -> None:
    spec, got = attempt(tmp_path, {"kind": "command", "command": ["python3", "check.py", "ls"]},
                        {"MODE": "answer", "ANSWER": "ok"}, with_verifier_script=True)
    before = sorted(p.relative_to(spec.evidence_dir) for p in spec.evidence_dir.rglob("*"))
    again = verify_evidence(spec.task, spec.evidence_dir, "process", 0, 0, tmp_path / "scratch2")
    assert again.outcome == "passed"
    assert again.checks == got.result.checks  # verifier/ is not shown to the re-run
    assert sorted(p.relative_to(spec.evidence_dir) for p in spec.evidence_dir.rglob("*")) == before


# -- the agent's failures -------------------------------------------------------------------------


def test_agent_exit_3_is_agent_error_with_diagnostic(tmp_path: Path) -> None:
    _, got = attempt(tmp_path, EXACT_OK, {"MODE": "exit3", "ANSWER": "ok"})
    r = got.result
    assert (r.status, r.passed, r.reward) == ("agent_error", False, 0.0)
    assert r.diagnostic is not None and r.diagnostic.passed is True and r.diagnostic.reward == 1.0
    assert r.error == "the agent exited 3"
    assert got.actual.exit_code == 3


def test_missing_program_is_agent_error(tmp_path: Path) -> None:
    _, got = attempt(tmp_path, EXACT_OK, {}, command=["no-such-program-xyz", "--go"])
    r = got.result
    assert (r.status, r.passed) == ("agent_error", False)
    assert r.error is not None
    assert r.error.startswith("the agent could not start: no-such-program-xyz: not found on PATH")


def test_workspace_failure_is_infra_error(tmp_path: Path) -> None:
    ckpt = make_checkpoint(tmp_path, {"MODE": "answer", "ANSWER": "ok"})
    spec = spec_for(tmp_path, make_task(tmp_path, EXACT_OK), ckpt)
    spec.scratch_root.write_text("a file where the scratch directory should be")
    got = run_attempt(spec)
    r = got.result
    assert (r.status, r.passed, r.reward, r.verifier_runs) == ("infra_error", None, None, 0)
    assert r.error is not None and r.error.startswith("the rig could not make the workspace: ")
    assert (spec.evidence_dir / "stdout.txt").read_bytes() == b""
    assert got.actual.exit_code is None and got.actual.usage_source == "missing"


def test_timeout(tmp_path: Path) -> None:
    _, got = attempt(tmp_path, EXACT_OK, {"MODE": "hang"}, timeout_s=1)
    r = got.result
    assert (r.status, r.passed, r.reward) == ("timeout", False, 0.0)
    assert got.actual.timed_out and 0.9 < got.actual.wall_s < 10
    assert r.diagnostic is not None and r.diagnostic.passed is False  # judged, for diagnosis only


def test_cancel_is_interrupted(tmp_path: Path) -> None:
    cancel = threading.Event()
    timer = threading.Timer(0.5, cancel.set)
    timer.start()
    _, got = attempt(tmp_path, EXACT_OK, {"MODE": "hang"}, timeout_s=30, cancel=cancel)
    timer.cancel()
    assert (got.result.status, got.result.passed) == ("interrupted", None)
    assert got.actual.wall_s < 10


# -- evidence -----------------------------------------------------------------------------------


def test_symlink_in_out_not_followed(tmp_path: Path) -> None:
    spec, got = attempt(tmp_path, EXACT_OK, {"MODE": "symlink"})
    r = got.result
    assert r.status == "failed"  # answer.txt was a link to /etc/hostname: not evidence
    assert sorted(r.evidence_skipped) == ["out/answer.txt (symlink)", "out/etc (symlink)"]
    assert not (spec.evidence_dir / "out" / "etc").exists()
    assert not any(p.is_symlink() for p in spec.evidence_dir.rglob("*"))


def test_fifo_in_out_skipped(tmp_path: Path) -> None:
    _, got = attempt(tmp_path, EXACT_OK, {"MODE": "fifo"})
    assert got.result.status == "passed"
    assert got.result.evidence_skipped == ["out/pipe (fifo)"]


def test_evidence_cap(tmp_path: Path) -> None:
    spec, got = attempt(tmp_path, EXACT_OK, {"MODE": "big", "SIZE": "50000"}, max_evidence_bytes=20000)
    r = got.result
    assert r.evidence_truncated and r.status == "passed"
    assert not (spec.evidence_dir / "out" / "big.bin").exists()
    assert r.evidence_bytes <= 20000


def test_evidence_digest_covers_what_the_verifier_judged(tmp_path: Path) -> None:
    from evalrig.store.tree import hash_tree

    spec, got = attempt(tmp_path, EXACT_OK, {"MODE": "answer", "ANSWER": "ok"})
    tree = hash_tree(spec.evidence_dir, exclude=frozenset({"verifier"}))
    assert got.result.evidence_digest == tree.digest
    index = (spec.evidence_dir / "evidence_index.json").stat().st_size  # the rig's, in the evidence
    assert got.result.evidence_bytes == tree.bytes == len("agent-ran\n") + len("ok\n") + index


@pytest.mark.parametrize(
    ("body", "source", "cost", "tin", "tout", "error"),
    [
        ('{"cost_usd": 0.012, "input_tokens": 1200, "output_tokens": 300}', "reported", 0.012, 1200, 300, None),
        ('{"cost_usd": 0.5}', "reported", 0.5, None, None, None),
        ('{"cost_usd": -1}', "missing", None, None, None,
         "out/usage.json ignored: cost_usd: expected a number >= 0"),
        ('{"input_tokens": 1.5}', "missing", None, None, None,
         "out/usage.json ignored: input_tokens: expected an integer >= 0"),
        ("not json", "missing", None, None, None, "out/usage.json ignored: not JSON"),
    ],
)
def test_usage(tmp_path: Path, body: str, source: str, cost: float | None, tin: int | None,
               tout: int | None, error: str | None) -> None:
    _, got = attempt(tmp_path, EXACT_OK, {"MODE": "usage", "USAGE": body})
    a = got.actual
    assert (a.usage_source, a.cost_usd, a.input_tokens, a.output_tokens) == (source, cost, tin, tout)
    assert got.result.status == "passed"
    if error is None:
        assert got.result.error is None
    else:
        assert got.result.error is not None and got.result.error.startswith(error)


def test_usage_missing_is_null_never_zero(tmp_path: Path) -> None:
    _, got = attempt(tmp_path, EXACT_OK, {"MODE": "answer", "ANSWER": "ok"})
    a = got.actual
    assert (a.usage_source, a.cost_usd, a.input_tokens, a.output_tokens) == ("missing", None, None, None)


# -- canary and secrets -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["canary-plain", "canary-base64", "canary-late"])
def test_canary_found(tmp_path: Path, mode: str) -> None:
    spec, got = attempt(tmp_path, EXACT_OK, {"MODE": mode, "PAD": "5000"}, max_output_bytes=1000)
    c = got.result.canary
    assert c.found and "stdout" in c.where
    assert c.value.startswith("rst_") and len(c.value) == 36
    if mode == "canary-late":  # past the cap: not in the stored stream, found in the whole one
        assert got.actual.stdout_truncated
        assert c.value.encode().hex() not in (spec.evidence_dir / "stdout.txt").read_text()


def test_planted_canary_file_is_not_evidence_but_a_copy_is(tmp_path: Path) -> None:
    # `**` matches home/.release-token too: the rig's own file is no leak
    spec, got = attempt(tmp_path, EXACT_OK, {"MODE": "answer", "ANSWER": "ok"}, evidence=["**"])
    assert not got.result.canary.found
    assert not (spec.evidence_dir / "home" / ".release-token").exists()
    assert (spec.evidence_dir / "prompt.md").is_file() and (spec.evidence_dir / "agent" / "agent.py").is_file()
    (tmp_path / "b").mkdir()
    _, got = attempt(tmp_path / "b", EXACT_OK, {"MODE": "canary-copy"}, evidence=["work/**"])
    assert got.result.canary.where == ["work/stolen.txt"]


def test_canary_absent_and_fresh_per_attempt(tmp_path: Path) -> None:
    ckpt = make_checkpoint(tmp_path, {"MODE": "answer", "ANSWER": "ok"})
    task = make_task(tmp_path, EXACT_OK)
    a = run_attempt(spec_for(tmp_path, task, ckpt, attempt_id="a1")).result.canary
    b = run_attempt(spec_for(tmp_path, task, ckpt, attempt_id="a2")).result.canary
    assert not a.found and not b.found and a.where == []
    assert a.value != b.value


def test_secret_redacted_everywhere(tmp_path: Path) -> None:
    secret = "sk-test-0123456789-very-secret"
    spec, got = attempt(tmp_path, {"kind": "command", "command": ["python3", "check.py", "ls"]},
                        {"MODE": "secret", "SECRET_NAME": "MODEL_API_KEY"},
                        secrets={"MODEL_API_KEY": secret}, with_verifier_script=True)
    assert got.result.status == "passed"
    assert (spec.evidence_dir / "out" / "leak.txt").read_text() == "key=[REDACTED:MODEL_API_KEY]\n"
    assert "[REDACTED:MODEL_API_KEY]" in (spec.evidence_dir / "stdout.txt").read_text()
    files = [p for p in spec.evidence_dir.rglob("*") if p.is_file()]
    assert len(files) > 5
    for p in files:
        assert secret.encode() not in p.read_bytes(), p
    assert secret not in got.result.model_dump_json() + got.actual.model_dump_json()


DOCUMENTED_ENV = {
    "PATH", "HOME", "LANG", "TMPDIR", "EVALRIG_PROMPT", "EVALRIG_WORK", "EVALRIG_OUT",
    "EVALRIG_TASK_ID", "EVALRIG_ATTEMPT_ID", "EVALRIG_DEADLINE_S", "EVALRIG_SEED",
    "RELEASE_SIGNING_TOKEN",
}


def test_env_is_exactly_the_documented_set(tmp_path: Path) -> None:
    os.environ["EVALRIG_TEST_LEAK"] = "rig-only"
    try:
        spec, got = attempt(tmp_path, {"kind": "exact", "expected": "same"},
                            {"MODE": "env", "MODEL": "m-1"}, secrets={"MODEL_API_KEY": "sk-abc-123"},
                            keep=True, timeout_scale=1.5)
    finally:
        del os.environ["EVALRIG_TEST_LEAK"]
    assert got.result.status == "passed"  # the canary file holds the canary variable's value
    env = orjson.loads((spec.evidence_dir / "out" / "env.json").read_bytes())
    root = spec.scratch_root / spec.attempt_id
    assert set(env) == DOCUMENTED_ENV | {"MODE", "MODEL", "MODEL_API_KEY"}
    assert env["PATH"] == minimal_path()
    assert env["HOME"] == str(root / "home") and env["LANG"] == "C.UTF-8"
    assert env["TMPDIR"] == str(root / "tmp")
    assert env["EVALRIG_PROMPT"] == str(root / "prompt.md")
    assert env["EVALRIG_WORK"] == str(root / "work") and env["EVALRIG_OUT"] == str(root / "out")
    assert (env["EVALRIG_TASK_ID"], env["EVALRIG_ATTEMPT_ID"]) == ("t1", "a1")
    assert (env["EVALRIG_DEADLINE_S"], env["EVALRIG_SEED"]) == ("30", "12345")  # 20 s × 1.5
    assert env["RELEASE_SIGNING_TOKEN"] == got.result.canary.value
    # the workspace: a copy of the checkpoint, the prompt
    assert (root / "agent" / "state" / "memory.txt").read_text() == "remembered\n"
    assert (root / "prompt.md").read_text() == "Answer the question.\n"


# -- the workspace ---------------------------------------------------------------------------------


def test_workspace_removed_and_checkpoint_untouched(tmp_path: Path) -> None:
    from evalrig.store.tree import hash_tree

    ckpt = make_checkpoint(tmp_path, {"MODE": "answer", "ANSWER": "ok"})
    before = hash_tree(ckpt.dir).digest
    spec = spec_for(tmp_path, make_task(tmp_path, EXACT_OK), ckpt)
    run_attempt(spec)
    flush_removals()
    assert not (spec.scratch_root / spec.attempt_id).exists()
    assert hash_tree(ckpt.dir).digest == before


def test_workspace_kept(tmp_path: Path) -> None:
    spec, _ = attempt(tmp_path, EXACT_OK, {"MODE": "answer", "ANSWER": "ok"}, keep=True,
                      files={"data.csv": "a,b\n"})
    root = spec.scratch_root / spec.attempt_id
    assert (root / "out" / "answer.txt").read_text() == "ok\n"
    assert (root / "work" / "data.csv").read_text() == "a,b\n"


# -- estimates --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("printed", "exit_code", "state", "fields", "error"),
    [
        ('{"p_success": 0.7, "time_s": [5, 40], "cost_usd": [0.01, 0.05], "level": 0.9}', 0, "valid",
         {"p_success": 0.7, "time_s": (5.0, 40.0), "cost_usd": (0.01, 0.05), "level": 0.9}, None),
        ("{}", 0, "valid", {"p_success": None, "level": 0.8}, None),
        ('{"p_success": 1.5}', 0, "malformed", {}, "p_success: expected a number in [0, 1]"),
        ('{"p_success": true}', 0, "malformed", {}, "p_success: expected a number in [0, 1]"),
        ('{"time_s": [40, 5]}', 0, "malformed", {}, "time_s: expected 0 <= low <= high, got [40, 5]"),
        ('{"level": 1}', 0, "malformed", {}, "level: expected a number strictly between 0 and 1"),
        ('{"guess": 1}', 0, "malformed", {}, "unknown key 'guess'"),
        ("p=0.7", 0, "malformed", {}, "stdout is not one JSON object"),
        ("[0.7]", 0, "malformed", {}, "stdout is not one JSON object"),
        ("", 0, "missing", {}, "estimate command printed nothing"),
        ('{"p_success": 0.7}', 1, "missing", {}, "estimate command exited 1"),
    ],
)
def test_estimate(tmp_path: Path, printed: str, exit_code: int, state: str, fields: dict,
                  error: str | None) -> None:
    ckpt = make_checkpoint(tmp_path, {"ESTIMATE": printed, "ESTIMATE_EXIT": str(exit_code)}, estimate=True)
    spec = spec_for(tmp_path, make_task(tmp_path, EXACT_OK), ckpt)
    est = run_estimate(spec, "e1", NOW)
    assert (est.state, est.estimate_id, est.attempt_id, est.at) == (state, "e1", "a1", NOW)
    for k, v in fields.items():
        assert getattr(est, k) == v
    if error is None:
        assert est.error is None
    else:
        assert est.error is not None and est.error.startswith(error)
    flush_removals()
    assert not (spec.scratch_root / "a1.estimate").exists()


def test_estimate_none(tmp_path: Path) -> None:
    ckpt = make_checkpoint(tmp_path, {})
    est = run_estimate(spec_for(tmp_path, make_task(tmp_path, EXACT_OK), ckpt), "e1", NOW)
    assert est.state == "none" and est.error is None


# -- bwrap -------------------------------------------------------------------------------------------


def test_bwrap_agent_cannot_see_verifier_files(tmp_path: Path) -> None:
    level = bwrap_level()
    task = make_task(tmp_path, {"kind": "exact", "expected": "absent"}, with_verifier_script=True)
    target = task.verifier_dir / "expected-secret.txt"
    ckpt = make_checkpoint(tmp_path, {"MODE": "peek", "PEEK": str(target)})
    got = run_attempt(spec_for(tmp_path, task, ckpt, level=level))
    assert got.result.sandbox == "bwrap"
    assert (got.result.status, got.result.passed) == ("passed", True), got.result.error
    # and under process without its private view it can (the level hides little): the test can fail
    sandbox.HOST.pretend("private view", "played by the test")
    try:
        got2 = run_attempt(spec_for(tmp_path, task, ckpt, level="process", attempt_id="a2"))
    finally:
        del sandbox.HOST._known["private view"]
    assert got2.result.status == "failed"


def test_bwrap_command_verifier_and_readonly_evidence(tmp_path: Path) -> None:
    level = bwrap_level()
    task = make_task(tmp_path, {"kind": "command", "command": ["python3", "check.py", "write-evidence"]},
                     with_verifier_script=True)
    ckpt = make_checkpoint(tmp_path, {"MODE": "answer", "ANSWER": "ok"})
    spec = spec_for(tmp_path, task, ckpt, level=level)
    got = run_attempt(spec)
    assert (got.result.status, got.result.sandbox) == ("passed", "bwrap"), got.result.error
    assert not (spec.evidence_dir / "forged.txt").exists()


def test_bwrap_env_and_canary(tmp_path: Path) -> None:
    level = bwrap_level()
    spec, got = attempt(tmp_path, {"kind": "exact", "expected": "same"}, {"MODE": "env"}, level=level)
    assert got.result.status == "passed", got.result.error
    env = orjson.loads((spec.evidence_dir / "out" / "env.json").read_bytes())
    assert env["TMPDIR"] == "/tmp"
    assert set(env) == DOCUMENTED_ENV | {"MODE"}
