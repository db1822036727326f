"""A resume's re-verification: an attempt whose verifier faulted is judged again from its
stored evidence, and its agent is never started again (docs/attempts.md, "Faults never
help the candidate").

The verifier runs up to 1 + `--max-retries` times more on the evidence as stored (without
the rig's `verifier/` output, as it first saw it); its output goes to
`attempts/<id>/verifier/reverify-<n>/`. The attempt gets a new line in `results.jsonl`
with the same attempt id: scored when the verifier now decides, else a final
`infra_error` (`fault: verifier`, `final: true`) that no later resume re-verifies or runs.
`attempts.jsonl` gets nothing: no attempt started. The last line of an attempt is the one
that counts (its evidence digest covers the new output; `verify` checks that line).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalrig.attempt import modelcalls
from evalrig.attempt.canary import needle
from evalrig.attempt.evidence import evidence_digest
from evalrig.attempt.modelcalls import GatewayUse
from evalrig.attempt.verifiers import VERIFIER_DIR, verify_evidence
from evalrig.core.plan import Trial
from evalrig.models.run import Result
from evalrig.run.book import TrialBook
from evalrig.store import layout
from evalrig.store.jsonl import append_lines, read_records

REVERIFY_PREFIX = "reverify-"


def reverify(out: Path, book: TrialBook, items: list[tuple[Trial, str]], tasks: Mapping[str, Any],
             level: str, retries: int, scratch: Path, secrets: Mapping[str, str],
             timeout_scale: float = 1.0, gateway: GatewayUse | None = None) -> int:
    """Re-verify each (trial, attempt id) from its stored evidence; append the new result
    lines and book them. Returns how many were re-verified."""
    if not items:
        return 0
    wanted = {attempt_id for _, attempt_id in items}
    last: dict[str, Result] = {}
    for r in read_records(out / layout.RESULTS_JSONL, Result).records:
        if r.attempt_id in wanted:
            last[r.attempt_id] = r
    lines = []
    for trial, attempt_id in items:
        before = last.get(attempt_id)
        task = tasks.get(trial.task_id)
        if before is None or task is None:
            continue
        lines.append(_reverified(out / layout.ATTEMPTS_DIR / attempt_id, before, task, level, retries,
                                 scratch, secrets, timeout_scale, gateway))
    append_lines(out / layout.RESULTS_JSONL, lines)
    for r in lines:
        book.result(r.trial_id, r.inputs_id, r.status, r.attempt_id, r.fault, r.final, r.verifier_runs)
    return len(lines)


def _reverified(evidence: Path, before: Result, task: Any, level: str, retries: int, scratch: Path,
                secrets: Mapping[str, str], timeout_scale: float, gateway: GatewayUse | None = None) -> Result:
    verifier_out = evidence / VERIFIER_DIR
    n = 1 + sum(1 for p in verifier_out.glob(f"{REVERIFY_PREFIX}*")) if verifier_out.is_dir() else 1
    # a judge that calls models reaches the gateway again, its calls beside this run's output
    judge = modelcalls.judge_models(gateway, task.spec.verifier, verifier_out / f"{REVERIFY_PREFIX}{n}",
                                    task.spec.max_evidence_bytes,
                                    [needle(before.canary.value)] if before.canary.value else [],
                                    (before.task_id, before.rep))
    v = verify_evidence(task, evidence, level, 0, retries, scratch,
                        output_dir=verifier_out / f"{REVERIFY_PREFIX}{n}",
                        secrets={k: secrets[k] for k in secrets}, timeout_scale=timeout_scale,
                        models=judge[0] if judge is not None else None)
    digest, size = evidence_digest(evidence)
    runs = before.verifier_runs + v.runs
    if v.outcome == "fault":
        update: dict[str, Any] = {
            "status": "infra_error", "passed": None, "reward": None, "checks": {},
            "fault": "verifier", "final": True,
            "error": f"verifier fault: {v.error} (again when re-verified from the stored evidence "
                     "on resume: final)"}
    else:
        update = {"status": v.outcome, "passed": v.outcome == "passed", "reward": v.reward,
                  "checks": dict(v.checks), "fault": None, "final": None, "error": None}
    return before.model_copy(update={**update, "verifier_runs": runs, "verifier_usage": v.usage,
                                     "evidence_digest": digest, "evidence_bytes": size})
