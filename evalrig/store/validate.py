"""`evalrig validate`: check inputs and bundles against their formats and each other.

Runs nothing. Gathers every problem (not only the first) as `file:line: field: message`.

Choices made here, where the documented contract leaves room:
- A checkpoint that is not sealed is a *warning* (sealing is the step after a checkpoint
  is made; validate is also run before it), while a checkpoint whose SEAL.json names a
  registered seal that its content no longer matches is a *problem*: it was changed after
  sealing.
- A run bundle that is still `running` has no file digests yet: a warning, not a problem.
- A bundle of a kind whose model this version of the rig does not have is a warning.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalrig.core.errors import EvalrigError, Problem
from evalrig.core.tomlerr import error_problems
from evalrig.store.jsonl import whole_lines
from evalrig.store.layout import (
    ACTUALS_JSONL,
    ADVISORY,
    ATTEMPTS_JSONL,
    COMPARISON_JSON,
    DECISIONS,
    ESTIMATES_JSONL,
    ISSUED,
    MANIFEST,
    PROVENANCE,
    RESULTS_JSONL,
    SIGNOFFS,
)


@dataclass
class Report:
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def count(self, what: str, n: int = 1) -> None:
        self.checked[what] = self.checked.get(what, 0) + n

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "problems": [p.as_dict() for p in self.problems],
            "warnings": [p.as_dict() for p in self.warnings],
            "checked": dict(sorted(self.checked.items())),
        }


# -- tasks, policies, checkpoints --------------------------------------------------------


def check_tasks(dir: Path, report: Report) -> None:
    from evalrig.store.tasks import collect_task_problems, read_lock

    taskset, problems = collect_task_problems(dir)
    report.problems += problems
    if taskset is None:
        return
    report.count("tasks", len(taskset.tasks))
    if not taskset.tasks:
        report.warnings.append(Problem(
            str(dir), "no task here (expected <dir>/<suite>/<task-id>/task.toml, the suite one of "
            "fixed, fresh, invariant); `evalrig init task NAME --tasks DIR` writes one"))
    lock = read_lock(dir)
    unlocked = [t.id for t in taskset.tasks if t.suite == "fixed" and (lock is None or t.id not in lock.tasks)]
    if unlocked:
        report.warnings.append(Problem(
            str(Path(dir) / "fixed.lock"), f"fixed tasks not locked yet: {', '.join(unlocked)}; "
            f"run `evalrig lock --tasks {dir}` (the fixed suite only grows once locked)"))


def check_policies(path: Path, report: Report) -> None:
    """A policy file, or every `*.toml` of a directory."""
    from evalrig.store.policy import load_policy

    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix == ".toml" and not p.name.startswith("."))
        if not files:
            report.warnings.append(Problem(str(path), "no *.toml policy files here"))
    elif path.exists():
        files = [path]
    else:
        report.problems.append(Problem(str(path), "no such file or directory (expected policies)"))
        return
    seen: dict[tuple[str, int], Any] = {}
    for f in files:
        try:
            policy = load_policy(f)  # read once: the name check below uses it too
        except EvalrigError as e:
            report.problems += error_problems(e)
            continue
        report.count("policies")
        report.problems += _same_name_and_version(policy, seen)
        report.warnings += _gives_up(policy)


def _gives_up(p: Any) -> list[Problem]:
    """A policy that validates but waives a protection: a warning naming what it gives up."""
    out = []
    if not p.spec.invariants.checks:
        out.append(Problem(str(p.path), "lists no invariants: nothing blocks a candidate that was not sealed, "
                           "not isolated, leaked the canary, ran on stale fresh tasks or broke its bundle "
                           "(list the checks, as policies/default.toml does)", "invariants.checks"))
    if p.spec.fresh.min_tasks == 0:
        out.append(Problem(str(p.path), "min_tasks = 0: no floor on the fresh suite's size: the rules that "
                           "promote apply to a suite of any size, and an exception promotes on no fresh task "
                           "at all (the default asks for 20)",
                           "fresh.min_tasks"))
    return out


def _same_name_and_version(p: Any, seen: dict[tuple[str, int], Any]) -> list[Problem]:
    """Decisions are named <name>-v<version>: two different policies under one name and
    version (rules edited without a new version) would make one decision name mean two rule sets."""
    other = seen.setdefault((p.name, p.version), p)
    if other is p or other.digest == p.digest:
        return []
    return [Problem(str(p.path), f"policy {p.name!r} version {p.version} is also {other.path} "
                                 "with other rules; give the edited policy a new version", "version")]


def check_checkpoint(dir: Path, home: Path, report: Report, prefixes: Sequence[Path] = ()) -> None:
    """The checkpoint loads, its commands resolve where `run` would let them run (inside the
    checkpoint, the system directories or the operator's `prefixes`), and its seal holds."""
    from evalrig.store.checkpoint import history_log, load_checkpoint, resolve_commands, seal_status

    try:
        ckpt = load_checkpoint(dir)
        history_log(ckpt)
        resolve_commands(ckpt, [Path(p).resolve() for p in prefixes])
        status = seal_status(dir, home)
    except EvalrigError as e:
        report.problems += error_problems(e)
        return
    report.count("checkpoints")
    from evalrig.store.gateway import gateway_var_problems

    report.problems += gateway_var_problems(ckpt)
    if status.entry is not None:
        if status.matched == 1:
            report.warnings.append(Problem(
                str(dir), f"sealed as {status.entry.checkpoint_id} under hash version 1, which does not "
                f"cover folders or mode bits; run `evalrig seal {dir}` to record its version-2 id (it keeps "
                "its id: docs/checkpoint.md, \"Sealing and what it covers\")"))
        return
    if status.changed:
        report.problems.append(Problem(
            str(dir), f"changed since it was sealed as {status.claimed} (its content is now "
            f"{status.current}); restore it, or seal the new content as a new checkpoint"))
    else:
        report.warnings.append(Problem(
            str(dir), f"not sealed (content {status.current}); run `evalrig seal {dir}` before "
            "`evalrig run`"))


# -- bundles -----------------------------------------------------------------------------

RUN_FILES = {
    ATTEMPTS_JSONL: "attempt",
    ESTIMATES_JSONL: "estimate",
    ACTUALS_JSONL: "actual",
    RESULTS_JSONL: "result",
}
RUN_JSON = {PROVENANCE: "provenance"}
COMPARISON_FILES = {COMPARISON_JSON: "comparison"}
COMPARISON_JSONL = {f"{DECISIONS}/{ISSUED}": "issued", f"{DECISIONS}/{SIGNOFFS}": "signoff"}


def _formats() -> dict[str, Any]:
    from evalrig.models import formats

    return formats()


def _validation(e: Any, model: Any, path: Path, line: int | None) -> list[Problem]:
    from evalrig.core.tomlerr import validation_problems

    return validation_problems(e, model, str(path), None, line)


def check_json(path: Path, model: Any, report: Report, required: bool = True) -> Any:
    """One JSON document against its model; the parsed value, or None."""
    from pydantic import ValidationError

    from evalrig.core.digest import loads

    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        if required:
            report.problems.append(Problem(str(path), "missing"))
        return None
    except OSError as e:
        report.problems.append(Problem(str(path), f"cannot be read ({e.strerror})"))
        return None
    try:
        obj = loads(raw)
    except ValueError as e:
        report.problems.append(Problem(str(path), f"not JSON ({e})"))
        return None
    try:
        return model.model_validate(obj)
    except ValidationError as e:
        report.problems += _validation(e, model, path, None)
        return None


def check_jsonl(path: Path, model: Any, report: Report) -> int:
    """Every line of a JSONL file against its model; a torn last line is a problem."""
    from pydantic import ValidationError

    from evalrig.core.digest import loads

    if not path.exists():
        return 0
    try:
        body, torn = whole_lines(path.read_bytes())
    except OSError as e:
        report.problems.append(Problem(str(path), f"cannot be read ({e.strerror})"))
        return 0
    good = 0
    for n, raw in enumerate(body, start=1):
        try:
            model.model_validate(loads(raw))
            good += 1
        except ValueError as e:  # ValidationError is a ValueError too
            if isinstance(e, ValidationError):
                report.problems += _validation(e, model, path, n)
            else:
                report.problems.append(Problem(str(path), f"not JSON ({e})", None, n))
    if torn is not None:
        report.problems.append(Problem(
            str(path), "torn last line (no trailing newline: a crash cut it short); "
            "`evalrig run --out BUNDLE --resume` cuts it off and runs the trial again",
            None, torn))
    return good


def _digest_problems(dir: Path, files: dict[str, str]) -> list[Problem]:
    from evalrig.store.files import sha256_file

    out = []
    for rel, want in sorted(files.items()):
        p = dir / rel
        if not p.is_file():
            out.append(Problem(str(p), "missing (listed in manifest.json files)"))
        elif (got := sha256_file(p)) != want:
            out.append(Problem(str(p), f"digest {got} differs from manifest.json's {want}"))
    return out


def check_bundle(dir: Path, report: Report) -> None:
    from evalrig.core.digest import loads

    dir = Path(dir)
    manifest_path = dir / MANIFEST
    if not dir.is_dir():
        what = "not a directory" if dir.exists() else "no such directory"
        report.problems.append(Problem(str(dir), f"{what} (expected a bundle)"))
        return
    try:
        kind = loads(manifest_path.read_bytes()).get("kind")
    except FileNotFoundError:
        report.problems.append(Problem(str(manifest_path), "missing: not a bundle the rig wrote"))
        return
    except OSError as e:  # a directory in its place, say
        report.problems.append(Problem(str(manifest_path), f"cannot be read ({e.strerror})"))
        return
    except (ValueError, AttributeError) as e:
        report.problems.append(Problem(str(manifest_path), f"not a JSON object ({e})"))
        return
    fmts = _formats()
    if kind == "run":
        _check_run(dir, fmts, report)
    elif kind == "comparison":
        _check_comparison(dir, fmts, report)
    else:
        report.problems.append(Problem(str(manifest_path), f"expected one of run, comparison (got {kind!r})",
                                       "kind"))
        return
    report.count("bundles")


def _check_run(dir: Path, fmts: dict[str, Any], report: Report) -> None:
    manifest = check_json(dir / MANIFEST, fmts["run-manifest"], report)
    for name, fmt in RUN_JSON.items():
        check_json(dir / name, fmts[fmt], report, required=False)
    for name, fmt in RUN_FILES.items():
        check_jsonl(dir / name, fmts[fmt], report)
    if manifest is None:
        return
    if manifest.status == "running":
        from evalrig.store.bundle import unfinished_state

        report.warnings.append(Problem(str(dir / MANIFEST), f"{unfinished_state(dir)} (its "
                                       "files have no digests to check until it finishes)",
                                       "status"))
        return
    report.problems += _run_digest_problems(dir)
    report.problems += _run_record_problems(dir)


def _run_record_problems(dir: Path) -> list[Problem]:
    """The manifest's status and counts against the records (the digest covers only files)."""
    from evalrig.core.errors import EvalrigError
    from evalrig.store.bundle import load_run, manifest_problems

    try:
        b = load_run(dir)
    except EvalrigError:
        return []  # a record that fails its schema was reported above, line by line
    problems: list[Problem] = manifest_problems(dir, b)
    return problems


def _run_digest_problems(dir: Path) -> list[Problem]:
    """bundle.check_run_digests: changed and missing files, and files added after the run."""
    from evalrig.store.bundle import check_run_digests

    return check_run_digests(dir)


def _check_comparison(dir: Path, fmts: dict[str, Any], report: Report) -> None:
    model = fmts.get("comparison-manifest")
    if model is None:
        report.warnings.append(Problem(str(dir / MANIFEST),
                                       "comparison bundles are not checked by this version"))
        return
    manifest = check_json(dir / MANIFEST, model, report)
    for name, fmt in COMPARISON_FILES.items():
        if fmt in fmts:
            check_json(dir / name, fmts[fmt], report)
    for name, fmt in COMPARISON_JSONL.items():
        if fmt in fmts:
            check_jsonl(dir / name, fmts[fmt], report)
    decisions = dir / DECISIONS
    if "decision" in fmts and decisions.is_dir():
        for sub in (decisions, decisions / ADVISORY):
            if sub.is_dir():
                for p in sorted(sub.glob("*.json")):
                    check_json(p, fmts["decision"], report)
    files = getattr(manifest, "files", None)
    if isinstance(files, dict):
        report.problems += _digest_problems(dir, files)


# -- everything --------------------------------------------------------------------------


def validate(
    tasks: Path | None,
    policies: Path | None,
    checkpoints: list[Path],
    bundles: list[Path],
    home: Path,
    interpreter_prefixes: Sequence[Path] = (),
) -> Report:
    report = Report()
    if tasks is not None:
        check_tasks(tasks, report)
    if policies is not None:
        check_policies(policies, report)
    for c in checkpoints:
        check_checkpoint(c, home, report, interpreter_prefixes)
    for b in bundles:
        check_bundle(b, report)
    return report


def default_targets() -> tuple[Path | None, Path | None]:
    """With no arguments: ./tasks and ./policies, where present."""
    tasks, policies = Path("tasks"), Path("policies")
    return (tasks if tasks.is_dir() else None, policies if policies.is_dir() else None)


__all__ = ["Report", "validate", "default_targets", "check_bundle", "check_jsonl"]
