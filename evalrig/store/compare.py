"""Comparing two run bundles on disk (docs/gate.md): verify and read both runs, refuse runs
that cannot be paired, call the pure core (`evalrig.core.compare`), write the comparison
bundle; and read a comparison bundle back, verified.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from evalrig.core import report
from evalrig.core.compare import (
    CalibrationInputs,
    Ranges,
    RunView,
    TaskView,
    TrialOutcome,
    build_comparison,
    history_check,
)
from evalrig.core.digest import loads, pretty_json, sha256_bytes
from evalrig.core.errors import Incomplete, UsageError, invalid
from evalrig.models.comparison import Comparison, ComparisonManifest, FigureSource, Integrity, RunRef, SideFacts
from evalrig.models.inputs import Suite
from evalrig.models.run import RunManifest
from evalrig.store import bundle
from evalrig.store.checkpoint import registered_seal
from evalrig.store.files import parse_json, read_json, write_bytes_atomic, write_json_atomic
from evalrig.store.layout import COMPARISON_JSON, COMPARISON_MD, HISTORY, MANIFEST
from evalrig.store.ledger import registered_run, runs_path
from evalrig.store.runlines import Line, ResultLine, RunLines, final_results, no_gc, read_run_lines


@dataclass(frozen=True)
class LoadedRun:
    view: RunView
    manifest: RunManifest
    history: bytes | None


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _relative(text: str, dir: Path) -> str:
    return text.replace(str(dir) + "/", "")


def _integrity(dir: Path, manifest: RunManifest, allow_incomplete: bool) -> Integrity:
    """Every digest of the run; a mismatch refuses the comparison (exit 4, naming the file)."""
    problems = bundle.check_run_digests(dir)
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


def _side_facts(m: RunManifest, lines: RunLines, final: dict[str, ResultLine], integrity: Integrity,
                home: Path) -> SideFacts:
    results = lines.results
    entry = registered_seal(home, m.checkpoint.id)
    suites: dict[str, set[str]] = {}
    for r in final.values():
        suites.setdefault(r.suite, set()).add(r.task_id)
    sandbox = Counter(r.sandbox for r in results)
    found = sorted(r.attempt_id for r in results if r.canary_found)
    infra = sum(r.status == "infra_error" for r in results)
    hosts = sorted({h for r in results if r.network_hosts for h in r.network_hosts})
    cost_source: Counter[str] = Counter()
    for r in final.values():
        a = lines.actuals.get(r.attempt_id)
        cost_source["missing" if a is None or a.get("cost_usd") is None else a["usage_source"]] += 1
    return SideFacts(
        run_id=m.run_id, checkpoint_id=m.checkpoint.id, status=m.status, subset=m.subset, repeat=m.repeat,
        taskset_suites=dict(sorted(m.taskset.suites.items())),
        run_suites={s: len(ids) for s, ids in sorted(suites.items())},  # type: ignore[misc]
        trials=m.counts.trials, scored=len(final), unscored=max(0, m.counts.trials - len(final)),
        attempts=len(results), infra_errors=infra,
        infra_error_rate=infra / len(results) if results else None,
        sandbox={lvl: sandbox.get(lvl, 0) for lvl in ("bwrap", "process")},
        network_attempts=sum(r.network for r in results), hosts_reached=hosts[:1000],
        cost_source=dict(sorted(cost_source.items())),
        seal_checks=len(m.seal_checks), seal_checks_matched=sum(c.matched for c in m.seal_checks),
        seal_check_failures=[f"{c.phase}: {c.message or c.checkpoint_id}" for c in m.seal_checks if not c.matched],
        registered=entry is not None, sealed_at=entry.sealed_at if entry else None,
        canary_found=len(found), canary_attempts=found[:100], history=m.history,
        policy_pin=m.policy_pin, integrity=integrity,
    )


def _calibration_inputs(lines: RunLines, final: dict[str, ResultLine]) -> CalibrationInputs:
    p: list[float] = []
    passed: list[bool] = []
    cols: dict[str, tuple[list[float], list[float], list[float], list[float]]] = {
        "time": ([], [], [], []), "cost": ([], [], [], [])}
    valid = 0
    # In the results file's order (deterministic for a bundle); the sums are fsum's, exact anyway.
    for r in final.values():
        e, a = lines.estimates.get(r.attempt_id), lines.actuals.get(r.attempt_id)
        if e is None or e["state"] != "valid":
            continue
        valid += 1
        level = float(e.get("level", 0.8))
        ps = e.get("p_success")
        if ps is not None and r.passed is not None:
            p.append(float(ps))
            passed.append(r.passed)
        if a is None:
            continue
        for name, rng, actual in (("time", e.get("time_s"), a["wall_s"]), ("cost", e.get("cost_usd"), a.get("cost_usd"))):
            if rng is not None and actual is not None:
                lo, hi, lv, ac = cols[name]
                lo.append(float(rng[0]))
                hi.append(float(rng[1]))
                lv.append(level)
                ac.append(float(actual))
    time, cost = (Ranges(*(tuple(c) for c in cols[n])) for n in ("time", "cost"))
    return CalibrationInputs(p_success=tuple(p), passed=tuple(passed), time=time, cost=cost, estimates=valid)


def _figures(a: Line | None) -> tuple[float | None, float | None, float | None, FigureSource]:
    """cost, wall_s, cpu_s of an actual line (all null without one) and the cost's source."""
    if a is None:
        return None, None, None, "missing"
    cost, cpu = a.get("cost_usd"), a.get("cpu_s")
    return ((None if cost is None else float(cost)), float(a["wall_s"]), (None if cpu is None else float(cpu)),
            a["usage_source"])


def _task_views(lines: RunLines, final: dict[str, ResultLine]) -> dict[str, TaskView]:
    by_task: dict[str, list[tuple[int, TrialOutcome]]] = {}
    suite_of: dict[str, Suite] = {}
    for r in final.values():
        a = lines.actuals.get(r.attempt_id)
        outcome = TrialOutcome(bool(r.passed), r.reward, *_figures(a))
        by_task.setdefault(r.task_id, []).append((r.rep, outcome))
        suite_of[r.task_id] = r.suite
    return {
        t: TaskView(task_id=t, suite=suite_of[t], outcomes=tuple(o for _, o in sorted(rows, key=lambda x: x[0])))
        for t, rows in sorted(by_task.items())
    }


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
    if manifest.status != "complete" and not allow_incomplete:
        raise Incomplete(
            f"the run is {manifest.status}: {manifest.counts.unscored} of {manifest.counts.trials} trials unscored",
            file=str(dir / MANIFEST),
            hint=f"resume it with `evalrig run --out {dir} --resume`, or compare with --allow-incomplete "
            "(the gate never promotes on an incomplete comparison)",
        )
    integrity = _integrity(dir, manifest, allow_incomplete)
    refuse_unregistered(dir, manifest, home)
    lines = read_run_lines(dir)
    integrity = integrity.model_copy(update={"torn": [f"{n}:{t}" for n, t in sorted(lines.torn.items())]})
    final = final_results(lines.results)
    history = None
    if manifest.history == "declared":
        path = dir / HISTORY
        history = path.read_bytes() if path.is_file() else b""
    ref = RunRef(run_id=manifest.run_id, checkpoint_id=manifest.checkpoint.id,
                 bundle_digest=bundle.bundle_digest(dict(manifest.files)))
    view = RunView(
        ref=ref, repeat=manifest.repeat, seed=manifest.seed, taskset_id=manifest.taskset.id,
        tasks=_task_views(lines, final), facts=_side_facts(manifest, lines, final, integrity, home),
        fresh_created_at=dict(manifest.taskset.fresh_created_at),
        fresh_content=dict(manifest.taskset.fresh_content),
        calibration=_calibration_inputs(lines, final),
    )
    return LoadedRun(view=view, manifest=manifest, history=history)


def refuse_unregistered(dir: Path, manifest: RunManifest, home: Path) -> None:
    """A run bundle counts only when the rig's home registered its digest (docs/security.md):
    a bundle anyone edited and re-digested is not one a run of this home finished."""
    digest = bundle.bundle_digest(dict(manifest.files))
    if registered_run(home, digest) is None:
        raise invalid(
            f"not registered: no run of this rig's home finished with the bundle digest {digest} "
            f"({runs_path(home)})",
            file=dir,
            hint=f"a bundle made on another machine or with another EVALRIG_HOME is brought in by "
            f"`evalrig verify --register {dir}`, which re-derives every result from its evidence first",
        )


def check_pairable(champion: LoadedRun, candidate: LoadedRun, champ_dir: Path, cand_dir: Path) -> None:
    """Refuse (exit 4, naming the difference) runs that cannot be paired trial by trial."""
    a, b = champion.manifest, candidate.manifest
    pin_a = a.policy_pin.digest if a.policy_pin else None
    pin_b = b.policy_pin.digest if b.policy_pin else None
    checks = [
        ("taskset.id", "task sets", a.taskset.id, b.taskset.id),
        ("repeat", "--repeat", a.repeat, b.repeat),
        ("seed", "--seed", a.seed, b.seed),
        ("settings.timeout_scale", "--timeout-scale", a.settings.timeout_scale, b.settings.timeout_scale),
        ("settings.max_retries", "--max-retries", a.settings.max_retries, b.settings.max_retries),
        ("policy_pin.digest", "pinned policies", pin_a, pin_b),
        ("rig_version", "rig versions (major.minor)", _major_minor(a.rig_version), _major_minor(b.rig_version)),
    ]
    for fieldpath, what, x, y in checks:
        if x != y:
            raise invalid(
                f"the runs differ in {what}: champion {x!r}, candidate {y!r} ({champ_dir / MANIFEST})",
                file=str(cand_dir / MANIFEST), field=fieldpath,
                hint="pair only runs of one train: rerun one side with the other's settings",
            )


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
    history = history_check(champion.history, candidate.history)
    comparison = build_comparison(champion.view, candidate.view, history, allow_incomplete)
    write_comparison(out_dir, comparison, report.comparison_markdown(comparison), allow_incomplete)
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


def write_comparison(out_dir: Path, comparison: Comparison, markdown: str, allow_incomplete: bool) -> None:
    """Write the bundle; a comparison already there with other bytes is never replaced."""
    data = pretty_json(comparison)
    md = markdown.encode()
    check_out_dir(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise invalid(f"cannot be made: {e.strerror}", file=out_dir, hint="give compare a new --out directory") from e
    existing = out_dir / COMPARISON_JSON
    if existing.exists() and existing.read_bytes() != data:
        raise invalid(
            "holds a different comparison; its decisions would no longer match it",
            file=existing, hint="give compare a new --out directory",
        )
    manifest = ComparisonManifest(
        champion=comparison.champion, candidate=comparison.candidate, allow_incomplete=allow_incomplete,
        files={COMPARISON_JSON: sha256_bytes(data), COMPARISON_MD: sha256_bytes(md)},
    )
    write_bytes_atomic(out_dir / COMPARISON_JSON, data)
    write_bytes_atomic(out_dir / COMPARISON_MD, md)
    write_json_atomic(out_dir / MANIFEST, manifest)


def read_comparison(dir: Path) -> tuple[Comparison, str]:
    """The comparison of a comparison bundle and the digest of its bytes, verified against manifest.json."""
    dir = Path(dir)
    path = dir / COMPARISON_JSON
    if not path.is_file():
        raise invalid("not a comparison bundle (no comparison.json)", file=dir,
                      hint="give the --out directory of `evalrig compare`")
    data = path.read_bytes()
    digest = sha256_bytes(data)
    manifest = read_json(dir / MANIFEST, ComparisonManifest)
    want = manifest.files.get(COMPARISON_JSON)
    if want != digest:
        raise invalid(f"digest {digest} differs from manifest.json's {want}", file=path,
                      hint="the comparison was edited after compare wrote it; run compare again")
    return parse_json(path, data, Comparison), digest

