"""A small fixed run bundle for `show` and `export` tests: a real task set (exact, regex,
json and command verifiers, and an episode with a transcript written to the contract of
docs/reading.md), evidence folders, and a manifest whose digests cover every file. Ids and
times are fixed, so `show`'s output is the same on every machine (golden files)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evalrig.core.digest import canonical_json, canonical_line, sha256_bytes
from evalrig.models.run import (
    Actual,
    Canary,
    CheckpointRef,
    Result,
    RunCounts,
    RunManifest,
    RunSettings,
    TasksetRef,
)
from evalrig.run.lifecycle import register_finished
from evalrig.store.bundle import file_digests, write_run_manifest
from evalrig.store.files import write_json_atomic
from evalrig.store.tasks import content_digest, load_taskset

T0 = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
HOSTILE = "[bold red]pwned[/] \x1b[2J\x1b]0;title\x07 over\rwrite \u202eevil"

TASKS = {
    "fresh/exact-1": ('[verifier]\nkind = "exact"\nexpected = "42"\n', ["math"]),
    "fresh/regex-1": ('[verifier]\nkind = "regex"\npattern = "^ok-[0-9]+$"\n', ["text"]),
    "fresh/json-1": ('[verifier]\nkind = "json"\nexpected = {a = 1, b = [1, 2]}\n', ["json"]),
    "fresh/cmd-1": ('[verifier]\nkind = "command"\ncommand = ["python3", "check.py"]\n', ["code"]),
    "fresh/chat-1": ('[verifier]\nkind = "exact"\nexpected = "done"\n', ["episode"]),
    "fixed/fixed-1": ('[verifier]\nkind = "exact"\nexpected = "x"\n', ["math"]),
    "fresh/text-1": ('[verifier]\nkind = "exact"\nexpected = """\n' + "".join(f"line {i}\n" for i in range(12)) + '"""\n',
                     ["text"]),
}

# attempt answers per task: (status, reward, answer file, answer bytes)
ATTEMPTS: dict[str, list[tuple[str, float | None, str | None, bytes]]] = {
    "exact-1": [("passed", 1.0, "answer.txt", b"42\n"), ("failed", 0.0, "answer.txt", HOSTILE.encode())],
    "regex-1": [("passed", 1.0, "answer.txt", b"ok-7\n"), ("failed", 0.0, "answer.txt", b"nope\n")],
    "json-1": [("failed", 0.0, "answer.json", b'{"a": 1, "b": [1, 3]}'), ("passed", 1.0, "answer.json", b'{"a":1,"b":[1,2]}')],
    "cmd-1": [("failed", 0.25, "answer.txt", b"partial\n"), ("passed", 1.0, "answer.txt", b"full\n")],
    "chat-1": [("passed", 1.0, None, b""), ("failed", 0.0, None, b"")],
    "fixed-1": [("passed", 1.0, "answer.txt", b"x\n"), ("passed", 1.0, "answer.txt", b"x\n")],
    "text-1": [("failed", 0.0, "answer.txt", "".join(f"line {i}\n" if i != 6 else "LINE six\n"
                                                         for i in range(12)).encode()),
               ("passed", 1.0, "answer.txt", "".join(f"line {i}\n" for i in range(12)).encode())],
}


def write_tasks(root: Path) -> Path:
    for rel, (verifier, tags) in TASKS.items():
        d = root / rel
        d.mkdir(parents=True)
        created = "created_at = 2026-12-01T11:00:00.000000Z\n" if rel.startswith("fresh/") else ""
        (d / "task.toml").write_text(f"{created}tags = {tags!r}\n".replace("'", '"') + verifier)
        (d / "prompt.md").write_text(f"Solve {rel.split('/')[1]}.\n")
        if "command" in verifier:
            (d / "verifier").mkdir()
            (d / "verifier" / "check.py").write_text("print('checked')\n")
    return root


def _frame(seq: int, who: str, to: str, frame: dict[str, Any], prefix: list[Any] | None) -> dict[str, Any]:
    line = {"seq": seq, "from": who, "to": to, "frame": frame, "t_ms": seq * 10}
    if prefix is not None:
        line["prefix"] = sha256_bytes(canonical_json(prefix))
    return line


def transcript(rep: int) -> bytes:
    """An episode: the user asks, the agent calls a tool (an error), then answers; rep 1 goes
    another way after the shared start."""
    user = {"role": "user", "content": "Please cancel order 7."}
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "cancel", "arguments": '{"order": 7}'}}]}
    result = {"role": "tool", "tool_call_id": "c1", "content": "no such order [bold]", "error": True}
    final = {"role": "assistant", "content": "done" if rep == 0 else "I cannot \x1b[31mhelp"}
    tools = [{"type": "function", "function": {"name": "cancel", "parameters": {"type": "object"}}}]
    lines = [
        _frame(0, "rig", "driver", {"type": "start", "task_id": "chat-1", "attempt_id": "a-chat-1-0", "seed": 1}, None),
        _frame(1, "driver", "rig", {"type": "session", "tools": tools, "messages": [user]}, None),
        _frame(2, "rig", "agent", {"type": "session", "tools": tools, "messages": [user]}, []),
        _frame(3, "agent", "rig", {"type": "message", "message": call}, [user]),
        _frame(4, "rig", "driver", {"type": "message", "message": call}, None),
        _frame(5, "driver", "rig", {"type": "reply", "messages": [result]}, None),
        _frame(6, "rig", "agent", {"type": "turn", "messages": [result]}, [user, call]),
        _frame(7, "agent", "rig", {"type": "message", "message": final}, [user, call, result]),
        _frame(8, "driver", "rig", {"type": "end", "reason": "user satisfied"}, None),
        _frame(9, "rig", "driver", {"type": "finish", "termination": "driver_end"}, None),
    ]
    return b"".join(canonical_line(x) for x in lines)


def write_bundle(dir: Path, tasks_dir: Path, home: Path | None = None, run_id: str = "run-fixed",
                 name: str = "agent-a", prefix: str = "a") -> Path:
    taskset = load_taskset(tasks_dir)
    by_id = taskset.by_id()
    dir.mkdir(parents=True)
    results, actuals = [], []
    for task_id in sorted(ATTEMPTS):
        task = by_id[task_id]
        for rep, (status, reward, fname, data) in enumerate(ATTEMPTS[task_id]):
            aid = f"{prefix}-{task_id}-{rep}"
            ev = dir / "attempts" / aid
            (ev / "out").mkdir(parents=True)
            if fname:
                (ev / "out" / fname).write_bytes(data)
            (ev / "stdout.txt").write_bytes(b"working\n" + (HOSTILE.encode() if task_id == "exact-1" else b"") + b"\n")
            (ev / "stderr.txt").write_bytes(b"")
            if task_id == "cmd-1":
                (ev / "verifier" / "run-1").mkdir(parents=True)
                (ev / "verifier" / "run-1" / "stdout.txt").write_text(f"test_a ok\ntest_b {'ok' if reward == 1 else 'FAIL'}\n")
                (ev / "verifier" / "run-1" / "stderr.txt").write_text("")
            if task_id == "chat-1":
                (ev / "transcript.jsonl").write_bytes(transcript(rep))
            results.append(Result(
                trial_id=f"{task_id}:{rep}", attempt_id=aid, attempt=1, task_id=task_id, suite=task.suite, rep=rep,
                inputs_id=sha256_bytes(f"{task_id}:{rep}".encode()), status=status, passed=status == "passed",
                reward=reward, checks={"tests": reward == 1.0} if task_id == "cmd-1" else {},
                verifier=task.verifier_identity, sandbox="bwrap", containment="namespace", network=False,
                canary=Canary(value="c4n4ry", found=False), evidence_digest=sha256_bytes(aid.encode()),
                evidence_bytes=10))
            actuals.append(Actual(
                trial_id=f"{task_id}:{rep}", attempt_id=aid, task_id=task_id, rep=rep, wall_s=1.5 + rep,
                cpu_s=0.5, exit_code=0, timed_out=False, cost_usd=0.01, usage_source="reported",
                stdout_bytes=8, stderr_bytes=0, stdout_truncated=False, stderr_truncated=False))
    (dir / "results.jsonl").write_bytes(b"".join(canonical_line(r) for r in results))
    (dir / "actuals.jsonl").write_bytes(b"".join(canonical_line(a) for a in actuals))
    (dir / "attempts.jsonl").write_bytes(b"")
    (dir / "estimates.jsonl").write_bytes(b"")
    fresh = [t for t in taskset.tasks if t.suite == "fresh"]
    passed = sum(r.status == "passed" for r in results)
    manifest = RunManifest(
        run_id=run_id, rig_version="0.1.0",
        checkpoint=CheckpointRef(id=sha256_bytes(name.encode()), name=name, sealed_at=T0),
        taskset=TasksetRef(id=taskset.id, count=len(taskset.tasks), suites=taskset.suites(),
                           fresh_created_at={t.id: t.spec.created_at for t in fresh if t.spec.created_at},
                           fresh_content={t.id: content_digest(t) for t in fresh}),
        repeat=2, seed=0,
        settings=RunSettings(timeout_scale=1.0, max_retries=0, sandbox="bwrap", tasks_dir=str(tasks_dir),
                             checkpoint_dir="ckpt", jobs=1),
        subset=False, policy_pin=None, plan_digest=sha256_bytes(b"plan"), status="complete",
        counts=RunCounts(trials=len(results), scored=len(results), passed=passed, failed=len(results) - passed,
                         agent_error=0, timeout=0, infra_error=0, interrupted=0, attempts=len(results), unscored=0),
        seal_checks=[], created_at=T0, finished_at=T0, files=file_digests(dir))
    if home is not None:
        manifest = write_run_manifest(dir, manifest, home)  # signed by the home that "ran" it
        register_finished(home, manifest)
    else:
        write_json_atomic(dir / "manifest.json", manifest)
    return dir
