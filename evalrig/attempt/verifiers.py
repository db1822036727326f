"""The verifiers: judging an attempt from its stored evidence, on the rig's side (docs/tasks.md, "Verifiers").

`exact`, `regex` and `json` are pure functions of the answer text and the task's settings.
`command` runs the task's `verifier.command` from the task's `verifier/` folder in its
own sandbox, with `EVALRIG_EVIDENCE` (the stored evidence, read-only) and
`EVALRIG_VERDICT` (an empty directory of the rig's). A verifier fault (an exit other
than 0/1, a crash, a time-out, a malformed `reward.json`) is re-run on the same evidence
up to `retries` times; the agent is never run again.

Everything here reads the *stored* evidence, never a live workspace, so `evalrig verify`
gets the same verdict later from the same files.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, time
from pathlib import Path
from typing import Any, Literal

import orjson

from evalrig.attempt.streams import Redactor
from evalrig.attempt.untrusted import AgentSide
from evalrig.core.digest import pretty_json
from evalrig.core.environment import granted, verifier_env
from evalrig.models.agent import RewardFile
from evalrig.models.inputs import (
    CommandVerifier,
    ExactVerifier,
    JsonVerifier,
    RegexVerifier,
)
from evalrig.store.files import read_answer
from evalrig.store.layout import ANSWER_JSON, ANSWER_TXT, UNTRUSTED_JSONL, VERIFIER_DIR

Outcome = Literal["passed", "failed", "fault"]

# A command verifier's stdout/stderr kept per run (a chatty judge must not fill the bundle).
VERIFIER_OUTPUT_CAP = 1 << 20
_REWARD_KEYS = frozenset({"reward", "checks", "passed"})


@dataclass(frozen=True)
class JudgeModels:
    """A command verifier's way to the model gateway (`[verifier] models = true`, role judge;
    docs/gateway.md): the launch's grant (`sandbox.GatewayGrant`) and a maker of the
    gateway's variables (a fresh token per run of the verifier)."""

    grant: Any
    env: Callable[[], dict[str, str]]


@dataclass(frozen=True)
class Verdict:
    """What a verifier decided. `fault` is the verifier's failure, never the agent's."""

    outcome: Outcome
    reward: float | None = None
    checks: dict[str, bool] = field(default_factory=dict)
    usage: dict[str, Any] | None = None
    runs: int = 0
    error: str | None = None
    # Calls the verifier made to the untrusted-run service (evalrig.attempt.untrusted). A
    # fault after any is final: verifying again would give the agent's code a fresh draw.
    untrusted_calls: int = 0

    @property
    def passed(self) -> bool | None:
        return None if self.outcome == "fault" else self.outcome == "passed"


def _decided(ok: bool, error: str | None = None) -> Verdict:
    return Verdict("passed" if ok else "failed", 1.0 if ok else 0.0, {}, None, 0, error)


# -- pure checks -------------------------------------------------------------------------


def check_exact(answer: str | None, expected: str) -> Verdict:
    """The trimmed answer equals the (trimmed) expected string. No answer: failed."""
    if answer is None:
        return _decided(False, f"no {ANSWER_TXT}")
    return _decided(answer.strip() == expected.strip())


def check_regex(answer: str | None, pattern: str) -> Verdict:
    """The pattern matches the whole trimmed answer."""
    import re

    if answer is None:
        return _decided(False, f"no {ANSWER_TXT}")
    return _decided(re.fullmatch(pattern, answer.strip()) is not None)


def _toml_to_json(value: Any) -> Any:
    """TOML dates and times have no JSON form; they compare as their ISO-8601 strings."""
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _toml_to_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_toml_to_json(v) for v in value]
    return value


def json_equal(a: Any, b: Any) -> bool:
    """Deep equality of JSON values: numbers by value (1 == 1.0), booleans apart from numbers.

    Python's `==` says True == 1 and {1: ...} keys mix, so every type is checked here.
    """
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        # int/float comparison in Python is exact (no rounding of large ints); NaN never equals
        return a == b and not (isinstance(a, float) and math.isnan(a))
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return False


def check_json(answer: bytes | None, expected: Any) -> Verdict:
    """The answer parses as JSON and equals `expected` (json_equal)."""
    if answer is None:
        return _decided(False, f"no {ANSWER_JSON}")
    try:
        value = orjson.loads(answer)
    except orjson.JSONDecodeError as e:
        return _decided(False, f"{ANSWER_JSON} is not JSON ({e})")
    return _decided(json_equal(value, _toml_to_json(expected)))


# -- reading the stored answer -----------------------------------------------------------


def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("utf-8", errors="replace")


def verify_builtin(spec: ExactVerifier | RegexVerifier | JsonVerifier, evidence_dir: Path,
                   episode: bool = False) -> Verdict:
    """An episode's answer is the content of the agent's last assistant message in its
    transcript (docs/episodes.md, "What verifiers see"), not a file in out/."""
    if episode:
        from evalrig.attempt.episode import last_answer

        text = last_answer(evidence_dir)
        data = None if text is None else text.encode()
    if isinstance(spec, ExactVerifier):
        v = check_exact(text if episode else _text(read_answer(evidence_dir, ANSWER_TXT)), spec.expected)
    elif isinstance(spec, RegexVerifier):
        v = check_regex(text if episode else _text(read_answer(evidence_dir, ANSWER_TXT)), spec.pattern)
    else:
        v = check_json(data if episode else read_answer(evidence_dir, ANSWER_JSON), spec.expected)
    return Verdict(v.outcome, v.reward, v.checks, None, 1, v.error)


# -- reward.json -------------------------------------------------------------------------


def is_finite_number(v: Any) -> bool:
    """A JSON number an agent or verifier reported: int or float, finite, not a bool."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def parse_reward(data: bytes) -> Verdict:
    """`{"reward": 0..1, "checks": {name: bool}, "passed": bool}` → a verdict, or a fault.

    passed = the explicit "passed" when given, else reward == 1 and every check holds.
    Without "reward", an explicit "passed" gives reward 1 or 0.
    """
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        return Verdict("fault", error=f"reward.json is not JSON ({e})")
    if not isinstance(doc, dict):
        return Verdict("fault", error="reward.json: expected a JSON object")
    unknown = sorted(set(doc) - _REWARD_KEYS)
    if unknown:
        return Verdict("fault", error=f"reward.json: unknown key {unknown[0]!r} (allowed: checks, passed, reward)")
    reward = doc.get("reward")
    if reward is not None and not (is_finite_number(reward) and 0 <= reward <= 1):
        return Verdict("fault", error=f"reward.json: reward: expected a number in [0, 1], got {reward!r}")
    checks = doc.get("checks", {})
    if not isinstance(checks, dict) or not all(isinstance(v, bool) for v in checks.values()):
        return Verdict("fault", error="reward.json: checks: expected an object of name → true/false")
    explicit = doc.get("passed")
    if explicit is not None and not isinstance(explicit, bool):
        return Verdict("fault", error=f"reward.json: passed: expected true or false, got {explicit!r}")
    if reward is None and explicit is None:
        return Verdict("fault", error="reward.json: needs \"reward\" or \"passed\"")
    got = RewardFile.model_validate(doc)
    ok = got.reward == 1 and all(got.checks.values()) if got.passed is None else got.passed
    reward = got.reward if got.reward is not None else (1.0 if ok else 0.0)
    return Verdict("passed" if ok else "failed", reward, dict(got.checks))


def _redacted(data: bytes, values: Mapping[str, bytes]) -> bytes:
    r = Redactor(values)
    return r.feed(data) + r.flush()


def _read_usage(path: Path, values: Mapping[str, bytes]) -> dict[str, Any] | None:
    """The verifier's own spend, its secrets' values redacted (it reaches results.jsonl);
    anything but a JSON object is ignored."""
    data = read_answer(path.parent, path.name)
    if data is None:
        return None
    data = _redacted(data, values)
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


# -- the command verifier ----------------------------------------------------------------


@dataclass(frozen=True)
class CommandOutcome:
    """The last run's verdict and every run's directory (stdout.txt, stderr.txt, verdict/)."""

    verdict: Verdict
    run_dirs: list[Path]


def _private_copy(evidence_dir: Path, dst: Path) -> Path:
    """Without a mount namespace nothing makes the stored evidence read-only (the rig may
    run as root): the verifier gets its own copy, so no write of its reaches the bundle."""
    shutil.copytree(evidence_dir, dst, symlinks=True)
    return dst


def _judge_uid_apart() -> bool:
    """Under process, whether the verifier runs as a uid of the judges' pool (the rig is
    root); else it would keep the rig's own uid (docs/security.md)."""
    return os.geteuid() == 0


def _run_command_once(
    spec: CommandVerifier, verifier_dir: Path, evidence_dir: Path, run_dir: Path,
    level: str, slot: int, cancel: threading.Event | None, secrets: Mapping[str, str],
    side: AgentSide | None = None, log: Path | None = None, models: JudgeModels | None = None,
) -> tuple[Verdict, int]:
    """One run of the verifier; (its verdict, the untrusted calls it made)."""
    from evalrig.attempt import sandbox, untrusted

    # The verifier starts in verifier/, so a relative --out or --tasks would point nowhere.
    verifier_dir, evidence_dir, run_dir = (p.absolute() for p in (verifier_dir, evidence_dir, run_dir))
    tag = f"verifier-{run_dir.parent.name}-{run_dir.name}"
    verdict_dir = run_dir / "verdict"
    home = run_dir / "home"
    for d in (verdict_dir, home):
        d.mkdir(parents=True)
    tmp = "/tmp"
    rw = [verdict_dir, home]
    judge = level != "bwrap" and _judge_uid_apart()
    if level != "bwrap":
        (run_dir / "tmp").mkdir()
        tmp = str(run_dir / "tmp")
        rw.append(run_dir / "tmp")
        evidence_dir = _private_copy(evidence_dir, run_dir / "evidence")
        if judge:
            # As a uid of the judges' pool: its own copy of verifier/, in a folder only that
            # uid can open (the launch chowns it and makes it 0700), and the evidence copy too.
            shutil.copytree(verifier_dir, run_dir / "files" / "verifier", symlinks=True)
            verifier_dir = run_dir / "files" / "verifier"
            rw = [run_dir]
    service = None
    if side is not None and log is not None:
        # the calls' sandboxes beside run_dir: the agent's uid cannot enter the judge's folder
        try:
            service = untrusted.start(side, run_dir / "svc", run_dir.parent / f"calls-{run_dir.name}", log,
                                      int(run_dir.name.split("-")[-1]))
        except OSError as e:
            return Verdict("fault", error=f"the untrusted-run service could not start: {e}"), 0
        if rw != [run_dir]:
            rw.append(service.folder)
    # the tag: where no PID namespace can be made, the launcher kills every leftover
    # process carrying it (unique per run: scratch is a fresh mkdtemp)
    given = granted(spec.secrets, secrets)
    redact = {name: value.encode() for name, value in given.items() if value}
    # [verifier] models = true: the gateway as role judge; never with the host's network,
    # where a listener of its own could not be bound (docs/gateway.md)
    models = models if models is not None and not spec.network else None
    env = verifier_env(home=str(home), tmpdir=tmp, evidence=str(evidence_dir),
                       verdict=str(verdict_dir), tag=tag, secrets=given,
                       gateway=models.env() if models is not None else None)
    if service is not None:
        env[untrusted.RUN_UNTRUSTED_ENV] = str(service.client)
    ro = [verifier_dir, evidence_dir, *sandbox.interpreter_binds(spec.command[0])]
    try:
        fin = _launch_verifier(sandbox, spec, verifier_dir, env, level, rw, ro, run_dir, slot, tag,
                               cancel, redact, judge, service, models.grant if models is not None else None)
    finally:
        if service is not None:
            service.close()
    calls = service.calls if service is not None else 0
    if service is not None and service.rig_errors:
        return Verdict("fault", error="the untrusted-run service could not run a call "
                       f"(exit 125; {UNTRUSTED_JSONL} says why)"), calls
    return _read_verdict(spec, fin, verdict_dir, redact), calls


def _launch_verifier(sandbox: Any, spec: CommandVerifier, verifier_dir: Path, env: dict[str, str],
                     level: str, rw: list[Path], ro: list[Path], run_dir: Path, slot: int, tag: str,
                     cancel: threading.Event | None, redact: dict[str, bytes], judge: bool,
                     service: Any, gateway: Any = None) -> Any:
    return sandbox.launch(
        sandbox.Launch(
            argv=list(spec.command),
            cwd=verifier_dir,
            env=env,
            level=level,  # type: ignore[arg-type]
            rw_paths=rw,
            ro_paths=ro,
            network=spec.network,
            timeout_s=spec.timeout_s,
            max_output_bytes=VERIFIER_OUTPUT_CAP,
            stdout_path=run_dir / "stdout.txt",
            stderr_path=run_dir / "stderr.txt",
            slot=slot,
            pool="judges",  # a uid of the judges' pool under bwrap as root, never an agent's
            attempt_tag=tag,
            cancel=cancel,
            redact=redact,
            unprivileged=judge,  # process as root: the judges' pool, never root (docs/security.md)
            paused=service.paused_s if service is not None else None,
            gateway=gateway,
        )
    )


def _read_verdict(spec: CommandVerifier, fin: Any, verdict_dir: Path, redact: dict[str, bytes]) -> Verdict:
    if fin.error:
        return Verdict("fault", error=f"verifier could not start: {fin.error}")
    if fin.interrupted:
        return Verdict("fault", error="verifier interrupted")
    if fin.timed_out:
        return Verdict("fault", error=f"verifier ran past its limit of {spec.timeout_s:g} s")
    if fin.signal is not None or fin.exit_code is None:
        return Verdict("fault", error=f"verifier crashed (signal {fin.signal})")
    if fin.exit_code not in (0, 1):
        return Verdict("fault", error=f"verifier exited {fin.exit_code} (0 pass, 1 fail, anything else is a fault)")
    usage = _read_usage(verdict_dir / "usage.json", redact)
    reward = read_answer(verdict_dir, "reward.json")
    if reward is None:
        v = _decided(fin.exit_code == 0)
        return Verdict(v.outcome, v.reward, {}, usage)
    v = parse_reward(reward)
    return Verdict(v.outcome, v.reward, v.checks, usage, 0, v.error)


def verify_command(
    spec: CommandVerifier, verifier_dir: Path | None, evidence_dir: Path, level: str, slot: int,
    retries: int, scratch: Path, cancel: threading.Event | None = None,
    secrets: Mapping[str, str] | None = None, side: AgentSide | None = None,
    models: JudgeModels | None = None,
) -> CommandOutcome:
    """Run the command verifier, re-running it on a fault up to `retries` times, but never
    after a faulted run that made untrusted calls (`side`: the service is offered; its
    record is scratch/untrusted.jsonl)."""
    if verifier_dir is None or not verifier_dir.is_dir():
        return CommandOutcome(
            Verdict("fault", runs=0, error="the task has no verifier/ folder to run the command in"), [])
    runs: list[Path] = []
    verdict = Verdict("fault", error="verifier never ran")
    calls = 0
    log = scratch / UNTRUSTED_JSONL if side is not None else None
    for n in range(1, retries + 2):
        run_dir = scratch / f"run-{n}"
        runs.append(run_dir)
        verdict, made = _run_command_once(spec, verifier_dir, evidence_dir, run_dir, level, slot, cancel,
                                          secrets or {}, side, log, models)
        calls += made
        if verdict.outcome != "fault" or (cancel is not None and cancel.is_set()) or made:
            break  # after an untrusted call a fault is final: another run is another draw
    error = verdict.error
    if verdict.outcome == "fault" and calls:
        error = f"{error} (after {calls} untrusted call(s): final, never verified again)"
    return CommandOutcome(
        Verdict(verdict.outcome, verdict.reward, verdict.checks, verdict.usage, len(runs), error, calls),
        runs)


# -- storing the verifier's output ---------------------------------------------------------


def store_output(verdict: Verdict, runs: list[Path], output_dir: Path,
                 secrets: Mapping[str, str] | None = None, log: Path | None = None) -> None:
    """evidence/verifier/: verdict.json and, per command run, stdout.txt, stderr.txt,
    reward.json and usage.json (what the verifier wrote), under run-<n>/. The files the
    verifier wrote itself have the --driver-secret values redacted (its streams already are)."""
    output_dir.mkdir(parents=True, exist_ok=True)
    values = {name: value.encode() for name, value in (secrets or {}).items() if value}

    for run_dir in runs:
        dst = output_dir / run_dir.name
        dst.mkdir(exist_ok=True)
        for name in ("stdout.txt", "stderr.txt"):
            if (run_dir / name).is_file():
                shutil.copyfile(run_dir / name, dst / name)
        for name in ("reward.json", "usage.json"):
            data = read_answer(run_dir / "verdict", name)
            if data is not None:
                (dst / name).write_bytes(_redacted(data[:VERIFIER_OUTPUT_CAP], values))
    summary = {
        "outcome": verdict.outcome,
        "reward": verdict.reward,
        "checks": verdict.checks,
        "usage": verdict.usage,
        "runs": verdict.runs,
        "error": verdict.error,
        "untrusted_calls": verdict.untrusted_calls,
    }
    if log is not None and log.is_file():  # written by the rig's service, redacted there
        shutil.copyfile(log, output_dir / UNTRUSTED_JSONL)
    (output_dir / "verdict.json").write_bytes(_redacted(pretty_json(summary), values))


def _judged_view(evidence_dir: Path, scratch: Path) -> Path:
    """The evidence without the rig's verifier/ output, as the verifier first saw it.

    A re-derivation (`evalrig verify`) must show the verifier the same files it judged,
    and an earlier verdict is not one of them; a copy without verifier/ is made then.
    """
    if not (evidence_dir / VERIFIER_DIR).exists():
        return evidence_dir
    view = scratch / "evidence"
    shutil.copytree(evidence_dir, view, symlinks=True, ignore=lambda d, names: (
        [VERIFIER_DIR] if Path(d) == evidence_dir else []))
    return view


def verify_evidence(
    task: Any,
    evidence_dir: Path,
    level: str,
    slot: int,
    retries: int,
    scratch_root: Path,
    output_dir: Path | None = None,
    cancel: threading.Event | None = None,
    secrets: Mapping[str, str] | None = None,
    timeout_scale: float = 1.0,
    models: JudgeModels | None = None,
) -> Verdict:
    """Judge the stored evidence of one attempt with the task's verifier.

    `task` is a LoadedTask. `output_dir`, when given, receives a command verifier's output
    (run_attempt passes evidence_dir/verifier); `evalrig verify` leaves it None so that
    re-deriving changes nothing in the bundle. Built-in kinds store nothing. `secrets`:
    the run's --driver-secret values; a command verifier gets those its task lists.
    """
    spec = task.spec.verifier
    if not isinstance(spec, CommandVerifier):
        # nothing to store: the verdict is the result's, and re-deriving it is instant
        return verify_builtin(spec, evidence_dir, getattr(task.spec, "episode", None) is not None)
    scratch_root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="verify-", dir=scratch_root))
    try:
        view = _judged_view(evidence_dir, scratch)
        side = None
        if spec.untrusted:  # the agent's code runs only as the agent, in the agent's sandbox
            from evalrig.attempt.sandbox import disk_allowance

            resources = task.spec.resources
            side = AgentSide(level=level, slot=slot, evidence=view.absolute(),
                             timeout_s=spec.untrusted_timeout_s * timeout_scale,
                             memory_bytes=resources.memory_mb << 20,
                             max_processes=resources.max_processes,
                             disk_bytes=disk_allowance(task.spec.max_evidence_bytes),
                             redact={k: v.encode() for k, v in (secrets or {}).items() if v})
        got = verify_command(spec, task.verifier_dir, view, level, slot, retries, scratch, cancel,
                             secrets, side, models)
        if output_dir is not None:
            store_output(got.verdict, got.run_dirs, output_dir, secrets, scratch / UNTRUSTED_JSONL)
        return got.verdict
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

