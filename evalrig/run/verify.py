"""`verify`: a run bundle re-derived from its stored evidence. Every file digest checked,
every result's evidence digest and canary finding, every verdict re-judged by its
task's verifier; `verify --register` then records the bundle in the home."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from evalrig.attempt import modelcalls
from evalrig.attempt.canary import needle
from evalrig.attempt.episode import read_transcript
from evalrig.attempt.evidence import evidence_digest, rederive_canary
from evalrig.attempt.modelcalls import GatewayUse
from evalrig.attempt.sandbox import resolve_level
from evalrig.attempt.streams import SCAN_INCOMPLETE
from evalrig.attempt.verifiers import verify_evidence
from evalrig.core.episode import termination_of
from evalrig.core.errors import Problem, invalid
from evalrig.core.metering import CallMismatch, spend_mismatches
from evalrig.core.pricing import genai_prices_version, pricer
from evalrig.models.gateway import ModelCall, ReplayOf
from evalrig.models.run import Result, RunManifest
from evalrig.run.lifecycle import register_finished, scratch_dir
from evalrig.store import layout
from evalrig.store.bundle import (
    RunBundle,
    bundle_digest,
    check_run_digests,
    load_run,
    manifest_problems,
    manifest_signature_problem,
    refuse_unlike_registration,
    unfinished_state,
)
from evalrig.store.checkpoint import refuse_version_clash, register_seal
from evalrig.store.jsonl import read_records
from evalrig.store.ledger import registrations_of
from evalrig.store.lookup import run_tasks
from evalrig.store.recording import Recording, judge_calls
from evalrig.store.signing import keyring
from evalrig.store.tasks import LoadedTask


@dataclass(frozen=True)
class VerifyReport:
    results: int
    rederived: int
    files: int
    manifest: RunManifest | None = None
    """The manifest as verified (what `verify --register` records)."""


def verify_and_register(dir: Path, home: Path) -> tuple[VerifyReport, bool]:
    """`verify --register`: re-derive every result from evidence (exit 4 on any mismatch,
    nothing registered), then record the bundle in the home's `runs.jsonl` so that compare
    takes it. Idempotent: the bool says whether it was new."""
    report = verify_run(dir, home)
    m = report.manifest
    assert m is not None
    held = registrations_of(home, m.run_id)
    digest = bundle_digest(dict(m.files))
    if any(e.bundle_digest == digest for e in held):
        return report, False  # the same bundle again: nothing written (verify_run held it to its manifest)
    if held:
        raise invalid(f"this home already holds run {m.run_id} under the bundle digest {held[0].bundle_digest}, "
                      f"not {digest}: a bundle re-made under a known run id is not that run",
                      file=Path(dir) / layout.MANIFEST, field="run_id",
                      hint="compare the run bundle the home registered")
    ring = keyring(home)
    if m.key is not None and m.key == ring.home:
        raise invalid("this home signed the run's manifest, but its runs.jsonl does not hold the bundle: a "
                      "bundle this home made is registered when its run finishes, never brought in again",
                      file=Path(dir) / layout.MANIFEST, field="key",
                      hint="use the bundle as the run left it (resume the run if it stopped)")
    why = manifest_signature_problem(m, home)
    if why is not None:
        raise invalid(f"not registered: the manifest is not signed by a key this home trusts for register ({why})",
                      file=Path(dir) / layout.MANIFEST, field="sig",
                      hint=f"re-deriving proves a bundle consistent, not authentic: add the public key of the "
                      f"home that ran it (`evalrig key` there) to {Path(home) / layout.TRUSTED_KEYS} as "
                      "`PUBKEY register COMMENT`, then register again")
    # An id this home holds under the other hash version is other content (docs/checkpoint.md):
    # refused before anything of the bundle is registered.
    refuse_version_clash(home, m.checkpoint.id, m.checkpoint.hash_version or 1, Path(dir) / layout.MANIFEST)
    new = register_finished(home, m, brought_in=True)
    if new:
        register_seal(home, m.checkpoint.id, m.checkpoint.name, m.checkpoint.sealed_at,
                      m.checkpoint.hash_version or 1)
    return report, new


def verify_run(dir: Path, home: Path | None = None) -> VerifyReport:
    """Re-derive every result from stored evidence and check every digest; exit 4 on any mismatch.
    `home`: a run it registered is also held to the manifest it registered (signed, unchanged)."""
    dir = Path(dir)
    b = load_run(dir)
    if b.manifest.status == "running":  # no digests yet: nothing to verify against
        raise invalid(unfinished_state(dir), file=dir / layout.MANIFEST,
                      field="status", hint="verify the bundle once its run has finished")
    problems = list(check_run_digests(dir))
    for name, line in sorted(b.torn.items()):
        problems.append(Problem(str(dir / name), "torn last line (a crash mid-write); "
                                "resume the run to repair it", line=line))
    problems += evidence_problems(dir, b)
    problems += canary_problems(dir, b)
    problems += manifest_problems(dir, b)
    rederived, verdict_problems = rederive(dir, b)
    problems += verdict_problems
    problems += termination_problems(dir, b)
    problems += metered_problems(dir, b)
    if problems:
        raise invalid(f"{len(problems)} mismatch(es) in the run bundle", file=dir,
                      problems=problems,
                      hint="the bundle was changed after the run, or a verifier is not "
                      "deterministic; rerun into a new --out to get a trustworthy bundle")
    if home is not None:  # consistent; and, where the home registered it, the manifest it registered
        mine = [e for e in registrations_of(home, b.manifest.run_id)
                if e.bundle_digest == bundle_digest(dict(b.manifest.files))]
        if mine:
            refuse_unlike_registration(dir, b.manifest, home, mine[0].manifest_digest)
    return VerifyReport(results=len(b.results), rederived=rederived, files=len(b.manifest.files),
                        manifest=b.manifest)


def metered_problems(dir: Path, b: RunBundle) -> list[Problem]:
    """Every gateway call's cost priced again from its line's usage with the run's table as
    of its t_start, and each attempt's metered spend by role summed again from its lines:
    the candidate's and the driver's from the attempt's `model.jsonl`, the judge's from the
    verifier's (docs/gateway.md, "Evidence"). Where the installed genai-prices is not the
    one that priced the run, only the calls `[prices]` priced can be checked (the table's
    are its)."""
    facts = b.manifest.gateway
    if facts is None:
        return []
    price = pricer(facts.prices or {})
    check_table = genai_prices_version() == facts.genai_prices
    attempt_spend: dict[str, dict[str, float]] = {}
    judge_spend: dict[str, dict[str, float]] = {}
    for a in b.actuals:
        if a.spend is None:
            continue
        for role, got in (("candidate", a.spend.candidate), ("driver", a.spend.driver), ("judge", a.spend.judge)):
            if got is not None and got.source == "metered" and got.cost_usd is not None:
                into = judge_spend if role == "judge" else attempt_spend
                into.setdefault(a.attempt_id, {})[role] = got.cost_usd
    out = []
    for aid in dict.fromkeys(r.attempt_id for r in b.results):
        evidence = dir / layout.ATTEMPTS_DIR / aid
        # the judge's calls are kept beside its output (verifier/, and verifier/reverify-<n>/);
        # its spend is that of the first verification (a resume's re-verification adds calls,
        # not spend)
        judged = [evidence / layout.VERIFIER_DIR, *sorted((evidence / layout.VERIFIER_DIR).glob("reverify-*"))]
        for n, folder in enumerate(judged):
            path = folder / layout.MODEL_JSONL
            recorded = judge_spend.get(aid, {}) if n == 0 else {}
            out += _call_problems(path, aid, spend_mismatches(aid, read_records(path, ModelCall).records, facts,
                                                              price, recorded, check_table), dir)
        path = evidence / layout.MODEL_JSONL
        lines = read_records(path, ModelCall).records
        out += _call_problems(path, aid, spend_mismatches(aid, lines, facts, price, attempt_spend.get(aid, {}),
                                                          check_table), dir)
    return out


def _call_problems(path: Path, aid: str, found: list[CallMismatch], dir: Path) -> list[Problem]:
    """Each mismatch as verify says it: a call's line by attempt and seq, a spend by attempt."""
    out = []
    for m in found:
        if m.seq is None:
            out.append(Problem(str(dir / layout.ACTUALS_JSONL), f"attempt {aid}: the metered {m.role} spend "
                               f"{m.recorded} is not the sum of its {path.relative_to(dir / layout.ATTEMPTS_DIR / aid)} "
                               f"lines ({m.derived})"))
        else:
            derived = "unpriced" if m.derived is None else m.derived
            out.append(Problem(str(path), f"attempt {aid}, call seq {m.seq}: cost_usd {m.recorded} is not "
                               f"its usage priced with the run's table as of its t_start ({derived})"))
    return out


def evidence_problems(dir: Path, b: RunBundle) -> list[Problem]:
    """Each attempt's evidence against the digest of its last result line: a resume that
    re-verified an attempt (run.reverify) added its verifier's output and a line recording
    the digest with it; the earlier line stays on record, under the manifest's digests."""
    out = []
    last = {r.attempt_id: i for i, r in enumerate(b.results, start=1)}
    for i, r in enumerate(b.results, start=1):
        if last[r.attempt_id] != i:
            continue
        digest, _ = evidence_digest(dir / layout.ATTEMPTS_DIR / r.attempt_id)
        if digest != r.evidence_digest:
            out.append(Problem(str(dir / layout.RESULTS_JSONL),
                               f"trial {r.trial_id}: evidence of {r.attempt_id} has digest "
                               f"{digest}, the result records {r.evidence_digest}", line=i))
    return out


def termination_problems(dir: Path, b: RunBundle) -> list[Problem]:
    """An episode's recorded termination against the one its transcript shows
    (docs/episodes.md); infra errors and interrupted attempts are not re-derived."""
    out = []
    for i, r in enumerate(b.results, start=1):
        if r.status in ("infra_error", "interrupted"):
            continue
        lines = read_transcript(dir / layout.ATTEMPTS_DIR / r.attempt_id)
        if lines is None and r.termination is None:
            continue
        now = termination_of(lines or [])
        if now != r.termination:
            out.append(Problem(str(dir / layout.RESULTS_JSONL),
                               f"trial {r.trial_id}: recorded termination {r.termination}, its transcript "
                               f"shows {now}", line=i))
    return out


def canary_problems(dir: Path, b: RunBundle) -> list[Problem]:
    """A result that says the canary was not found where its stored evidence holds it.

    The scan is re-run over what was kept (evidence.rederive_canary), within the byte
    budget the attempt had: a scan of it that cannot finish is a problem too; a finding in what
    was not kept (a stream's dropped excess, a link's target) cannot be re-derived, and
    a recorded `found: true` is taken as it is: it can only block a release.
    """
    out = []
    for i, r in enumerate(b.results, start=1):
        if r.canary.found or not r.canary.value:
            continue
        where = rederive_canary(dir / layout.ATTEMPTS_DIR / r.attempt_id, needle(r.canary.value))
        if where and all(w.startswith(SCAN_INCOMPLETE) for w in where):
            # the attempt's scan, within the same byte budget, finished on these bytes
            out.append(Problem(str(dir / layout.RESULTS_JSONL),
                               f"trial {r.trial_id}: the canary scan of the stored evidence of "
                               f"{r.attempt_id} could not finish ({', '.join(where)}); the "
                               "result records the canary not found", line=i))
        elif where:
            out.append(Problem(str(dir / layout.RESULTS_JSONL),
                               f"trial {r.trial_id}: the stored evidence of {r.attempt_id} holds "
                               f"the canary ({', '.join(where[:5])}); the result records it not "
                               "found", line=i))
    return out


def _superseded(b: RunBundle) -> set[str]:
    """Attempt ids of results of an earlier version of their task: a resume after the task
    changed ran the trial again, so their verifier may be gone; they stay on record (and
    under the digests) but are not re-derived with another verifier."""
    latest = {r.trial_id: r.inputs_id for r in b.results}
    return {r.attempt_id for r in b.results if r.inputs_id != latest[r.trial_id]}


def _changed_verifiers(b: RunBundle, tasks: dict[str, LoadedTask], path: str,
                       superseded: set[str]) -> tuple[set[str], list[Problem]]:
    """Tasks whose verifier is gone or not the one the results record: refused by name."""
    bad: set[str] = set()
    problems = []
    for r in b.results:
        if r.task_id in bad or r.attempt_id in superseded:
            continue
        task = tasks.get(r.task_id)
        if task is None:
            bad.add(r.task_id)
            problems.append(Problem(path, f"task {r.task_id}: no longer in the task set; "
                                          "its results cannot be re-derived"))
        elif task.verifier_identity != r.verifier:
            bad.add(r.task_id)
            problems.append(Problem(path, f"task {r.task_id}: its verifier changed since the run "
                                          f"(recorded {r.verifier.digest}, now "
                                          f"{task.verifier_identity.digest}); refusing to "
                                          "re-derive with another verifier"))
    return bad, problems


def rederive(dir: Path, b: RunBundle) -> tuple[int, list[Problem]]:
    """Run each scored result's verifier again on its stored evidence and compare. A command
    verifier that calls a judge gets the run's --driver-secret names (the manifest keeps
    them) from this command's environment, where set (docs/tasks.md "Secrets")."""
    secrets = {n: os.environ[n] for n in b.manifest.settings.driver_secrets or [] if n in os.environ}
    tasks_dir = Path(b.manifest.settings.tasks_dir)
    # the one lookup of the readers: a retired fresh task is found by its content digest
    tasks = run_tasks(tasks_dir, b.manifest.taskset.id, b.manifest.taskset.fresh_content).by_id
    superseded = _superseded(b)
    bad, problems = _changed_verifiers(b, tasks, str(tasks_dir), superseded)
    available = resolve_level("auto").level
    judges = _judge_replay(dir, b, tasks)
    n = 0
    path = str(dir / layout.RESULTS_JSONL)
    scratch = scratch_dir("evalrig-verify-", keep=False)
    try:
        for i, r in enumerate(b.results, start=1):
            recorded = _recorded_verdict(r)
            if recorded is None or r.task_id in bad:
                continue
            if r.attempt_id in superseded and tasks[r.task_id].verifier_identity != r.verifier:
                continue
            # Judge under the level the attempt was judged under where this machine has it.
            level = r.sandbox if available == "bwrap" else available
            judge = modelcalls.judge_models(judges, tasks[r.task_id].spec.verifier, scratch / f"judge-{i}",
                                            tasks[r.task_id].spec.max_evidence_bytes, [], (r.task_id, r.rep))
            v = verify_evidence(tasks[r.task_id], dir / layout.ATTEMPTS_DIR / r.attempt_id, level, 0,
                                b.manifest.settings.max_retries, scratch, secrets=secrets,
                                timeout_scale=b.manifest.settings.timeout_scale,
                                models=judge[0] if judge is not None else None)
            n += 1
            now = _verdict_word(v.passed)
            if now != recorded[0]:
                problems.append(Problem(path, f"trial {r.trial_id}: recorded {recorded[0]}, "
                                              f"re-derived {now}", line=i))
            elif v.reward != recorded[1] or (r.status in ("passed", "failed") and v.checks != r.checks):
                problems.append(Problem(path, f"trial {r.trial_id}: recorded reward {recorded[1]} "
                                              f"checks {r.checks}, re-derived reward {v.reward} "
                                              f"checks {v.checks}", line=i))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return n, problems


def _judge_replay(dir: Path, b: RunBundle, tasks: dict[str, LoadedTask]) -> GatewayUse | None:
    """A judge that called models (`[verifier] models = true`) is re-run against its own
    recorded calls (verifier/model.jsonl), served as `--replay` serves them: no key, no
    network, nothing spent, and a request it did not make then gets 409 (so a judge that
    asks something else now re-derives differently, and says so)."""
    facts = b.manifest.gateway
    wanted = [r for r in b.results if r.task_id in tasks and getattr(tasks[r.task_id].spec.verifier, "models", False)]
    if facts is None or not wanted:
        return None
    calls = {(r.task_id, r.rep): tuple(judge_calls(dir / layout.ATTEMPTS_DIR / r.attempt_id)) for r in wanted}
    recording = Recording(replay_of=ReplayOf(run_id=b.manifest.run_id, manifest_sha256=facts.file_digest),
                          calls=calls, gateway=facts)
    return GatewayUse(key=f"verify:{dir.resolve()}:{b.manifest.run_id}",
                      upstreams=tuple((name, u.api) for name, u in facts.upstreams.items()), recording=recording)


def _verdict_word(passed: bool | None) -> str:
    return {True: "passed", False: "failed", None: "a verifier fault"}[passed]


def _recorded_verdict(r: Result) -> tuple[str, float | None] | None:
    """What the verifier said at the time, where it judged: (passed|failed, reward)."""
    if r.status in ("passed", "failed"):
        return r.status, r.reward
    if r.status in ("agent_error", "timeout") and r.diagnostic is not None:
        return _verdict_word(r.diagnostic.passed), r.diagnostic.reward
    return None
