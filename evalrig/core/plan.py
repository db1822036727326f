"""The plan of a run: which trials exist, their seeds and their inputs ids (docs/release-flow.md, "Resume after a crash").

Pure: values in, values out. The same task set, checkpoint and settings always give the
same trials in the same order with the same ids, so a champion run and a candidate run
pair trial by trial, and a resumed run recognises the trials it already has.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from evalrig.core.digest import canonical_json, sha256_bytes, sha256_json, sha256_parts
from evalrig.core.errors import invalid
from evalrig.models.run import VerifierIdentity

SEED_MODULUS = 2**31


class PlannedTask(Protocol):
    """What the plan needs of a loaded task (evalrig.store.tasks.LoadedTask has all of it)."""

    @property
    def id(self) -> str: ...
    @property
    def suite(self) -> str: ...
    @property
    def digest(self) -> str: ...
    @property
    def verifier_identity(self) -> VerifierIdentity: ...


@dataclass(frozen=True)
class OutcomeSettings:
    """The settings that can change an attempt's outcome: part of every inputs id."""

    timeout_scale: float
    max_retries: int
    sandbox: str  # as requested: auto | bwrap | process
    secrets: tuple[str, ...]  # names only
    interpreter_prefixes: tuple[str, ...] = ()  # --interpreter-prefix, resolved
    interpreters: tuple[tuple[str, str, str], ...] = ()  # (field, program, sha256) per command
    allow_network: bool = False  # --allow-network
    allow_hosts: tuple[str, ...] = ()  # --allow-host, normalised

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "timeout_scale": self.timeout_scale,
            "max_retries": self.max_retries,
            "sandbox": self.sandbox,
            "secrets": sorted(self.secrets),
        }
        # Only when given, so that every inputs id of a run without them stays as it was.
        if self.interpreter_prefixes:
            out["interpreter_prefixes"] = sorted(self.interpreter_prefixes)
        if self.interpreters:
            out["interpreters"] = [{"field": f, "program": p, "sha256": d}
                                   for f, p, d in sorted(self.interpreters)]
        # Only when given: a run without a network grant keeps the inputs ids it always had.
        if self.allow_network:
            out["allow_network"] = True
        if self.allow_hosts:
            out["allow_hosts"] = sorted(set(self.allow_hosts))
        return out


@dataclass(frozen=True)
class Filters:
    """`--suite`, `--task`, `--tag`: any given makes the run a subset."""

    suites: tuple[str, ...] = ()
    task_ids: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()

    @property
    def any(self) -> bool:
        return bool(self.suites or self.task_ids or self.tags)


@dataclass(frozen=True)
class Trial:
    trial_id: str
    task_id: str
    rep: int
    seed: int
    inputs_id: str


@dataclass(frozen=True)
class Plan:
    trials: tuple[Trial, ...]
    task_ids: tuple[str, ...]
    subset: bool
    digest: str

    def __len__(self) -> int:
        return len(self.trials)


def trial_seed(seed: int, task_id: str, rep: int) -> int:
    """docs/agents.md, "Its environment": first 8 bytes of sha256("<seed>:<task_id>:<rep>"), big-endian, mod 2^31."""
    h = hashlib.sha256(f"{seed}:{task_id}:{rep}".encode()).digest()
    return int.from_bytes(h[:8], "big") % SEED_MODULUS


def trial_id(task_id: str, rep: int) -> str:
    return f"{task_id}:{rep}"


def inputs_id(
    checkpoint_id: str,
    task_digest: str,
    verifier: VerifierIdentity,
    rep: int,
    seed: int,
    settings: OutcomeSettings,
) -> str:
    """The digest a kept result must still have on resume (docs/release-flow.md, "Resume after a crash").

    sha256 of the canonical JSON of `{"rep", "seed", "task": {checkpoint_id, task_digest,
    verifier, settings}}`.
    """
    return sha256_json({"rep": rep, "seed": seed,
                        "task": _task_inputs(checkpoint_id, task_digest, verifier, settings)})


def _task_inputs(checkpoint_id: str, task_digest: str, verifier: VerifierIdentity,
                 settings: OutcomeSettings) -> dict[str, Any]:
    """The part of an inputs id shared by every repetition of a task."""
    return {
        "checkpoint_id": checkpoint_id,
        "task_digest": task_digest,
        "verifier": verifier.model_dump(mode="json"),
        "settings": settings.as_dict(),
    }


def _inputs_ids(task: dict[str, Any], reps: Iterable[tuple[int, int]]) -> Iterator[str]:
    """`inputs_id` for many (rep, seed) of one task, encoding the shared part once.

    The canonical JSON of {"rep": r, "seed": s, "task": T} is, keys sorted and compact,
    exactly `{"rep":r,"seed":s,"task":` + canonical(T) + `}` (r and s are integers);
    tests/test_plan.py checks the two agree.
    """
    tail = b',"task":' + canonical_json(task) + b"}"
    for rep, seed in reps:
        yield sha256_bytes(b'{"rep":%d,"seed":%d' % (rep, seed) + tail)


def task_tags(task: PlannedTask) -> Sequence[str]:
    """A LoadedTask keeps its tags in its parsed task.toml (`spec.tags`)."""
    spec = getattr(task, "spec", None)
    return tuple(getattr(spec, "tags", None) or getattr(task, "tags", ()) or ())


def select_tasks(tasks: Sequence[PlannedTask], filters: Filters, source: Path | None = None) -> list[PlannedTask]:
    """Tasks matching every kind of filter given (any value within a kind).

    A `--task` id that names no task is an error rather than an empty match: a typo
    would otherwise silently shrink a development run. `source`, the task set's
    directory, is the file the errors name.
    """
    if not tasks:
        raise invalid("the task set has no tasks", file=source, field="--tasks",
                      hint="add task folders (<dir>/<suite>/<task-id>/task.toml), or give another --tasks")
    known = {t.id for t in tasks}
    unknown = [t for t in filters.task_ids if t not in known]
    if unknown:
        raise invalid(
            f"--task {', '.join(unknown)}: no such task in the task set",
            file=source,
            hint=unknown_task_hint(unknown, sorted(known), source),
        )
    chosen = []
    for t in tasks:
        if filters.suites and t.suite not in filters.suites:
            continue
        if filters.task_ids and t.id not in filters.task_ids:
            continue
        if filters.tags and not set(filters.tags) & set(task_tags(t)):
            continue
        chosen.append(t)
    if not chosen:
        raise invalid(
            "the filters select no task",
            file=source,
            field="--suite/--task/--tag",
            hint="loosen the filters, or drop them to run the whole task set",
        )
    return chosen


def unknown_task_hint(unknown: Sequence[str], known: Sequence[str], source: Path | None) -> str:
    """`no task 'nope'; see `evalrig tasks` (nearest: ...)`: the closest ids by spelling."""
    import difflib

    close = dict.fromkeys(c for t in unknown for c in difflib.get_close_matches(t, known, n=3, cutoff=0.5))
    listing = "evalrig tasks" + (f" --tasks {source}" if source is not None else "")
    nearest = f" (nearest: {', '.join(list(close)[:5])})" if close else ""
    return f"no task {' or '.join(repr(t) for t in unknown)}; see `{listing}`{nearest}"


def plan_digest(trials: Sequence[Trial]) -> str:
    """sha256 over one line per trial, `<trial_id> <seed> <inputs_id>\n`, in plan order.

    (Trial ids never hold spaces or newlines: task ids are [A-Za-z0-9._-]+.)
    """
    return sha256_parts(f"{t.trial_id} {t.seed} {t.inputs_id}\n".encode() for t in trials)


def build_plan(
    tasks: Iterable[PlannedTask],
    checkpoint_id: str,
    repeat: int,
    seed: int,
    settings: OutcomeSettings,
    filters: Filters = Filters(),
    source: Path | None = None,
) -> Plan:
    """Every selected task × `repeat` repetitions, in task-id then repetition order."""
    if repeat < 1:
        raise invalid(f"--repeat {repeat}: must be at least 1", field="--repeat")
    ordered = sorted(tasks, key=lambda t: t.id)
    chosen = select_tasks(ordered, filters, source)
    trials = []
    for task in chosen:
        seeds = [trial_seed(seed, task.id, rep) for rep in range(repeat)]
        base = _task_inputs(checkpoint_id, task.digest, task.verifier_identity, settings)
        ids = _inputs_ids(base, enumerate(seeds))
        for rep, (s, iid) in enumerate(zip(seeds, ids, strict=True)):
            trials.append(Trial(trial_id=trial_id(task.id, rep), task_id=task.id, rep=rep,
                                seed=s, inputs_id=iid))
    digest = plan_digest(trials)
    return Plan(tuple(trials), tuple(t.id for t in chosen), filters.any, digest)
