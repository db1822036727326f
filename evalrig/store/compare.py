"""Comparing two run bundles on disk (docs/gate.md): verify and read both runs, refuse runs
that cannot be paired, call the pure core (`evalrig.core.compare`), write the comparison
bundle; and read a comparison bundle back, verified.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Literal

from evalrig.core import report
from evalrig.core.compare import RunRecords, RunView, build_comparison, history_check, run_view
from evalrig.core.digest import loads, pretty_json, sha256_bytes
from evalrig.core.errors import EvalrigError, Incomplete, UsageError, invalid
from evalrig.core.metering import one_table, repriced
from evalrig.core.outcomes import final_of
from evalrig.core.pricing import Pricer, genai_prices_version, pricer
from evalrig.core.words import count
from evalrig.models.base import format_ts
from evalrig.models.comparison import (
    Comparison,
    ComparisonManifest,
    Integrity,
)
from evalrig.models.gateway import GatewayFacts, ModelCall, Pricing
from evalrig.models.run import RunManifest, SealEntry
from evalrig.store import bundle
from evalrig.store.checkpoint import registered_seal
from evalrig.store.comparison_file import RECOMPARE_HINT
from evalrig.store.files import read_json, write_bytes_atomic, write_json_atomic
from evalrig.store.jsonl import read_records
from evalrig.store.layout import (
    ATTEMPTS_DIR,
    COMPARISON_JSON,
    COMPARISON_MD,
    HISTORY,
    MANIFEST,
    MODEL_JSONL,
)
from evalrig.store.ledger import registered_run, runs_path
from evalrig.store.runlines import RUN_LINE_FILES, no_gc, read_run_lines
from evalrig.store.tasks import load_taskset

# What to do about a comparison that changed after compare wrote it, said the same way by
# compare, gate, sign and check-release (docs/gate.md): the rig never overwrites a
# comparison or a decision, so the way on is a new comparison bundle.


@dataclass(frozen=True)
class LoadedRun:
    view: RunView
    manifest: RunManifest
    history: bytes | None
    dir: Path | None = None
    records: RunRecords | None = None
    integrity: Integrity | None = None
    seal: SealEntry | None = None


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _relative(text: str, dir: Path) -> str:
    return text.replace(str(dir) + "/", "")


def _integrity(dir: Path, manifest: RunManifest, allow_incomplete: bool,
               kept: dict[str, bytes | None]) -> Integrity:
    """Every digest of the run (those of `manifest`, as load_side read it); a mismatch refuses
    the comparison (exit 4, naming the file). The record files keyed in `kept` are read once:
    their verified bytes are handed back there, for the statistics to parse (docs/security.md)."""
    problems = bundle.check_run_digests(dir, manifest, kept=kept)
    if problems and manifest.status == "running" and allow_incomplete:
        # A run that never finished has no digests: recorded, and the gate's
        # bundle-integrity (and complete) will not hold.
        # Paths relative to the bundle, so that the comparison's bytes do not depend on where it lies.
        return Integrity(verified_files=0, problems=[_relative(p.render(), dir) for p in problems])
    if problems:
        first = problems[0]
        raise invalid(f"does not verify: {first.message}", file=first.file, field=first.field,
                      problems=problems[1:],
                      hint="the run bundle changed after it was written; restore it or run it again")
    return Integrity(verified_files=len(manifest.files), problems=[])


def refuse_a_comparison_bundle(dir: Path) -> None:
    """A comparison bundle given in place of a run is named as such, not by every run
    manifest field it lacks."""
    try:
        kind = loads((dir / MANIFEST).read_bytes()).get("kind")
    except (OSError, ValueError, AttributeError):
        return  # read_json says what is wrong with the manifest
    if kind == "comparison":
        raise invalid("not a run bundle (a comparison bundle)", file=dir,
                      hint="compare takes the two run bundles (the --out directories of `evalrig run`)")


def load_side(dir: Path, home: Path, allow_incomplete: bool) -> LoadedRun:
    """Read, check and summarise one run bundle for comparison."""
    dir = Path(dir)
    if not (dir / MANIFEST).is_file():
        raise invalid("not a run bundle (no manifest.json)", file=dir,
                      hint="give the --out directory of an `evalrig run`")
    refuse_a_comparison_bundle(dir)
    manifest = read_json(dir / MANIFEST, RunManifest)
    if manifest.status == "running" and (not allow_incomplete or bundle.lock_is_held(dir)):
        live = bundle.lock_is_held(dir)
        raise Incomplete(bundle.unfinished_state(dir), file=str(dir / MANIFEST),
                         hint="wait for it to finish, then compare" if live else
                         "resume it, then compare; or compare with --allow-incomplete (the gate "
                         "never promotes on an incomplete comparison)")
    if manifest.status != "complete" and not allow_incomplete:
        raise Incomplete(
            f"the run is {manifest.status}: {manifest.counts.unscored} of {count(manifest.counts.trials, 'trial')} unscored",
            file=str(dir / MANIFEST),
            hint=f"resume it with `evalrig run --out {dir} --resume`, or compare with --allow-incomplete "
            "(the gate never promotes on an incomplete comparison)",
        )
    kept: dict[str, bytes | None] = dict.fromkeys((*RUN_LINE_FILES, HISTORY))
    integrity = _integrity(dir, manifest, allow_incomplete, kept)
    refuse_unregistered(dir, manifest, home)
    lines = read_run_lines(dir, kept)
    integrity = integrity.model_copy(update={"torn": [f"{n}:{t}" for n, t in sorted(lines.torn.items())]})
    history = None
    if manifest.history == "declared":
        history = kept[HISTORY] or b""
    seal = registered_seal(home, manifest.checkpoint.id)
    view = run_view(manifest, lines.records, integrity, seal, bundle.bundle_digest(dict(manifest.files)))
    return LoadedRun(view=view, manifest=manifest, history=history, dir=dir, records=lines.records,
                     integrity=integrity, seal=seal)


def refuse_unregistered(dir: Path, manifest: RunManifest, home: Path) -> None:
    """A run bundle counts only when the rig's home registered its digest (docs/security.md):
    a bundle anyone edited and re-digested is not one a run of this home finished."""
    digest = bundle.bundle_digest(dict(manifest.files))
    entry = registered_run(home, digest)
    if entry is not None:
        bundle.refuse_unlike_registration(dir, manifest, home, entry.manifest_digest)
    else:
        raise invalid(
            f"not registered: no run of this rig's home finished with the bundle digest {digest} "
            f"({runs_path(home)})",
            file=dir,
            hint=f"a bundle made on another machine or with another EVALRIG_HOME is brought in by "
            f"`evalrig verify --register {dir}`, which re-derives every result from its evidence first",
        )


def _pin(manifest: RunManifest) -> str:
    pin = manifest.policy_pin
    return "no policy pinned (run without --policy)" if pin is None else f"{pin.name} v{pin.version} ({pin.digest})"


def _some(ids: list[str], noun: str) -> str:
    """`3 tasks only the champion's run has (a, b, c)`: at most five named, and the count."""
    more = f", and {len(ids) - 5} more" if len(ids) > 5 else ""
    return f"{len(ids)} {noun} ({', '.join(ids[:5])}{more})"


def _task_digests(manifest: RunManifest) -> dict[str, str] | None:
    """Each task's digest, from the task folder the run used, only while that folder still
    is the task set the run recorded (its id matches the manifest's)."""
    try:
        taskset = load_taskset(Path(manifest.settings.tasks_dir))
    except (EvalrigError, OSError):
        return None
    return {t.id: t.digest for t in taskset.tasks} if taskset.id == manifest.taskset.id else None


def taskset_difference(champion: LoadedRun, candidate: LoadedRun) -> str:
    """Which tasks make two task sets differ: those only one run has, and those whose content
    differs. The task folders the runs used say it exactly while they are unchanged; else
    the bundles' own records: the tasks each run scored, and each fresh task's content
    digest and created_at."""
    a, b = champion.manifest.taskset, candidate.manifest.taskset
    digests_a, digests_b = _task_digests(champion.manifest), _task_digests(candidate.manifest)
    if digests_a is not None and digests_b is not None:
        ids_a, ids_b = set(digests_a), set(digests_b)
        changed = sorted(t for t in ids_a & ids_b if digests_a[t] != digests_b[t])
        source = ""
    else:
        ids_a, ids_b = set(champion.view.tasks) | set(a.fresh_content), set(candidate.view.tasks) | set(b.fresh_content)
        changed = sorted(t for t in ids_a & ids_b
                         if (t in a.fresh_content and a.fresh_content.get(t) != b.fresh_content.get(t))
                         or a.fresh_created_at.get(t) != b.fresh_created_at.get(t))
        source = " (from the bundles' records: the task folders the runs used have changed since)"
    parts = []
    if ids_a - ids_b:
        parts.append(_some(sorted(ids_a - ids_b), "tasks only the champion's run has"))
    if ids_b - ids_a:
        parts.append(_some(sorted(ids_b - ids_a), "tasks only the candidate's run has"))
    if changed:
        parts.append(_some(changed, "tasks with other content"))
    if not parts:
        return ("no task is only in one run and no recorded digest differs, so a fixed or invariant task's prompt, "
                "files or verifier changed (the bundles record content per fresh task only)")
    return "; ".join(parts) + source


def check_pairable(champion: LoadedRun, candidate: LoadedRun, champ_dir: Path, cand_dir: Path) -> None:
    """Refuse (exit 4, naming the difference) runs that cannot be paired trial by trial."""
    a, b = champion.manifest, candidate.manifest
    if a.taskset.id != b.taskset.id:
        raise invalid(
            f"the runs differ in task sets: {taskset_difference(champion, candidate)} (champion {a.taskset.id} "
            f"in {champ_dir / MANIFEST}, candidate {b.taskset.id})",
            file=str(cand_dir / MANIFEST), field="taskset.id",
            hint="pair only runs of one train: run both sides on the same task folder (--tasks)",
        )
    checks: list[tuple[str, str, object, object]] = [
        ("repeat", "--repeat", a.repeat, b.repeat),
        ("seed", "--seed", a.seed, b.seed),
        ("settings.timeout_scale", "--timeout-scale", a.settings.timeout_scale, b.settings.timeout_scale),
        ("settings.max_retries", "--max-retries", a.settings.max_retries, b.settings.max_retries),
        ("policy_pin.digest", "pinned policies", a.policy_pin.digest if a.policy_pin else None,
         b.policy_pin.digest if b.policy_pin else None),
        ("rig_version", "rig versions (major.minor)", _major_minor(a.rig_version), _major_minor(b.rig_version)),
    ]
    checks += [
        ("settings.max_cost_usd_per_attempt", "--max-cost-usd-per-attempt budgets",
         a.settings.max_cost_usd_per_attempt, b.settings.max_cost_usd_per_attempt),
        ("settings.max_cost_usd", "--max-cost-usd budgets", a.settings.max_cost_usd, b.settings.max_cost_usd),
        ("settings.interpreter_prefixes", "--interpreter-prefix", sorted(a.settings.interpreter_prefixes),
         sorted(b.settings.interpreter_prefixes)),
        ("replay_of", "replays (one replayed another run's model calls, the other called upstreams)",
         a.replay_of is not None, b.replay_of is not None),
    ]
    if a.gateway is not None and b.gateway is not None:
        checks.append(("gateway.upstreams", "model gateway upstreams (api, base_url)",
                       _upstreams(a.gateway), _upstreams(b.gateway)))
    shown = {"policy_pin.digest": (_pin(a), _pin(b))}
    for fieldpath, what, x, y in checks:
        if x != y:
            x_text, y_text = shown.get(fieldpath, (repr(x), repr(y)))
            raise invalid(
                f"the runs differ in {what}: champion {x_text}, candidate {y_text} ({champ_dir / MANIFEST})",
                file=str(cand_dir / MANIFEST), field=fieldpath,
                hint="pair only runs of one train: rerun one side with the other's settings"
                + (" (the same --policy file)" if fieldpath == "policy_pin.digest" else ""),
            )


def _upstreams(facts: GatewayFacts) -> dict[str, tuple[str, str]]:
    return {name: (u.api, u.base_url) for name, u in sorted(facts.upstreams.items())}


def _model_lines(dir: Path, attempt_ids: list[str]) -> dict[str, list[ModelCall]]:
    """Each attempt's model.jsonl lines (verified with the bundle's other files)."""
    return {aid: read_records(dir / ATTEMPTS_DIR / aid / MODEL_JSONL, ModelCall).records for aid in attempt_ids}


def _repriced(side: LoadedRun, price: Pricer, as_of: datetime) -> LoadedRun:
    """The run with every final attempt's cost priced again with compare's one table."""
    assert side.records is not None and side.dir is not None and side.integrity is not None
    facts = side.manifest.gateway
    assert facts is not None
    final = sorted(r.attempt_id for r in final_of(side.records.results).values())
    costs = repriced(_model_lines(side.dir, final), facts, price, as_of)
    actuals = dict(side.records.actuals)
    for aid, cost in costs.items():
        if aid in actuals:
            actuals[aid] = actuals[aid]._replace(cost_usd=cost.cost_usd, usage_source=cost.source)
    records = RunRecords(results=side.records.results, actuals=actuals, estimates=side.records.estimates)
    view = run_view(side.manifest, records, side.integrity, side.seal, bundle.bundle_digest(dict(side.manifest.files)))
    return replace(side, view=view, records=records)


def one_price_table(champion: LoadedRun, candidate: LoadedRun) -> tuple[LoadedRun, LoadedRun, Pricing | None]:
    """Both runs' metered calls priced with one table (docs/gateway.md, "Cost that decides"):
    the genai-prices installed now, the runs' [prices], as of the candidate run's created_at."""
    a, b = champion.manifest.gateway, candidate.manifest.gateway
    as_of = candidate.manifest.created_at
    pricing = one_table(a, b, genai_prices_version(), format_ts(as_of))
    if pricing is None or pricing.closed is not None or b is None:
        return champion, candidate, pricing
    price = pricer(b.prices or {})
    return _repriced(champion, price, as_of), _repriced(candidate, price, as_of), pricing


def compare_bundles(champ_dir: Path, cand_dir: Path, out_dir: Path, home: Path,
                    allow_incomplete: bool = False) -> Comparison:
    """Verify and pair two run bundles, and write the comparison bundle to `out_dir`."""

    champ_dir, cand_dir, out_dir = Path(champ_dir), Path(cand_dir), Path(out_dir)
    with no_gc():
        return _compare_bundles(champ_dir, cand_dir, out_dir, home, allow_incomplete)


def _compare_bundles(champ_dir: Path, cand_dir: Path, out_dir: Path, home: Path,
                     allow_incomplete: bool) -> Comparison:
    check_out_dir(out_dir)  # before the reading, which takes seconds on a large train
    refuse_out_inside_a_bundle(out_dir)
    champion = load_side(champ_dir, home, allow_incomplete)
    candidate = load_side(cand_dir, home, allow_incomplete)
    check_pairable(champion, candidate, champ_dir, cand_dir)
    champion, candidate, pricing = one_price_table(champion, candidate)
    history = history_check(champion.history, candidate.history)
    comparison = build_comparison(champion.view, candidate.view, history, allow_incomplete, pricing=pricing)
    runs: dict[Literal["champion", "candidate"], str] = {"champion": str(champ_dir.resolve()),
                                                         "candidate": str(cand_dir.resolve())}
    names = {side.manifest.checkpoint.id: side.manifest.checkpoint.name for side in (champion, candidate)}
    write_comparison(out_dir, comparison, report.comparison_markdown(comparison, names), allow_incomplete, runs)
    from evalrig.models.comparison import ComparisonEntry
    from evalrig.store.clock import utcnow
    from evalrig.store.ledger import record_comparison

    record_comparison(home, ComparisonEntry(
        comparison_digest=sha256_bytes(pretty_json(comparison)), comparison_dir=str(out_dir.resolve()),
        champion=comparison.champion, candidate=comparison.candidate, at=utcnow()))
    return comparison


def refuse_out_inside_a_bundle(out_dir: Path) -> None:
    """Files written inside a bundle (one of the two runs, say) are files its manifest does
    not list: that bundle would never verify again (`run` refuses the same)."""
    for parent in out_dir.resolve().parents:
        if (parent / MANIFEST).is_file():
            raise UsageError(f"--out {out_dir} is inside the bundle {parent}",
                             hint="give compare an --out outside every bundle")


def check_out_dir(out_dir: Path) -> None:
    """Refuse an --out that is a file, or a bundle of another kind (a run's manifest.json
    would be replaced by the comparison's, and that run could never verify again)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise invalid("is not a directory", file=out_dir, hint="give compare a new --out directory")
    manifest = out_dir / MANIFEST
    if not manifest.exists():
        return
    try:
        kind = loads(manifest.read_bytes()).get("kind")
    except (OSError, ValueError, AttributeError):
        kind = None
    if kind != "comparison":
        what = f"a {kind} bundle" if isinstance(kind, str) else "a manifest.json that is not a comparison's"
        raise invalid(f"holds {what}; writing a comparison there would replace its manifest",
                      file=manifest, hint="give compare a new --out directory (not a run bundle)")


def write_comparison(out_dir: Path, comparison: Comparison, markdown: str, allow_incomplete: bool,
                     runs: dict[Literal["champion", "candidate"], str] | None = None) -> None:
    """Write the bundle; a comparison already there with other bytes is never replaced.
    `runs` records where the run bundles were, for the report (docs/report.md)."""
    data = pretty_json(comparison)
    md = markdown.encode()
    check_out_dir(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise invalid(f"cannot be made: {e.strerror}", file=out_dir, hint="give compare a new --out directory") from e
    existing = out_dir / COMPARISON_JSON
    if existing.exists() and existing.read_bytes() != data:
        if _verifies(out_dir, existing):
            raise invalid("holds a different comparison; its decisions would no longer match it",
                          file=existing, hint="give compare a new --out directory")
        raise invalid("was edited after compare wrote it (its digest differs from manifest.json's); "
                      "it is never overwritten", file=existing, hint=RECOMPARE_HINT)
    manifest = ComparisonManifest(
        champion=comparison.champion, candidate=comparison.candidate, allow_incomplete=allow_incomplete,
        files={COMPARISON_JSON: sha256_bytes(data), COMPARISON_MD: sha256_bytes(md)}, runs=runs,
    )
    write_bytes_atomic(out_dir / COMPARISON_JSON, data)
    write_bytes_atomic(out_dir / COMPARISON_MD, md)
    write_json_atomic(out_dir / MANIFEST, manifest)


def _verifies(out_dir: Path, existing: Path) -> bool:
    """Whether comparison.json is what its manifest says (no manifest: nothing says otherwise)."""
    if not (out_dir / MANIFEST).exists():
        return True
    try:
        return read_json(out_dir / MANIFEST, ComparisonManifest).files.get(COMPARISON_JSON) == sha256_bytes(
            existing.read_bytes())
    except EvalrigError:
        return False

