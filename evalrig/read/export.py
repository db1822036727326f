"""`export` (docs/reading.md): certified attempts out of the rig, as training data
(trajectories, preference pairs) or for CI and spreadsheets (JUnit XML, CSV).

Only a bundle that verifies is exported (exit 4 otherwise: exported data must be
certified); by default only fresh tasks (fixed, invariant and public tasks are the veto,
the tripwires and the outside evidence: training on them hollows them out); and every
export is recorded in the home's `exports.jsonl`, so that no gate takes its tasks as fresh
again. Record files are streamed; the output is written beside its name and renamed.
"""

from __future__ import annotations

import csv
import itertools
import os
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import orjson

from evalrig.core.errors import invalid
from evalrig.models.inputs import Suite
from evalrig.models.reading import ExportedBundle, ExportEntry, ExportFormat
from evalrig.models.run import SCORED, RoleSpend, Spend
from evalrig.read.bundle import (
    ACTUAL_KEYS,
    RESULT_KEYS,
    Opened,
    Tasks,
    check_whole,
    lines,
    linked,
    load_tasks,
    open_bundle,
)
from evalrig.read.text import decode
from evalrig.store import layout
from evalrig.store.bundle import bundle_digest
from evalrig.store.exports import record_export
from evalrig.store.files import read_answer
from evalrig.store.tasks import content_digest

FORMATS: tuple[ExportFormat, ...] = ("trajectories", "pairs", "junit", "csv")


@dataclass
class Source:
    """One verified run bundle and what the export takes from it."""

    b: Opened
    digest: str
    tasks: Tasks
    final: set[str]
    """attempt ids of the final scored attempts (the ones that count)."""
    prompts: dict[str, str] = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        assert self.b.run is not None
        return self.b.run.run_id


@dataclass(frozen=True)
class ExportResult:
    to: Path
    records: int
    tasks: int
    entry: ExportEntry


def _open(dir: Path, tasks_dir: Path | None) -> Source:
    b = open_bundle(dir)
    if b.kind != "run" or b.run is None:
        raise invalid("is a comparison bundle; export takes run bundles", file=dir,
                      hint="give the run bundles the comparison names (its manifest.json lists them)")
    problems = check_whole(b.dir)
    if problems:
        raise invalid(f"fails verification: {problems[0].render()}", file=dir, problems=problems[1:21],
                      hint="exported data must be certified: export only a bundle that verifies "
                      "(`evalrig verify BUNDLE` lists every problem)")
    latest: dict[str, str] = {}
    scored: dict[tuple[str, str], str] = {}
    for _, d in lines(b, layout.RESULTS_JSONL, RESULT_KEYS):
        latest[d["trial_id"]] = d["inputs_id"]
        if d.get("status") in SCORED:
            scored[(d["trial_id"], d["inputs_id"])] = d["attempt_id"]
    final = {a for (t, i), a in scored.items() if latest[t] == i}
    return Source(b, bundle_digest(b.files), load_tasks(b.run, tasks_dir), final)


def export(bundles: list[Path], fmt: ExportFormat, to: Path, home: Path, now: datetime,
           min_reward: float | None = None, suites: list[str] | None = None,
           tasks_dir: Path | None = None) -> ExportResult:
    """Write the export and record it in the home; exit 4 for a bundle that does not verify."""
    sources: dict[str, Source] = {}
    for path in bundles:
        s = _open(path, tasks_dir)
        sources.setdefault(s.digest, s)  # the same bundle twice is read once
    wanted: list[Suite] = sorted(set(suites or ["fresh"]))  # type: ignore[arg-type]
    for s in sources.values():
        if to.resolve().is_relative_to(s.b.dir.resolve()):
            raise invalid("is inside a bundle being exported", file=to,
                          hint="write the export outside every bundle: a file added to a bundle fails its verification")
    # pairs: R bounds the chosen attempt only; a pair's rejected side is below it by definition
    rows = Rows(list(sources.values()), wanted, None if fmt == "pairs" else min_reward)
    tmp = to.with_name(f".{to.name}.tmp.{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            n = (write_junit(rows, f, wanted) if fmt == "junit" else write_pairs(rows, f, min_reward)
                 if fmt == "pairs" else WRITERS[fmt](rows, f))
        os.replace(tmp, to)
    except OSError as e:
        raise invalid(f"cannot be written: {e.strerror or e}", file=to,
                      hint="give --to a file in a directory you may write") from None
    finally:
        tmp.unlink(missing_ok=True)
    entry = ExportEntry(
        format=fmt, to=str(to),
        bundles=[ExportedBundle(run_id=s.run_id, bundle_digest=s.digest,
                                checkpoint_id=s.b.run.checkpoint.id) for s in sources.values() if s.b.run],
        suites=wanted, tasks=sorted(rows.exported), content=sorted({c for c in rows.exported.values() if c}),
        records=n, at=now)
    record_export(home, entry)
    return ExportResult(to, n, len(rows.exported), entry)


def _scored(s: Source, suites: list[Suite], min_reward: float | None) -> Iterator[dict[str, Any]]:
    """The final scored attempts of the suites (the ones that count)."""
    return (d for d in _attempts(s, suites, min_reward) if d["attempt_id"] in s.final)


def _attempts(s: Source, suites: list[Suite], min_reward: float | None) -> Iterator[dict[str, Any]]:
    for _, d in lines(s.b, layout.RESULTS_JSONL, RESULT_KEYS):
        if d.get("suite") in suites and (
                min_reward is None or (d.get("reward") is not None and d["reward"] >= min_reward)):
            yield d


def _content(s: Source, d: dict[str, Any]) -> str | None:
    """The task's content digest: the manifest's for a fresh task, the task set's otherwise
    (when it is there and is the task the run judged with)."""
    assert s.b.run is not None
    fresh = s.b.run.taskset.fresh_content.get(d["task_id"])
    if fresh is not None:
        return fresh
    task, _ = s.tasks.checked(s.b.run, d["task_id"], d.get("verifier"))
    return content_digest(task) if task is not None else None


# -- the chat messages of an attempt -----------------------------------------------------


@dataclass(frozen=True)
class Chat:
    messages: list[dict[str, Any]]
    tools: list[Any]
    prefixes: dict[str, int]
    """A frame's `prefix` digest -> how many messages came before that frame."""


def chat_of(s: Source, d: dict[str, Any]) -> Chat:
    aid = d["attempt_id"]
    evidence = s.b.dir / layout.ATTEMPTS_DIR / aid
    for rel in (f"{layout.ATTEMPTS_DIR}/{aid}/{layout.TRANSCRIPT}", f"{layout.ATTEMPTS_DIR}/{aid}/out"):
        if linked(s.b, rel):  # verification skips links; none is ever read
            raise invalid(f"fails verification: {s.b.problems[-1].render()}", file=s.b.dir,
                          hint="exported data must be certified: do not use this bundle")
    assert s.b.run is not None
    task, why = s.tasks.checked(s.b.run, d["task_id"], d.get("verifier"))
    if task is None:
        raise invalid(f"the prompt of task {d['task_id']} cannot be exported: {why}", file=s.b.dir,
                      hint="run bundles never hold prompts: give --tasks DIR, the task set the run used")
    prompt = s.prompts.get(task.id)
    if prompt is None:
        prompt = s.prompts[task.id] = task.prompt_path.read_text(encoding="utf-8", errors="replace")
    if (evidence / layout.TRANSCRIPT).is_file():
        # the episode as the agent saw it: its task's prompt (the file $EVALRIG_PROMPT named,
        # its instructions for the whole episode) first, as the system message
        chat = _episode(s.b, aid)
        return Chat([{"role": "system", "content": prompt}, *chat.messages], chat.tools,
                    {k: n + 1 for k, n in chat.prefixes.items()})
    answer = read_answer(evidence, layout.ANSWER_TXT)
    if answer is None:
        answer = read_answer(evidence, layout.ANSWER_JSON)
    return Chat([{"role": "user", "content": prompt},
                 {"role": "assistant", "content": decode(answer) if answer is not None else ""}], [],
                {f"prompt:{task.digest}": 1})


def _episode(b: Opened, aid: str) -> Chat:
    messages: list[dict[str, Any]] = []
    tools: list[Any] = []
    prefixes: dict[str, int] = {}
    for _, line in lines(b, f"{layout.ATTEMPTS_DIR}/{aid}/{layout.TRANSCRIPT}"):
        frame = line.get("frame")
        if not isinstance(frame, dict) or "agent" not in (line.get("from"), line.get("to")):
            continue
        kind = frame.get("type")
        if isinstance(line.get("prefix"), str):
            prefixes.setdefault(line["prefix"], len(messages))
        if kind == "session":
            tools = list(frame.get("tools") or [])
        got = frame.get("messages") if kind in ("session", "turn") else [frame.get("message")] if kind == "message" else []
        messages += [m for m in got or [] if isinstance(m, dict)]
    return Chat(messages, tools, prefixes)


def _spends(s: Source) -> dict[str, Any]:
    """attempt id -> its spend by role as actuals.jsonl records it (an episode's `spend`), or
    the candidate's figures as a tuple (single-turn attempts; kept small, one per attempt)."""
    out: dict[str, Any] = {}
    for _, a in lines(s.b, layout.ACTUALS_JSONL, ACTUAL_KEYS):
        if a["attempt_id"] in s.final:
            out[a["attempt_id"]] = a.get("spend") or (
                a.get("cost_usd"), a.get("input_tokens"), a.get("output_tokens"), a.get("usage_source"))
    return out


def _spend(v: Any) -> dict[str, Any]:
    if isinstance(v, tuple):
        return {"candidate": dict(zip(("cost_usd", "input_tokens", "output_tokens", "source"), v, strict=True)),
                "driver": None, "judge": None}
    return v if isinstance(v, dict) else {"candidate": None, "driver": None, "judge": None}


# -- the four formats --------------------------------------------------------------------


class Rows:
    """The attempts exported: each iteration streams the bundles' results again (memory does
    not hold them all), and notes each task's content digest in `exported`."""

    def __init__(self, sources: list[Source], suites: list[Suite], min_reward: float | None) -> None:
        self.sources, self.suites, self.min_reward = sources, suites, min_reward
        self.exported: dict[str, str | None] = {}

    def __iter__(self) -> Iterator[tuple[Source, dict[str, Any]]]:
        return self._noted(_scored)

    def every_attempt(self) -> Iterator[tuple[Source, dict[str, Any]]]:
        """Every attempt of the suites, superseded and unscored ones too (csv)."""
        return self._noted(_attempts)

    def _noted(self, which: Callable[[Source, list[Suite], float | None], Iterator[dict[str, Any]]],
               ) -> Iterator[tuple[Source, dict[str, Any]]]:
        for s in self.sources:
            for d in which(s, self.suites, self.min_reward):
                if d["task_id"] not in self.exported:
                    self.exported[d["task_id"]] = _content(s, d)
                yield s, d


def _line(f: IO[str], obj: Any) -> None:
    f.write(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS).decode() + "\n")


def write_trajectories(rows: Rows, f: IO[str]) -> int:
    spends = {id(s): _spends(s) for s in rows.sources}
    n = 0
    for s, d in rows:
        chat = chat_of(s, d)
        assert s.b.run is not None
        _line(f, {"task_id": d["task_id"], "suite": d["suite"], "run_id": s.run_id,
                  "checkpoint_id": s.b.run.checkpoint.id, "trial_id": d["trial_id"], "attempt_id": d["attempt_id"],
                  "messages": chat.messages, "tools": chat.tools, "status": d["status"], "reward": d.get("reward"),
                  "checks": d.get("checks") or {}, "verifier": d.get("verifier"),
                  "termination": d.get("termination"),
                  "spend": _spend(spends[id(s)].get(d["attempt_id"]))})
        n += 1
    return n


def pairs_of(chats: list[tuple[str, float, Chat]]) -> Iterator[tuple[int, int, int]]:
    """(chosen index, rejected index, shared prefix length) for every two attempts of one task
    whose rewards differ and that share a prefix (the longest shared one): never an attempt
    with itself, the higher reward chosen."""
    for i, j in itertools.combinations(range(len(chats)), 2):
        (ai, ri, ci), (aj, rj, cj) = chats[i], chats[j]
        if ai == aj or ri == rj:
            continue
        shared = [ci.prefixes[p] for p in ci.prefixes.keys() & cj.prefixes.keys() if ci.prefixes[p] == cj.prefixes[p]]
        if not shared:
            continue
        yield (i, j, max(shared)) if ri > rj else (j, i, max(shared))


def write_pairs(rows: Rows, f: IO[str], min_reward: float | None = None) -> int:
    by_task: dict[str, list[tuple[Source, dict[str, Any]]]] = defaultdict(list)
    keep = ("task_id", "suite", "attempt_id", "reward", "verifier")
    for s, d in rows:
        if d.get("reward") is not None:
            by_task[d["task_id"]].append((s, {k: d.get(k) for k in keep}))
    n = 0
    for task_id in sorted(by_task):
        group = by_task[task_id]
        chats = [(d["attempt_id"], float(d["reward"]), chat_of(s, d)) for s, d in group]
        for ci, ri, k in pairs_of(chats):
            if min_reward is not None and chats[ci][1] < min_reward:
                continue
            (sc, dc), (sr, dr) = group[ci], group[ri]
            _line(f, {"prompt": chats[ci][2].messages[:k], "chosen": chats[ci][2].messages[k:],
                      "rejected": chats[ri][2].messages[k:], "task_id": task_id, "suite": dc["suite"],
                      "chosen_attempt_id": dc["attempt_id"], "rejected_attempt_id": dr["attempt_id"],
                      "chosen_run_id": sc.run_id, "rejected_run_id": sr.run_id,
                      "chosen_reward": dc["reward"], "rejected_reward": dr["reward"]})
            n += 1
    return n


def xml_text(s: str) -> str:
    """`s` with every character XML 1.0 cannot hold replaced by U+FFFD."""
    return "".join(c if c in "\t\n\r" or 0x20 <= ord(c) <= 0xD7FF or 0xE000 <= ord(c) <= 0xFFFD
                   or 0x10000 <= ord(c) <= 0x10FFFF else "\ufffd" for c in s)


def write_junit(rows: Rows, f: IO[str], suites: list[Suite]) -> int:
    """One testcase per task of the suites (a task whose every attempt was an infrastructure
    fault included): a failure per failed trial, an error per infrastructure fault."""
    from xml.sax.saxutils import quoteattr

    cases: dict[tuple[str, str], dict[str, Any]] = {}
    for _s, d in rows:
        c = cases.setdefault((d["suite"], d["task_id"]), {"time": 0.0, "failures": []})
        if d["status"] != "passed":
            c["failures"].append(f"trial {d['trial_id']} {d['status']} (attempt {d['attempt_id']}, "
                                 f"reward {d.get('reward')})" + (f": {d['error']}" if d.get("error") else ""))
    infra: dict[tuple[str, str], list[str]] = defaultdict(list)
    walls: dict[str, float] = {}
    for s in rows.sources:
        for _, d in lines(s.b, layout.RESULTS_JSONL, RESULT_KEYS):
            if d.get("status") == "infra_error" and d["suite"] in suites:
                cases.setdefault((d["suite"], d["task_id"]), {"time": 0.0, "failures": []})
                infra[(d["suite"], d["task_id"])].append(
                    f"trial {d['trial_id']} attempt {d['attempt_id']}: {d.get('error') or 'infra_error'}")
        for _, a in lines(s.b, layout.ACTUALS_JSONL, ACTUAL_KEYS):
            walls[a["attempt_id"]] = float(a.get("wall_s") or 0.0)
    for _s, d in rows:
        cases[(d["suite"], d["task_id"])]["time"] += walls.get(d["attempt_id"], 0.0)
    q = lambda x: quoteattr(xml_text(x))  # noqa: E731
    f.write('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites name="evalrig">\n')
    for suite, group in itertools.groupby(sorted(cases), key=lambda k: k[0]):
        keys = list(group)
        fails = sum(bool(cases[k]["failures"]) for k in keys)
        errs = sum(bool(infra[k]) for k in keys)
        total = sum(cases[k]["time"] for k in keys)
        f.write(f"  <testsuite name={q(suite)} tests=\"{len(keys)}\" failures=\"{fails}\" errors=\"{errs}\" "
                f"time=\"{total:.3f}\">\n")
        for k in keys:
            c = cases[k]
            f.write(f"    <testcase classname={q(suite)} name={q(k[1])} time=\"{c['time']:.3f}\"")
            body = [f"      <failure message={q(m)} type=\"failed\"/>\n" for m in c["failures"]]
            body += [f"      <error message={q(m)} type=\"infra_error\"/>\n" for m in infra[k]]
            f.write(">\n" + "".join(body) + "    </testcase>\n" if body else "/>\n")
        f.write("  </testsuite>\n")
    f.write("</testsuites>\n")
    return len(cases)


LEADING = ["run_id", "task_id", "suite", "trial_id", "rep", "attempt", "attempt_id", "status", "passed", "reward"]


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out |= _flat(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, dict)):
        return orjson.dumps(v, option=orjson.OPT_SORT_KEYS).decode()
    return str(v)


# Every role's spend in its own columns, null or not, so that a script finds
# `spend.candidate.cost_usd` in any export (docs/reading.md, "csv").
NO_SPEND: dict[str, Any] = {"spend": {role: dict.fromkeys(RoleSpend.model_fields) for role in Spend.model_fields}}


def write_csv(rows: Rows, f: IO[str]) -> int:
    """One row per attempt of the suites (superseded and unscored attempts too: a table of
    what ran; `final` says which attempt counts), the result's keys and the actual's,
    flattened with dots, the leading columns first and the rest sorted, so the header is
    stable."""
    actuals: dict[str, dict[str, Any]] = {}
    for s in rows.sources:
        for _, a in lines(s.b, layout.ACTUALS_JSONL, ACTUAL_KEYS):
            spend = {role: v for role, v in (a.get("spend") or {}).items() if v}
            actuals[a["attempt_id"]] = _flat(a | {"spend": NO_SPEND["spend"] | spend})
    keys: set[str] = set(_flat(NO_SPEND))
    for _s, d in rows.every_attempt():  # a first pass for the columns, a second for the rows
        keys |= _flat(d).keys() | actuals.get(d["attempt_id"], {}).keys()
    keys |= {"run_id", "final"}
    columns = [c for c in LEADING if c in keys] + sorted(keys - set(LEADING))
    w = csv.writer(f, lineterminator="\n")
    w.writerow(columns)
    n = 0
    for s, d in rows.every_attempt():
        merged = actuals.get(d["attempt_id"], {}) | {"run_id": s.run_id, "final": d["attempt_id"] in s.final} | _flat(d)
        w.writerow([_cell(merged.get(c)) for c in columns])
        n += 1
    return n


WRITERS = {"trajectories": write_trajectories, "csv": write_csv}
