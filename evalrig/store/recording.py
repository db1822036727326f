"""A registered run's recorded model calls, for `run --replay BUNDLE` (docs/gateway.md,
"Replay").

Only a bundle this home registered, whose every digest verifies, and whose checkpoint id
and task set are this run's, is taken (exit 4 otherwise). Per trial, the calls of its FINAL
attempt are kept in `seq` order: each forwarded call's line of `model.jsonl` and its
response body (`model/<seq>.response.json` or `.response.sse`). Calls the gateway answered
itself (`refused`) are left out: a replayed run's gateway answers those itself again before
it looks in the recording; so are calls whose bodies the evidence cap dropped (they cannot
be served again, and such a request gets 409 like any request the recording lacks).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from evalrig.core.digest import sha256_bytes
from evalrig.core.errors import invalid
from evalrig.core.outcomes import final_of
from evalrig.models.gateway import GatewayFacts, ModelCall, RecordedCall, ReplayOf
from evalrig.models.run import Result, RunManifest
from evalrig.store import bundle
from evalrig.store.compare import refuse_a_comparison_bundle, refuse_unregistered
from evalrig.store.files import read_json
from evalrig.store.jsonl import read_records
from evalrig.store.layout import (
    ATTEMPTS_DIR,
    MANIFEST,
    MODEL_DIR,
    MODEL_JSONL,
    RESULTS_JSONL,
    VERIFIER_DIR,
)

_CONTENT_TYPES = {"json": "application/json", "sse": "text/event-stream"}


@dataclass(frozen=True)
class Recording:
    """What `--replay` serves: the recorded calls by trial (task id, rep), and whose they are."""

    replay_of: ReplayOf
    calls: Mapping[tuple[str, int], tuple[RecordedCall, ...]]
    gateway: GatewayFacts | None
    """The recorded run's gateway (its upstreams' names and apis route the replayed calls)."""


def _hint(dir: Path) -> str:
    return (f"--replay takes a run bundle this home registered (a finished `evalrig run --out {dir}`, "
            "or one brought in with `evalrig verify --register`) of the same sealed checkpoint "
            "on the same task set")


def load_recording(dir: Path, home: Path, checkpoint_id: str, taskset_id: str) -> Recording:
    """The recorded calls of the registered run bundle `dir`, checked against this run."""
    dir = Path(dir)
    if not (dir / MANIFEST).is_file():
        raise invalid("not a run bundle (no manifest.json)", file=dir, field="--replay", hint=_hint(dir))
    refuse_a_comparison_bundle(dir)
    manifest = read_json(dir / MANIFEST, RunManifest)
    problems = bundle.check_run_digests(dir, manifest)
    if problems:
        first = problems[0]
        raise invalid(f"--replay: does not verify: {first.message}", file=first.file, field=first.field,
                      problems=problems[1:], hint="the recording changed after it was written; "
                      "restore it, or replay another run")
    refuse_unregistered(dir, manifest, home)
    if manifest.checkpoint.id != checkpoint_id:
        raise invalid(f"--replay: the recording evaluated checkpoint {manifest.checkpoint.id}, this run "
                      f"{checkpoint_id}", file=dir / MANIFEST, field="checkpoint.id", hint=_hint(dir))
    if manifest.taskset.id != taskset_id:
        raise invalid(f"--replay: the recording ran task set {manifest.taskset.id}, this run {taskset_id} "
                      "(a task's content differs)", file=dir / MANIFEST, field="taskset.id", hint=_hint(dir))
    results = read_records(dir / RESULTS_JSONL, Result).records
    calls: dict[tuple[str, int], tuple[RecordedCall, ...]] = {}
    for result in sorted(final_of(results).values(), key=lambda r: (r.task_id, r.rep)):
        evidence = dir / ATTEMPTS_DIR / result.attempt_id
        # the judge's calls are kept beside its output (docs/attempts.md "Model calls")
        calls[(result.task_id, result.rep)] = tuple(_attempt_calls(evidence) + judge_calls(evidence))
    return Recording(replay_of=ReplayOf(run_id=manifest.run_id, manifest_sha256=bundle.manifest_digest(manifest)),
                     calls=calls, gateway=manifest.gateway)


def _bodies(folder: Path) -> dict[int, Path]:
    """seq → its response body file (`<seq>.response.json` or `.sse`, however the seq is padded)."""
    found: dict[int, Path] = {}
    if not folder.is_dir():
        return found
    for path in folder.iterdir():
        head, _, kind = path.name.partition(".response.")
        if kind in _CONTENT_TYPES and head.isdigit():
            found[int(head)] = path
    return found


def judge_calls(evidence: Path) -> list[RecordedCall]:
    """A command verifier's recorded calls (role judge): `verifier/model.jsonl` and those of
    each re-verification on resume (`verifier/reverify-<n>/`), in that order."""
    out = _attempt_calls(evidence / VERIFIER_DIR)
    again = sorted((p for p in (evidence / VERIFIER_DIR).glob("reverify-*") if p.name[9:].isdigit()),
                   key=lambda p: int(p.name[9:]))
    for folder in again:
        out += _attempt_calls(folder)
    return out


def _attempt_calls(evidence: Path) -> list[RecordedCall]:
    lines = read_records(evidence / MODEL_JSONL, ModelCall).records
    bodies = _bodies(evidence / MODEL_DIR)
    out = []
    for line in sorted(lines, key=lambda c: c.seq):
        body = bodies.get(line.seq)
        if line.refused is not None or line.bodies != "kept" or body is None:
            continue
        response = body.read_bytes()
        # the bundle's digests were checked before this read; the body served is the one its
        # line names, whatever changed the file since
        if sha256_bytes(response) != line.response_sha256:
            raise invalid(f"--replay: the response body is not the one its line records ({line.response_sha256})",
                          file=body, field=f"{MODEL_JSONL} seq {line.seq}.response_sha256",
                          hint="the recording changed after its digests were checked; restore it, or replay "
                               "another run")
        out.append(RecordedCall(
            role=line.role, request_sha256=line.request_sha256, status=line.status, stream=line.stream,
            response=response, content_type=_CONTENT_TYPES[body.name.rpartition(".")[2]],
            usage=line.usage, usage_raw=line.usage_raw, cost_usd=line.cost_usd))
    return out
