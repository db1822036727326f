"""`show BUNDLE [ID]` as data (docs/reading.md): each view is one JSON-able dict, which
`--json` prints as it is and `render` lays out for a person. Record files are streamed;
untrusted text is escaped here, once, so that no renderer can forget it."""

from __future__ import annotations

import difflib
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import orjson

from evalrig.core.errors import EvalrigError, invalid
from evalrig.core.untrusted import escaped
from evalrig.models.run import SCORED
from evalrig.read.bundle import (
    ACTUAL_KEYS,
    RESULT_KEYS,
    SIDES,
    Opened,
    check_attempt,
    check_files,
    compared_run,
    lines,
    linked,
    load_tags,
    load_tasks,
    not_compared,
)
from evalrig.read.text import decode, short, tail, untrusted
from evalrig.store import layout
from evalrig.store.files import read_answer, sha256_file
from evalrig.store.invocation import command_name

LONG = 80
"""Expected or got longer than this (or on several lines): a short diff is shown too."""
DIFF_LINES = 20


def show(dir: Path, id: str | None, tasks_dir: Path | None = None) -> dict[str, Any]:
    from evalrig.read.bundle import open_bundle

    b = open_bundle(dir)
    if b.kind == "comparison":
        return show_comparison(b, id, tasks_dir)
    if id is None:
        return run_summary(b, tasks_dir)
    return show_id(b, id, tasks_dir)


# -- a run bundle's summary ----------------------------------------------------------------


Row = tuple[str, str, str, int, str, str, "float | None", "str | None"]
"""(trial_id, task_id, suite, rep, attempt_id, status, reward, error): a result line kept for
a summary; small, since a summary holds one per trial."""


def _final_rows(b: Opened) -> tuple[dict[str, tuple[Row, bool]], Counter[str], int]:
    """trial_id -> (the row that counts, whether it is scored): the rule of docs/attempts.md
    "Resume" (the last scored attempt with the trial's latest inputs; a trial without one
    shows its last attempt, unscored), attempts per status, and result lines.

    What a summary holds is one small entry per trial, so it is kept small: inputs ids by
    their hash (compared only among one trial's), a passed row shared by its task (only a
    failing one is shown), and a scored row of other inputs set aside only when a later
    one replaces it (a task changed and changed back), so that the rule holds exactly."""
    # trial -> (latest inputs, last row, last scored inputs, last scored row)
    state: dict[str, tuple[int, Row, int | None, Row | None]] = {}
    older: dict[tuple[str, int], Row] = {}
    passed: dict[tuple[str, str], Row] = {}
    statuses: Counter[str] = Counter()
    intern = sys.intern
    n = 0
    for _, d in lines(b, layout.RESULTS_JSONL, RESULT_KEYS):
        n += 1
        t, status, inputs = d["trial_id"], intern(d["status"]), hash(d["inputs_id"])
        statuses[status] += 1
        task_id, suite = intern(d["task_id"]), intern(d["suite"])
        row: Row
        if status == "passed":
            row = passed.get((task_id, suite)) or passed.setdefault(
                (task_id, suite), ("", task_id, suite, 0, "", status, 1.0, None))
        else:
            rep, err = d.get("rep"), d.get("error")
            row = (t, task_id, suite, rep if type(rep) is int else 0, d["attempt_id"], status, d.get("reward"),
                   short(err) if isinstance(err, str) else None)
        before = state.get(t)
        s_inputs, s_row = (before[2], before[3]) if before is not None else (None, None)
        if status in SCORED:
            if s_row is not None and s_inputs != inputs:
                older[(t, s_inputs)] = s_row  # type: ignore[index]
            s_inputs, s_row = inputs, row
        state[t] = (inputs, row, s_inputs, s_row)
    final: dict[str, tuple[Row, bool]] = {}
    for t, (latest, last, s_inputs, s_row) in state.items():
        counted = s_row if s_row is not None and s_inputs == latest else older.get((t, latest))
        final[t] = (counted, True) if counted is not None else (last, False)
    return final, statuses, n


def run_summary(b: Opened, tasks_dir: Path | None) -> dict[str, Any]:
    m = b.run
    assert m is not None
    check_files(b, [layout.RESULTS_JSONL, layout.ACTUALS_JSONL])
    final, statuses, n = _final_rows(b)
    tags, tags_note = load_tags(m, tasks_dir, {row[1]: row[2] for row, _ in final.values()})
    by_suite: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    by_tag: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    per_task: dict[str, list[Any]] = {}  # task id -> [suite, trials, passed, first failing row]
    scored_n = passed_n = 0
    for row, is_scored in final.values():
        trial_id, task_id, suite, rep, aid, status, reward, error = row
        ok = is_scored and status == "passed"
        t = per_task.setdefault(task_id, [suite, 0, 0, None])
        t[1] += 1
        t[2] += ok
        if not ok and (t[3] is None or (rep, trial_id) < (t[3][3], t[3][0])):
            t[3] = row
        if is_scored:
            scored_n += 1
            passed_n += ok
            by_suite[suite][0] += 1
            by_suite[suite][1] += ok
            for tag in tags.get(task_id, ()):
                by_tag[tag][0] += 1
                by_tag[tag][1] += ok
    cost = wall = cpu = 0.0
    costs_missing = 0
    for _, a in lines(b, layout.ACTUALS_JSONL, ACTUAL_KEYS):
        wall += a.get("wall_s") or 0.0
        cpu += a.get("cpu_s") or 0.0
        if a.get("cost_usd") is None:
            costs_missing += 1
        else:
            cost += a["cost_usd"]
    ordered = [{"task_id": tid, "suite": t[0], "trials": t[1], "passed": t[2], "first_failing": _failing(t[3])}
               for tid, t in sorted(per_task.items(), key=lambda kv: (kv[1][2] == kv[1][1], kv[1][2] / kv[1][1],
                                                                      kv[0]))]
    errors = {s: statuses[s] for s in ("agent_error", "timeout", "infra_error", "interrupted") if statuses[s]}
    return {
        "kind": "run", "bundle": str(b.dir), "run_id": m.run_id,
        "checkpoint": {"id": m.checkpoint.id, "name": untrusted(m.checkpoint.name, newlines=False)},
        "status": m.status, "repeat": m.repeat, "integrity": b.integrity(),
        "counts": {"trials": len(final), "scored": scored_n, "passed": passed_n,
                   "attempts": n, "by_status": dict(sorted(statuses.items()))},
        "by_suite": {s: _rate(*v) for s, v in sorted(by_suite.items())},
        "by_tag": {escaped(s): _rate(*v) for s, v in sorted(by_tag.items())},
        "tags_note": tags_note,
        "errors": errors,
        "cost_usd": round(cost, 6), "cost_missing": costs_missing,
        "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
        "tasks": ordered,
    }


def _failing(row: Row | None) -> dict[str, Any] | None:
    if row is None:
        return None
    trial_id, _, _, _, aid, status, reward, error = row
    return {"trial_id": trial_id, "attempt_id": aid, "status": status, "reward": reward, "error": error}


def _rate(trials: int, passed: int) -> dict[str, Any]:
    return {"trials": trials, "passed": passed, "pass_rate": round(passed / trials, 4) if trials else None}


# -- ids within a run bundle ---------------------------------------------------------------


def show_id(b: Opened, id: str, tasks_dir: Path | None) -> dict[str, Any]:
    """A task id, a trial id (`task:rep`) or an attempt id; exit 4 naming the nearest ids."""
    check_files(b, [layout.RESULTS_JSONL, layout.ACTUALS_JSONL])
    results = [d for _, d in lines(b, layout.RESULTS_JSONL, RESULT_KEYS)
               if id in (d.get("task_id"), d.get("trial_id"), d.get("attempt_id"))]
    if not results:
        raise _unknown(b, id)
    actuals = {d["attempt_id"]: d for _, d in lines(b, layout.ACTUALS_JSONL, ACTUAL_KEYS)
               if id in (d.get("task_id"), d.get("trial_id"), d.get("attempt_id"))}
    if results[0].get("attempt_id") == id:
        return show_attempt(b, results[0], actuals.get(id))
    return show_task(b, id, results, actuals, tasks_dir, trial=results[0].get("trial_id") == id)


def _unknown(b: Opened, id: str) -> Exception:
    ids: set[str] = set()
    for _, d in lines(b, layout.RESULTS_JSONL, RESULT_KEYS):
        ids.update(str(d.get(k)) for k in ("task_id", "trial_id", "attempt_id"))
    near = difflib.get_close_matches(id, sorted(ids), n=5, cutoff=0.5)
    return invalid(f"no task, trial or attempt {untrusted(id, newlines=False)!r} in this run bundle"
                   + (f"; the nearest: {', '.join(near)}" if near else ""), file=b.dir,
                   hint=f"`{command_name()} show BUNDLE` lists the tasks; a trial id is TASK:REP, an attempt id "
                   "names a folder under attempts/")


def show_task(b: Opened, id: str, results: list[dict[str, Any]], actuals: dict[str, dict[str, Any]],
              tasks_dir: Path | None, trial: bool) -> dict[str, Any]:
    from evalrig.store.layout import ANSWER_JSON, ANSWER_TXT

    m = b.run
    assert m is not None
    first = results[0]
    task_id = first["task_id"]
    verifier = first.get("verifier") or {}
    task, note = load_tasks(m, tasks_dir).checked(m, task_id, verifier)
    spec = task.spec.verifier if task is not None else None
    expected: Any = None
    if spec is not None and spec.kind in ("exact", "regex", "json"):
        expected = spec.pattern if spec.kind == "regex" else spec.expected  # type: ignore[union-attr]
    rows = []
    for d in results:
        aid = d["attempt_id"]
        a = actuals.get(aid, {})
        row = {"trial_id": d.get("trial_id"), "attempt_id": aid, "attempt": d.get("attempt"),
               "rep": d.get("rep"), "status": d.get("status"), "reward": d.get("reward"),
               "checks": _checks(d), "wall_s": a.get("wall_s"), "cost_usd": a.get("cost_usd"),
               "termination": d.get("termination"),
               "error": untrusted(d.get("error"))}
        evidence = b.dir / layout.ATTEMPTS_DIR / str(aid)
        kind = verifier.get("kind")
        if kind in ("exact", "regex", "json") and not linked(b, f"{layout.ATTEMPTS_DIR}/{aid}/out"):
            check_files(b, [f"{layout.ATTEMPTS_DIR}/{aid}/{ANSWER_JSON if kind == 'json' else ANSWER_TXT}"])
            got = read_answer(evidence, ANSWER_JSON if kind == "json" else ANSWER_TXT)
            got_text = untrusted(decode(got)) if got is not None else None
            row["got"] = got_text
            if expected is not None and got_text is not None:
                row["diff"] = _diff(_as_text(expected), got_text)
        elif kind == "command":
            row["verifier_output"] = _verifier_tail(b, str(aid))
        rows.append(row)
    rows.sort(key=lambda r: (_int(r["rep"]), _int(r["attempt"])))  # by repetition, then attempt (the lines' order)
    return {"kind": "trial" if trial else "task", "bundle": str(b.dir), "id": id, "task_id": task_id,
            "suite": first.get("suite"), "verifier": verifier, "integrity": b.integrity(),
            "expected": _as_text(expected) if expected is not None else None,
            "expected_kind": spec.kind if spec is not None else None,
            "expected_note": note, "attempts": rows}


def _int(x: Any) -> int:
    return x if type(x) is int else 0


def _checks(d: dict[str, Any]) -> dict[str, Any]:
    """A result's checks, their names escaped (reward.json's keys: a verifier's words, which
    may quote the agent)."""
    return {escaped(str(k)): v for k, v in (d.get("checks") or {}).items()}


def _as_text(v: Any) -> str:
    return v if isinstance(v, str) else orjson.dumps(v, option=orjson.OPT_SORT_KEYS).decode()


def _diff(expected: str, got: str) -> list[str] | None:
    if len(expected) <= LONG and len(got) <= LONG and "\n" not in expected.strip() and "\n" not in got.strip():
        return None
    out = list(difflib.unified_diff(expected.splitlines(), got.splitlines(), "expected", "got", n=1, lineterm=""))
    return out[:DIFF_LINES] + ([f"… {len(out) - DIFF_LINES} more diff lines"] if len(out) > DIFF_LINES else [])


def _verifier_tail(b: Opened, aid: str) -> dict[str, str] | None:
    from evalrig.store.layout import VERIFIER_DIR

    root = b.dir / layout.ATTEMPTS_DIR / aid / VERIFIER_DIR
    if not root.is_dir() or linked(b, f"{layout.ATTEMPTS_DIR}/{aid}/{VERIFIER_DIR}"):
        return None
    runs = sorted((p for p in root.glob("run-*") if p.is_dir() and not p.is_symlink()), key=lambda p: p.name)
    if not runs:
        return None
    last = runs[-1]
    out = {}
    for name in (layout.STDOUT_TXT, layout.STDERR_TXT):
        rel = f"{layout.ATTEMPTS_DIR}/{aid}/{VERIFIER_DIR}/{last.name}/{name}"
        check_files(b, [rel])
        data = read_answer(last, name)
        out[name] = tail(data) if data else ""
    return {"run": last.name, **out}


# -- an attempt --------------------------------------------------------------------------


def show_attempt(b: Opened, d: dict[str, Any], actual: dict[str, Any] | None) -> dict[str, Any]:
    aid = str(d.get("attempt_id"))
    files = check_attempt(b, aid)
    root = b.dir / layout.ATTEMPTS_DIR / aid
    sizes = []
    for rel in files:
        p = root / rel
        sizes.append({"path": untrusted(rel, newlines=False), "bytes": p.stat().st_size if p.is_file() else None})
    streams = {}
    for name in (layout.STDOUT_TXT, layout.STDERR_TXT):
        data = read_answer(root, name)
        streams[name] = tail(data) if data else ""
    transcript = transcript_turns(b, aid) if layout.TRANSCRIPT in files else None
    a = actual or {}
    return {"kind": "attempt", "bundle": str(b.dir), "attempt_id": aid, "trial_id": d.get("trial_id"),
            "task_id": d.get("task_id"), "suite": d.get("suite"), "attempt": d.get("attempt"),
            "status": d.get("status"), "reward": d.get("reward"), "checks": _checks(d),
            "termination": d.get("termination"), "error": untrusted(d.get("error")),
            "wall_s": a.get("wall_s"), "cost_usd": a.get("cost_usd"), "exit_code": a.get("exit_code"),
            "integrity": b.integrity(), "files": sizes,
            "stdout_tail": streams[layout.STDOUT_TXT], "stderr_tail": streams[layout.STDERR_TXT],
            "transcript": transcript}


def transcript_turns(b: Opened, aid: str) -> list[dict[str, Any]]:
    """An episode's transcript (docs/reading.md "Episodes") frame by frame: who spoke to whom,
    the messages, each tool call with its arguments, each result (errors marked), the end.
    The rig<->driver copies of the same messages are left out, but not the driver's end."""
    out: list[dict[str, Any]] = []
    name = f"{layout.ATTEMPTS_DIR}/{aid}/{layout.TRANSCRIPT}"
    for _, line in lines(b, name):
        frame = line.get("frame")
        who, to = str(line.get("from")), str(line.get("to"))
        turn: dict[str, Any] = {"seq": line.get("seq"), "from": who, "to": to, "t_ms": line.get("t_ms")}
        if frame is None:
            turn |= {"type": "raw", "raw": short(str(line.get("raw", "")), 400),
                     "reason": untrusted(str(line.get("reason", "")), newlines=False)}
            out.append(turn)
            continue
        if not isinstance(frame, dict):
            continue
        kind = str(frame.get("type"))
        if "driver" in (who, to) and kind not in ("end", "finish"):
            continue
        turn["type"] = kind
        msgs = frame.get("messages") if kind in ("session", "turn", "reply") else (
            [frame.get("message")] if kind == "message" else [])
        turn["messages"] = [chat_message(x) for x in msgs or [] if isinstance(x, dict)]
        if kind == "session":
            turn["tools"] = [untrusted(str(((t.get("function") or t) if isinstance(t, dict) else {}).get("name")),
                                       newlines=False) for t in frame.get("tools") or []]
        for key in ("termination", "reason"):
            if key in frame:
                turn[key] = untrusted(str(frame[key]), newlines=False)
        out.append(turn)
    return out


def chat_message(m: dict[str, Any]) -> dict[str, Any]:
    content = m.get("content")
    msg: dict[str, Any] = {"role": untrusted(str(m.get("role")), newlines=False),
                           "content": untrusted(content) if isinstance(content, str) else None}
    calls = []
    for c in m.get("tool_calls") or []:
        f = c.get("function") if isinstance(c, dict) else None
        if isinstance(f, dict):
            calls.append({"id": untrusted(str(c.get("id")), newlines=False),
                          "name": untrusted(str(f.get("name")), newlines=False),
                          "arguments": untrusted(str(f.get("arguments")))})
    if calls:
        msg["tool_calls"] = calls
    if "tool_call_id" in m:
        msg["tool_call_id"] = untrusted(str(m["tool_call_id"]), newlines=False)
    if m.get("error") is True:
        msg["error"] = True
    return msg


# -- a comparison bundle -------------------------------------------------------------------


def show_comparison(b: Opened, id: str | None, tasks_dir: Path | None = None) -> dict[str, Any]:
    from evalrig.core.report import (
        rule_outcome,  # the verdict file's words; not on a run summary's path
    )
    from evalrig.models.comparison import Comparison, Decision

    m = b.comparison
    assert m is not None
    check_files(b, [layout.COMPARISON_JSON, layout.COMPARISON_MD])
    path = b.dir / layout.COMPARISON_JSON
    c = Comparison.model_validate_json(path.read_bytes()) if path.is_file() else None
    if c is None:
        raise invalid("not a comparison bundle (no comparison.json)", file=b.dir,
                      hint=f"give the --out directory of `{command_name()} compare`")
    digest = sha256_file(path)
    decisions = []
    for p in sorted((b.dir / layout.DECISIONS).glob("*.json")) + sorted(
            (b.dir / layout.DECISIONS / layout.ADVISORY).glob("*.json")):
        try:
            d = Decision.model_validate_json(p.read_bytes())
        except ValueError:
            continue
        decisions.append({"file": str(p.relative_to(b.dir)), "verdict": d.verdict, "reason": d.reason,
                          "summary": d.summary, "advisory": d.advisory,
                          "of_this_comparison": d.comparison_digest == digest,
                          "rules": [{"name": r.name, "held": r.held, "outcome": rule_outcome(r.name, r.held)[0],
                                     **_numbers(r)} for r in d.rules]})
    suites = {}
    moved = []
    for s, st in c.suites.items():
        suites[s] = {"tasks": st.tasks, "mean_d": st.mean_d, "se_d": st.se_d, "p_one_sided": st.p_one_sided,
                     "p_worse": st.p_worse, "better": st.better, "worse": st.worse, "equal": st.equal,
                     "champion_pass_rate": st.champion.pass_rate, "candidate_pass_rate": st.candidate.pass_rate}
        for r in st.per_task:
            if r.d:
                moved.append({"task_id": r.task_id, "suite": s, "d": r.d,
                              "champion": f"{r.champion_passes}/{r.champion_n}",
                              "candidate": f"{r.candidate_passes}/{r.candidate_n}"})
    moved.sort(key=lambda r: (r["d"], r["task_id"]))
    view = {"kind": "comparison", "bundle": str(b.dir), "integrity": b.integrity(),
            "champion": c.champion.model_dump(mode="json"), "candidate": c.candidate.model_dump(mode="json"),
            "repeat": c.repeat, "decisions": decisions, "suites": suites, "moved": moved}
    if id is None:
        return view
    rows = {r.task_id: (s, r) for s, st in c.suites.items() for r in st.per_task}
    if id not in rows:
        near = difflib.get_close_matches(id, sorted(rows), n=5, cutoff=0.5)
        raise invalid(f"no task {untrusted(id, newlines=False)!r} in this comparison"
                      + (f"; the nearest: {', '.join(near)}" if near else ""), file=b.dir,
                      hint="a comparison is shown by task id; show a run bundle for its trials and attempts")
    s, r = rows[id]
    return {"kind": "comparison-task", "bundle": str(b.dir), "integrity": b.integrity(), "suite": s,
            **r.model_dump(mode="json"), "sides": {side: _side_trials(m, side, id, tasks_dir) for side in SIDES}}


def _side_trials(m: Any, side: str, task_id: str, tasks_dir: Path | None) -> dict[str, Any]:
    """One side's trials of a task, read from the run bundle the comparison names (as
    `show RUN TASK` shows them), or why they are not at hand: the bundle moved, or another
    run took its place. The comparison's own numbers are shown either way."""
    from evalrig.read.bundle import open_bundle

    ref = m.champion if side == "champion" else m.candidate
    out: dict[str, Any] = {"run_id": untrusted(ref.run_id, newlines=False), "bundle": None, "note": None,
                           "trials": None}
    where, why = compared_run(m, side)
    if where is None:
        return out | {"note": untrusted(str(why), newlines=False)}  # paths and ids from a file: shown escaped
    out["bundle"] = untrusted(str(where), newlines=False)
    try:
        run = open_bundle(where)
        why = not_compared(m, side, where, run.files) if run.kind == "run" else f"{where} is not a run bundle"
        if why is None:
            out["trials"] = show_id(run, task_id, tasks_dir)
    except EvalrigError as e:
        why = f"the {side}'s run bundle at {where} cannot be shown: {e.message}"
    return out | {"note": None if why is None else untrusted(why, newlines=False)}


def _numbers(r: Any) -> dict[str, Any]:
    return {"says": r.says, "numbers": r.numbers}
