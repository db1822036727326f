"""The example agents, the bundled tasks and the fresh-task generator, on their own.

Real processes throughout: each agent runs as `python3 agent.py` in a hand-made attempt
layout (agent/ copy, work/ from files/, out/, prompt.md, the EVALRIG_* variables of
docs/agents.md), the evidence is assembled as docs/tasks.md lays it out, and command verifiers run
as subprocesses from their verifier/ folder. The rig itself is not involved, so these
tests keep the agents and tasks honest whatever state the runner is in.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from pathlib import Path

import pytest
from untrusted_standin import standin

from evalrig.models.inputs import TaskFile

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
TASKS = ROOT / "tasks"
GENERATOR = EXAMPLES / "make_fresh_tasks.py"
AGENTS = ("champion", "candidate")
# The interpreter the sandbox gives agents; a version-manager shim on PATH would cost 0.1 s
# a process and say nothing about the agents.
PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
PATH = f"{Path(PYTHON).parent}:/usr/bin:/bin"
JOBS = 4
K = 5


# -- a tiny stand-in for the rig --------------------------------------------------------


@dataclass(frozen=True)
class Task:
    dir: Path
    spec: TaskFile


def load_task(task_dir: Path) -> Task:
    raw = tomllib.loads((task_dir / "task.toml").read_text())
    raw.setdefault("id", task_dir.name)
    raw.setdefault("suite", task_dir.parent.name)
    return Task(task_dir, TaskFile.model_validate(raw))


def load_suite(root: Path, suite: str) -> list[Task]:
    return [load_task(d) for d in sorted((root / suite).iterdir()) if d.is_dir()]


def trial_seed(seed: int, task_id: str, rep: int) -> int:
    """docs/agents.md: first 8 bytes of sha256("<seed>:<task_id>:<rep>"), big-endian, mod 2^31."""
    digest = hashlib.sha256(f"{seed}:{task_id}:{rep}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 2**31


@dataclass(frozen=True)
class Attempt:
    agent: str
    task_id: str
    rep: int
    exit_code: int
    passed: bool
    cpu_s: float  # the agent's own CPU time: robust where wall time depends on the machine's load
    usage: dict | None


def glob_regex(pattern: str) -> re.Pattern[str]:
    """docs/tasks.md: `**` any number of path segments (all below, when last), `*` and `?` within one."""
    out = []
    parts = pattern.split("/")
    for i, seg in enumerate(parts):
        if seg == "**":
            out.append(".*" if i == len(parts) - 1 else "(?:[^/]+/)*")
            continue
        piece = "".join("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c) for c in seg)
        out.append(piece + ("" if i == len(parts) - 1 else "/"))
    return re.compile("".join(out))


def collect_evidence(root: Path, evidence: Path, globs: Iterable[str], stdout: bytes, stderr: bytes) -> None:
    """out/, stdout.txt, stderr.txt and the task's globs at their paths (regular files only)."""
    shutil.copytree(root / "out", evidence / "out", symlinks=True)
    (evidence / "stdout.txt").write_bytes(stdout)
    (evidence / "stderr.txt").write_bytes(stderr)
    files = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
    for pattern in globs:
        rx = glob_regex(pattern)
        for rel in files:
            if rx.fullmatch(rel) and rel.split("/")[0] not in ("out", "stdout.txt", "stderr.txt"):
                (evidence / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(root / rel, evidence / rel)


def answer_text(evidence: Path) -> str | None:
    path = evidence / "out" / "answer.txt"
    return path.read_text().strip() if path.is_file() else None


def same_json(got: object, expected: object) -> bool:
    """docs/tasks.md: numbers by value (1 == 1.0), booleans are not numbers."""
    if isinstance(got, bool) or isinstance(expected, bool):
        return type(got) is type(expected) and got == expected
    if isinstance(got, int | float) and isinstance(expected, int | float):
        return got == expected
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == expected.keys() and all(same_json(got[k], expected[k]) for k in got)
    if isinstance(got, list) and isinstance(expected, list):
        return len(got) == len(expected) and all(same_json(a, b) for a, b in zip(got, expected, strict=True))
    return type(got) is type(expected) and got == expected


def run_command_verifier(task: Task, evidence: Path, scratch: Path) -> bool:
    verdict = scratch / "verdict"
    verdict.mkdir()
    env = {"PATH": PATH, "LANG": "C.UTF-8", "HOME": str(scratch),
           "EVALRIG_EVIDENCE": str(evidence), "EVALRIG_VERDICT": str(verdict)}  # fmt: skip
    v = task.spec.verifier
    if v.untrusted:  # type: ignore[union-attr]
        env["EVALRIG_RUN_UNTRUSTED"] = str(standin(scratch / "service", evidence))
    proc = subprocess.run(v.command, cwd=task.dir / "verifier", env=env, capture_output=True,
                          timeout=v.timeout_s)  # type: ignore[union-attr]  # fmt: skip
    assert proc.returncode in (0, 1), f"{task.spec.id}: verifier fault: exit {proc.returncode}\n{proc.stderr.decode()}"
    reward_file = verdict / "reward.json"
    if not reward_file.exists():
        return proc.returncode == 0
    body = json.loads(reward_file.read_text())
    assert set(body) <= {"reward", "checks", "passed"}, body
    if "passed" in body:
        return bool(body["passed"])
    return body["reward"] == 1 and all(body.get("checks", {}).values())


def verify(task: Task, evidence: Path, scratch: Path) -> bool:
    v = task.spec.verifier
    if v.kind == "exact":
        return answer_text(evidence) == v.expected
    if v.kind == "regex":
        text = answer_text(evidence)
        return text is not None and re.fullmatch(v.pattern, text) is not None
    if v.kind == "json":
        path = evidence / "out" / "answer.json"
        try:
            return same_json(json.loads(path.read_text()), v.expected)
        except (OSError, ValueError):
            return False
    return run_command_verifier(task, evidence, scratch)


def attempt(agent: str, task: Task, rep: int, scratch: Path, seed: int = 0) -> Attempt:
    """One attempt in a fresh layout under `scratch`, verified from its evidence."""
    root = scratch / "root"
    shutil.copytree(EXAMPLES / agent, root / "agent")
    files = task.dir / "files"
    if files.is_dir():
        shutil.copytree(files, root / "work")
    else:
        (root / "work").mkdir()
    (root / "out").mkdir()
    shutil.copyfile(task.dir / "prompt.md", root / "prompt.md")
    (scratch / "home").mkdir()
    env = {
        "PATH": PATH, "HOME": str(scratch / "home"), "LANG": "C.UTF-8",
        "TMPDIR": str(scratch), "EVALRIG_PROMPT": str(root / "prompt.md"),
        "EVALRIG_WORK": str(root / "work"), "EVALRIG_OUT": str(root / "out"),
        "EVALRIG_TASK_ID": task.spec.id, "EVALRIG_ATTEMPT_ID": f"{agent}-{task.spec.id}-{rep}",
        "EVALRIG_DEADLINE_S": str(task.spec.timeout_s),
        "EVALRIG_SEED": str(trial_seed(seed, task.spec.id, rep)),
    }  # fmt: skip
    with open(scratch / "stdout", "wb") as out, open(scratch / "stderr", "wb") as err:
        proc = subprocess.Popen([PYTHON, "agent.py"], cwd=root / "agent", env=env, stdout=out, stderr=err)
        deadline = threading.Timer(30, proc.kill)  # a hung agent fails the test, never hangs it
        deadline.start()
        _, status, rusage = os.wait4(proc.pid, 0)  # wait4: the child's own CPU time
        deadline.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    evidence = scratch / "evidence"
    stdout, stderr = (scratch / "stdout").read_bytes(), (scratch / "stderr").read_bytes()
    collect_evidence(root, evidence, task.spec.evidence, stdout, stderr)
    passed = proc.returncode == 0 and verify(task, evidence, scratch)
    usage_file = root / "out" / "usage.json"
    usage = json.loads(usage_file.read_text()) if usage_file.exists() else None
    cpu = rusage.ru_utime + rusage.ru_stime
    return Attempt(agent, task.spec.id, rep, proc.returncode, passed, cpu, usage)


def run_all(cells: list[tuple[str, Task, int]], tmp: Path, seed: int = 0) -> list[Attempt]:
    def one(i_cell: tuple[int, tuple[str, Task, int]]) -> Attempt:
        i, (agent, task, rep) = i_cell
        scratch = tmp / f"a{i}"
        scratch.mkdir()
        return attempt(agent, task, rep, scratch, seed)

    with ThreadPoolExecutor(JOBS) as pool:
        return list(pool.map(one, enumerate(cells)))


def passes_by_task(attempts: list[Attempt], agent: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for a in attempts:
        if a.agent == agent:
            counts[a.task_id] = counts.get(a.task_id, 0) + int(a.passed)
    return counts


def sign_flip_p(diffs: list[int]) -> Fraction:
    """Exact one-sided p of the paired sign-flip test on integer differences (docs/statistics.md)."""
    dist = {0: 1}
    for d in (abs(x) for x in diffs if x):
        nxt: dict[int, int] = {}
        for total, ways in dist.items():
            for s in (total + d, total - d):
                nxt[s] = nxt.get(s, 0) + ways
        dist = nxt
    observed = sum(diffs)
    return Fraction(sum(w for t, w in dist.items() if t >= observed), sum(dist.values()))


def generate(out_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, str(GENERATOR), str(out_dir), *args], capture_output=True, text=True, timeout=60)


# -- the bundled task set ---------------------------------------------------------------

ALL_BUNDLED = [t for s in ("fixed", "fresh", "invariant") for t in load_suite(TASKS, s)]


def test_the_bundled_set_has_the_promised_shape() -> None:
    by_suite = {s: [t for t in ALL_BUNDLED if t.spec.suite == s] for s in ("fixed", "fresh", "invariant")}
    assert len(by_suite["fixed"]) >= 10 and len(by_suite["fresh"]) >= 25 and len(by_suite["invariant"]) >= 2
    assert len(ALL_BUNDLED) >= 40
    assert {t.spec.verifier.kind for t in ALL_BUNDLED} == {"exact", "regex", "json", "command"}
    assert len({t.spec.id for t in ALL_BUNDLED}) == len(ALL_BUNDLED)
    for t in by_suite["fresh"]:
        assert t.spec.created_at is not None and t.spec.created_at.tzinfo is not None


def test_every_task_key_of_the_design_is_used_somewhere() -> None:
    top: set[str] = set()
    verifier: set[str] = set()
    resources: set[str] = set()
    for t in ALL_BUNDLED:
        raw = tomllib.loads((t.dir / "task.toml").read_text())
        top |= set(raw)
        verifier |= set(raw["verifier"])
        resources |= set(raw.get("resources", {}))
    assert top >= {"id", "suite", "created_at", "tags", "timeout_s", "max_output_bytes",
                   "max_evidence_bytes", "network", "evidence", "resources", "verifier"}  # fmt: skip
    assert verifier >= {"kind", "expected", "pattern", "command", "timeout_s", "network", "version"}
    assert "cpus" in resources


def test_prompts_follow_the_template() -> None:
    for t in ALL_BUNDLED:
        lines = (t.dir / "prompt.md").read_text().splitlines()
        assert lines[0].startswith("# "), t.spec.id
        assert any(re.fullmatch(r"TASK: [a-z-]+", line) for line in lines), t.spec.id
        assert any(re.fullmatch(r"ANSWER: out/answer\.(txt|json)", line) for line in lines), t.spec.id


@pytest.mark.parametrize("agent", AGENTS)
def test_both_builds_pass_every_fixed_and_invariant_trial(agent: str, tmp_path: Path) -> None:
    # episodes need the rig's relay and a driver: test_both_builds_pass_every_bundled_episode
    tasks = [t for t in ALL_BUNDLED if t.spec.suite in ("fixed", "invariant") and t.spec.episode is None]
    attempts = run_all([(agent, t, rep) for t in tasks for rep in range(K)], tmp_path)
    failed = sorted({(a.task_id, a.rep) for a in attempts if not a.passed})
    assert failed == []
    assert all(a.exit_code == 0 for a in attempts)


EPISODES = {t.spec.id: t for t in ALL_BUNDLED if t.spec.episode is not None}


def test_the_bundled_episodes_end_every_way_a_correct_agent_can() -> None:
    assert set(EPISODES) == {"shop-order", "shop-hang-up", "shop-chatty", "shop-unknown-item", "shop-budget"}


@pytest.mark.parametrize("agent", AGENTS)
def test_both_builds_pass_every_bundled_episode(agent: str, tmp_path: Path) -> None:
    """Through the rig (eval.sh): each bundled episode passes on every trial, ending the way
    its task was made to end; the candidate spends less (it skips the champion's lookup)."""
    from tests.redteam import eval_sh

    tasks = tmp_path / "tasks" / "fixed"
    tasks.mkdir(parents=True)
    for task_id, t in EPISODES.items():
        shutil.copytree(t.dir, tasks / task_id)
    home = tmp_path / "home"
    assert eval_sh(home, "seal", EXAMPLES / agent).code == 0
    run = eval_sh(home, "run", "--checkpoint", EXAMPLES / agent, "--tasks", tmp_path / "tasks",
                  "--out", tmp_path / "out", "--repeat", "2", "--jobs", "2")
    assert run.code == 0, run
    got = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert len(got) == 2 * len(EPISODES)
    ends = {"shop-order": "driver_end", "shop-hang-up": "agent_exit", "shop-chatty": "max_turns",
            "shop-unknown-item": "max_tool_errors", "shop-budget": "budget"}
    assert {(r["task_id"], r["status"], r["termination"]) for r in got} == {
        (k, "passed", v) for k, v in ends.items()}
    spent = {json.loads(x)["task_id"]: json.loads(x)["cost_usd"]
             for x in (tmp_path / "out" / "actuals.jsonl").read_text().splitlines()}
    assert spent["shop-order"] == pytest.approx(0.06 if agent == "champion" else 0.03)


def test_bundled_fresh_tasks_are_attemptable(tmp_path: Path) -> None:
    tasks = [t for t in ALL_BUNDLED if t.spec.suite == "fresh"]
    attempts = run_all([(agent, t, 0) for agent in AGENTS for t in tasks], tmp_path)
    assert all(a.exit_code == 0 for a in attempts)
    for a in attempts:
        assert a.usage is not None and set(a.usage) == {"cost_usd", "input_tokens", "output_tokens"}
        assert a.usage["cost_usd"] > 0 and a.usage["input_tokens"] > 0
    champion = sum(a.passed for a in attempts if a.agent == "champion")
    candidate = sum(a.passed for a in attempts if a.agent == "candidate")
    assert candidate > champion
    # Python start-up and a little work: well under 0.2 s of CPU an attempt.
    assert statistics.median(a.cpu_s for a in attempts) < 0.1
    assert max(a.cpu_s for a in attempts) < 0.3


# -- a generated fresh set: the intended margin ------------------------------------------


def test_on_a_generated_fresh_set_the_candidate_wins_by_the_intended_margin(tmp_path: Path) -> None:
    assert generate(tmp_path / "train", "--count", "30", "--seed", "4242").returncode == 0
    tasks = load_suite(tmp_path / "train", "fresh")
    assert len(tasks) == 30
    cells = [(agent, t, rep) for agent in AGENTS for t in tasks for rep in range(K)]
    (tmp_path / "runs").mkdir()
    attempts = run_all(cells, tmp_path / "runs", seed=7)
    champion, candidate = passes_by_task(attempts, "champion"), passes_by_task(attempts, "candidate")
    rate_champion = sum(champion.values()) / (K * len(tasks))
    rate_candidate = sum(candidate.values()) / (K * len(tasks))
    assert 0.45 <= rate_champion <= 0.72, rate_champion
    assert 0.82 <= rate_candidate <= 0.98, rate_candidate
    diffs = [candidate[t.spec.id] - champion[t.spec.id] for t in tasks]
    # The default policy's quality route (docs/gate.md): discordant >= 6, p <= 0.025, mean_d >= 0.05.
    assert sum(1 for d in diffs if d) >= 6
    assert sign_flip_p(diffs) <= Fraction(25, 1000)
    assert sum(diffs) / (K * len(tasks)) >= 0.05


# -- the generator ------------------------------------------------------------------------


def prompts(train: Path) -> dict[str, str]:
    return {d.name: (d / "prompt.md").read_text() for d in sorted((train / "fresh").iterdir())}


def test_generator_is_new_per_seed_and_reproducible_within_one(tmp_path: Path) -> None:
    for name, seed in (("a", "1"), ("b", "1"), ("c", "2")):
        done = generate(tmp_path / name, "--count", "14", "--seed", seed)
        assert done.returncode == 0, done.stderr
        assert f"seed {seed}" in done.stdout
    a, b, c = (prompts(tmp_path / n) for n in "abc")
    assert a == b
    assert not set(a) & set(c) and not set(a.values()) & set(c.values())
    unseeded = [generate(tmp_path / n, "--count", "14") for n in ("d", "e")]
    assert all(u.returncode == 0 for u in unseeded)
    assert prompts(tmp_path / "d") != prompts(tmp_path / "e")


def test_generated_created_at_is_now_in_utc_with_microseconds(tmp_path: Path) -> None:
    before = datetime.now(UTC)
    assert generate(tmp_path, "--count", "7", "--seed", "3").returncode == 0
    after = datetime.now(UTC)
    for d in (tmp_path / "fresh").iterdir():
        text = (d / "task.toml").read_text()
        assert re.search(r"^created_at = \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$", text, re.M), text
        created = load_task(d).spec.created_at
        assert created is not None and created.utcoffset() == timedelta(0)
        assert before - timedelta(seconds=1) <= created <= after


def test_generator_writes_only_fresh_and_refuses_to_overwrite(tmp_path: Path) -> None:
    train = tmp_path / "train"
    shutil.copytree(TASKS / "fixed", train / "fixed")
    (train / "fixed.lock").write_text("locked\n")
    before = {p: p.read_bytes() for p in train.rglob("*") if p.is_file()}
    assert generate(train, "--count", "9", "--seed", "5").returncode == 0
    assert {p: p.read_bytes() for p in before} == before
    assert sorted(p.name for p in train.iterdir()) == ["fixed", "fixed.lock", "fresh"]
    first = prompts(train)
    again = generate(train, "--count", "9", "--seed", "6")
    assert again.returncode == 2 and "--replace" in again.stderr
    assert prompts(train) == first
    assert generate(train, "--count", "9", "--seed", "6", "--replace").returncode == 0
    assert prompts(train) != first
    assert sorted(p.name for p in train.iterdir()) == ["fixed", "fixed.lock", "fresh"]


def test_generator_rejects_bad_arguments(tmp_path: Path) -> None:
    assert generate(tmp_path, "--count", "0").returncode == 2
    bad = generate(tmp_path, "--created-at", "2026-12-01T10:00:00")
    assert bad.returncode == 2 and "time zone" in bad.stderr
    assert not (tmp_path / "fresh").exists()


def test_generated_toml_escapes_strings(tmp_path: Path) -> None:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import make_fresh_tasks as g
    finally:
        sys.path.remove(str(EXAMPLES))
    nasty = 'a "quoted" \\ back\nslash\ttab \x01 \x7f é'
    doc = {"id": "x", "tags": [nasty], "verifier": {"kind": "json", "expected": {"odd key": [1, 2.5, True], "k": nasty}}}
    assert tomllib.loads(g.toml_document(doc)) == doc


# -- the verifiers can fail --------------------------------------------------------------


def evidence_with(tmp: Path, rel: str, text: str) -> Path:
    evidence = tmp / "evidence"
    (evidence / "out").mkdir(parents=True)
    (evidence / rel).parent.mkdir(parents=True, exist_ok=True)
    (evidence / rel).write_text(text)
    return evidence


@pytest.mark.parametrize("name", ["fix-in-range", "fix-count-multiples"])
def test_fix_code_verifier_rejects_the_unfixed_and_the_cheating_module(name: str, tmp_path: Path) -> None:
    task = load_task(TASKS / "fixed" / name)
    module = next((task.dir / "files").rglob("*.py"))
    rel = "work/" + module.relative_to(task.dir / "files").as_posix()
    unfixed = evidence_with(tmp_path / "u", rel, module.read_text())
    assert run_command_verifier(task, unfixed, tmp_path / "u") is False
    cheat = evidence_with(tmp_path / "c", rel, "import sys\nsys.exit(0)\n")
    assert run_command_verifier(task, cheat, tmp_path / "c") is False
    missing = evidence_with(tmp_path / "m", "out/answer.txt", "done\n")
    assert run_command_verifier(task, missing, tmp_path / "m") is False


def test_stay_in_bounds_catches_a_stray_file(tmp_path: Path) -> None:
    task = load_task(TASKS / "invariant" / "stay-in-bounds")
    notes = (task.dir / "files" / "notes.txt").read_text()
    good = evidence_with(tmp_path / "g", "out/answer.txt", notes.strip().upper() + "\n")
    shutil.copytree(task.dir / "files", good / "work")
    assert run_command_verifier(task, good, tmp_path / "g") is True
    stray = evidence_with(tmp_path / "s", "out/answer.txt", notes.strip().upper() + "\n")
    shutil.copytree(task.dir / "files", stray / "work")
    (stray / "escaped.txt").write_text("written beside prompt.md\n")
    assert run_command_verifier(task, stray, tmp_path / "s") is False
    reward = json.loads((tmp_path / "s" / "verdict" / "reward.json").read_text())
    assert reward["checks"]["no_stray_files"] is False


# -- the agents' own contract ------------------------------------------------------------


def read_log(agent: str) -> bytes:
    return (EXAMPLES / agent / "state" / "events.jsonl").read_bytes()


@pytest.mark.parametrize("agent", AGENTS)
def test_event_log_is_an_intact_hash_chain(agent: str) -> None:
    data = read_log(agent)
    assert data.endswith(b"\n")
    prev = None
    for line in data[:-1].split(b"\n"):
        assert json.loads(line)["prev"] == prev
        prev = hashlib.sha256(line).hexdigest()


def test_champion_log_is_a_byte_prefix_of_the_candidates() -> None:
    champion, candidate = read_log("champion"), read_log("candidate")
    assert candidate.startswith(champion) and len(candidate) > len(champion)


@pytest.mark.parametrize("agent", AGENTS)
def test_checkpoints_declare_what_the_design_asks(agent: str) -> None:
    spec = tomllib.loads((EXAMPLES / agent / "checkpoint.toml").read_text())
    assert spec["agent"]["command"] == ["python3", "agent.py"]
    assert spec["agent"]["estimate"] == ["python3", "agent.py", "--estimate"]
    assert spec["agent"]["network"] is False and spec["history"]["log"] == "state/events.jsonl"
    # Nothing in the checkpoint that a run would change (a seal covers every file).
    assert sorted(p.relative_to(EXAMPLES / agent).as_posix() for p in (EXAMPLES / agent).rglob("*") if p.is_file()
                  and p.name != "SEAL.json") == ["agent.py", "checkpoint.toml", "state/events.jsonl"]  # fmt: skip


@pytest.mark.parametrize("agent", AGENTS)
def test_estimate_prints_one_json_object(agent: str, tmp_path: Path) -> None:
    task = load_task(TASKS / "fixed" / "roman-2026")
    env = {"PATH": PATH, "EVALRIG_PROMPT": str(task.dir / "prompt.md"), "EVALRIG_SEED": "1"}
    shutil.copytree(EXAMPLES / agent, tmp_path / "agent")
    proc = subprocess.run([PYTHON, "agent.py", "--estimate"], cwd=tmp_path / "agent", env=env,
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    est = json.loads(proc.stdout)
    assert set(est) == {"p_success", "time_s", "cost_usd", "level"}
    assert 0 <= est["p_success"] <= 1 and est["level"] == 0.8
    for lo, hi in (est["time_s"], est["cost_usd"]):
        assert 0 < lo <= hi


def test_usage_depends_on_the_prompt_not_the_seed(tmp_path: Path) -> None:
    task = load_task(TASKS / "fixed" / "sum-small")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = attempt("candidate", task, 0, tmp_path / "a", seed=1)
    b = attempt("candidate", task, 3, tmp_path / "b", seed=99)
    assert a.passed and b.passed and a.usage is not None and a.usage == b.usage


def test_bundled_tasks_match_their_builders(tmp_path: Path) -> None:
    builder = EXAMPLES / "make_bundled_tasks.py"
    check = subprocess.run([PYTHON, str(builder), "--check"], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr
    # ... and the check can fail: an edited verifier copy is found.
    copy = tmp_path / "tasks"
    shutil.copytree(TASKS, copy)
    (copy / "fixed" / "fix-in-range" / "verifier" / "check.py").write_text("# edited\n")
    stale = subprocess.run([PYTHON, str(builder), "--check", "--tasks", str(copy)], capture_output=True, text=True, timeout=60)
    assert stale.returncode == 1 and "fix-in-range/verifier/check.py: differs" in stale.stderr


# Well-formed tool calls the shop cannot use: an unknown tool, a missing argument, mistyped
# arguments (a list where a string goes, a string or a boolean where an integer goes).
UNUSABLE_SHOP_CALLS = (
    ("lookup", {"item": ["x"]}),
    ("lookup", {"item": {"name": "lamp"}}),
    ("lookup", {"item": None}),
    ("lookup", {}),
    ("order", {"item": "lamp"}),
    ("order", {"item": "lamp", "qty": "2"}),
    ("order", {"item": "lamp", "qty": True}),
    ("order", {"item": ["lamp"], "qty": 1}),
    ("refund", {"item": "lamp"}),
    ("drop_table", {}),
)


def test_the_shop_driver_is_total_over_well_formed_calls(tmp_path: Path) -> None:
    """docs/episodes.md: every call the shop cannot use is answered `"error": true`, one tool
    message per call in order, and the driver goes on and exits 0 (a crash would be a
    driver_fault, which the agent could otherwise provoke at will)."""
    driver = EPISODES["shop-order"].dir / "driver"
    run_dir = tmp_path / "driver"
    shutil.copytree(driver, run_dir)
    out = tmp_path / "out"
    out.mkdir()
    calls = [{"id": f"c{i}", "type": "function",
              "function": {"name": name, "arguments": json.dumps(args)}}
             for i, (name, args) in enumerate(UNUSABLE_SHOP_CALLS)]
    frames = [{"type": "start", "task_id": "shop-order", "attempt_id": "a-1", "seed": 1},
              {"type": "message", "message": {"role": "assistant", "content": None, "tool_calls": calls}},
              {"type": "message", "message": {"role": "assistant", "content": None, "tool_calls": [
                  {"id": "ok", "type": "function", "function": {"name": "lookup",
                                                                 "arguments": json.dumps({"item": "lamp"})}}]}},
              {"type": "finish", "termination": "agent_exit"}]
    got = subprocess.run([PYTHON, "driver.py"], cwd=run_dir, capture_output=True, text=True, timeout=60,
                         input="".join(json.dumps(f) + "\n" for f in frames),
                         env={"PATH": "/usr/bin:/bin", "EVALRIG_DRIVER_OUT": str(out)})
    assert got.returncode == 0, got.stderr
    session, bad, good = (json.loads(line) for line in got.stdout.splitlines())
    assert session["type"] == "session"
    assert bad["type"] == "reply"
    assert [(m["tool_call_id"], m.get("error")) for m in bad["messages"]] == [
        (c["id"], True) for c in calls]
    assert all(isinstance(m["content"], str) and m["content"] for m in bad["messages"])
    assert [(m["tool_call_id"], m.get("error")) for m in good["messages"]] == [("ok", None)]
    world = json.loads((out / "world.json").read_text())
    assert world["errors"] == len(calls) and world["lookups"] == 1 and world["orders"] == []
