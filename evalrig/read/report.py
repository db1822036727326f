"""`evalrig report`: one self-contained HTML file for a comparison bundle, a run bundle or
the release log (docs/report.md).

The page is made for a person who signs: the verdict first, in the verdict file's words
(`evalrig.core.report`), then the rules, the suites, the plots (`evalrig.read.plots`,
matplotlib as inline SVG) and every task, with its trials, their evidence files, what
was expected beside what the agent answered, and an episode's transcript. Nothing is
fetched: the page's one script is inline and allowed by its hash in the page's
Content-Security-Policy, and every text an agent, a driver or a checkpoint wrote is
escaped (docs/security.md). A bundle that fails verification is still shown, under a
banner naming the first digest that fails: a reader never hides tampering.
"""

from __future__ import annotations

import base64
import hashlib
import html
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from evalrig.core import report as words
from evalrig.core.compare import RunRecords
from evalrig.core.digest import canonical_json, loads, sha256_bytes, short_digest
from evalrig.core.errors import EvalrigError, Problem, invalid
from evalrig.core.outcomes import final_of
from evalrig.core.stats import side_summary
from evalrig.core.untrusted import escaped, json_escaped
from evalrig.core.words import count
from evalrig.models.comparison import Comparison, ComparisonManifest, Decision, SuiteStats
from evalrig.models.run import RunManifest
from evalrig.read.bundle import compared_run, not_compared
from evalrig.read.text import tail
from evalrig.store import bundle, ledger
from evalrig.store.files import parse_json, read_head, read_json, read_regular, write_bytes_atomic
from evalrig.store.invocation import command_name, quoted
from evalrig.store.jsonl import whole_lines
from evalrig.store.layout import (
    ADVISORY,
    ATTEMPTS_DIR,
    COMPARISON_JSON,
    COMPARISON_MD,
    DECISIONS,
    MANIFEST,
    REPORT_HTML,
    STDERR_TXT,
    STDOUT_TXT,
    TRANSCRIPT,
)
from evalrig.store.lookup import run_tasks
from evalrig.store.runlines import no_gc, read_run_lines

SIDES = ("champion", "candidate")
MAX_FILES = 40
"""Evidence files listed per attempt; the rest are counted."""
MAX_TEXT = 2000
"""Characters of an answer, a message or a tool result shown in the page."""
MAX_FRAMES = 400
"""Transcript frames shown per attempt."""
ANSWERS = ("out/answer.txt", "out/answer.json")


@dataclass
class Page:
    """What the page shows, gathered before any HTML is written."""

    title: str
    kind: str
    banners: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sections: list[str] = field(default_factory=list)
    """HTML already escaped, in order."""
    data: dict[str, Any] | None = None
    """The per-task table's data (rendered in the page by its script)."""


@dataclass(frozen=True)
class Written:
    path: Path
    kind: str
    banners: list[str]
    tasks: int
    bytes: int


def esc(x: Any) -> str:
    """Text for the page: HTML-escaped, and control, format and separator characters shown
    as escapes (core/untrusted.py), so that no text on the page, the rig's or an agent's,
    carries a bidirectional override or a zero-width character; newlines are kept."""
    return html.escape(escaped("" if x is None else str(x), newlines=True), quote=True)


def _clip(text: str, n: int = MAX_TEXT) -> str:
    """Untrusted text for the page: at most n characters, control characters shown escaped
    (a terminal escape or a carriage return in an answer is seen, not obeyed)."""
    text = escaped(text, newlines=True)
    return text if len(text) <= n else text[:n] + f"… ({len(text) - n} more characters)"


# -- entry point -------------------------------------------------------------------------


def write_report(target: Path | None, out: Path | None, log: Path | None, tasks_dir: Path | None,
                 home: Path, now: datetime) -> Written:
    """Make the report of `target` (a comparison or run bundle) or of the release log `log`."""
    if log is not None:
        page = _log_page(Path(log), home)
        out = out or Path(log).with_suffix(".html")
    else:
        assert target is not None
        target = Path(target)
        kind = _kind(target)
        page = _comparison_page(target, tasks_dir, home) if kind == "comparison" else _run_page(target, tasks_dir)
        out = out or target / REPORT_HTML
    data = render(page, now)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(out, data)  # a link at --out is refused (exit 4), never followed
    except OSError as e:
        raise invalid(f"cannot be written ({e.strerror})", file=out,
                      hint="give --out a file in a folder you may write") from None
    tasks = len(page.data["tasks"]) if page.data else 0
    return Written(out, page.kind, page.banners, tasks, len(data))


def _kind(dir: Path) -> str:
    path = dir / MANIFEST
    if not path.is_file():
        raise invalid("not a bundle (no manifest.json)", file=dir,
                      hint="give a run bundle (run --out), a comparison bundle (compare --out), or --log FILE")
    try:
        kind = loads(path.read_bytes()).get("kind")
    except (OSError, ValueError, AttributeError) as e:
        raise invalid(f"cannot be read as JSON ({e})", file=path,
                      hint="the rig writes this file itself; restore the bundle") from None
    if kind not in ("run", "comparison"):
        raise invalid(f"kind {kind!r} is neither a run nor a comparison", file=path, field="kind",
                      hint="give a run bundle or a comparison bundle")
    return str(kind)


# -- reading the runs --------------------------------------------------------------------


@dataclass
class RunData:
    dir: Path
    manifest: RunManifest
    records: RunRecords
    torn: dict[str, int]
    problems: list[str]


def _read_run(dir: Path) -> RunData:
    """A run bundle's manifest and lines, and every digest that does not verify (shown, not refused)."""
    manifest = read_json(dir / MANIFEST, RunManifest)
    problems = [p.render() for p in bundle.check_run_digests(dir)]
    try:
        with no_gc():
            lines = read_run_lines(dir)
    except EvalrigError as e:  # a line that is not the rig's: shown as a problem, the rest as it is
        problems.append(Problem(e.file, e.message, e.field, e.line).render() + " (the run's lines are not shown)")
        return RunData(dir, manifest, RunRecords([], {}, {}), {}, problems)
    return RunData(dir, manifest, lines.records, lines.torn, problems)


def _torn_notes(run: RunData, who: str) -> list[str]:
    return [f"{who}{name} ends in a torn line (line {line}, from a crash): it is ignored here, as "
            "everywhere in the rig" for name, line in sorted(run.torn.items())]


class _Settings:
    """Verifier settings (expected answers, patterns) from the task set the run names, only
    while that folder still has the digest the run recorded (docs/report.md)."""

    def __init__(self, manifest: RunManifest, tasks_dir: Path | None) -> None:
        self.by_id: dict[str, dict[str, Any]] = {}
        self.note: str | None = None
        where = Path(tasks_dir) if tasks_dir is not None else Path(manifest.settings.tasks_dir)
        try:
            found = run_tasks(where, manifest.taskset.id, manifest.taskset.fresh_content)
        except (EvalrigError, OSError) as e:
            self.note = (f"Expected answers are not shown: the task set {where} cannot be read ({e}); "
                         "give it with --tasks DIR.")
            return
        # after `retire` the set differs, but a fresh task found by its digest is the run's
        known = [t for i, t in found.by_id.items() if found.known(i, manifest.taskset.fresh_content)]
        if not known:
            self.note = (f"Expected answers are not shown: the task set in {where} has the digest "
                         f"{found.taskset.id}, the run used {manifest.taskset.id} (the tasks changed since).")
            return
        for t in known:
            v = t.spec.verifier.model_dump(mode="json")
            self.by_id[t.id] = {k: v[k] for k in ("kind", "expected", "pattern", "command") if k in v}


MAX_INLINE = 4000
"""Characters of one evidence file shown inline."""
MAX_INLINE_ATTEMPT = 16000
"""Characters of evidence files shown inline per attempt (the page stays one file to open)."""
MAX_INLINE_PAGE = 4_000_000
"""Characters of evidence files and stream tails shown inline in one page: a train of many
thousand attempts lists the rest by name, and `show BUNDLE ATTEMPT` shows them."""
FAILED = frozenset({"failed", "agent_error", "timeout", "infra_error"})
"""Statuses whose trial shows the tails of the agent's stdout and stderr."""


def _file_text(path: Path, budget: int) -> tuple[int | None, str | None, str | None]:
    """(size, text shown inline or None, a note of what was cut or why nothing is shown) of an
    evidence file: the agent's bytes, read without following a link, escaped, capped."""
    head = read_head(path, min(MAX_INLINE, max(budget, 0)) * 4 + 4)
    if head is None:
        return None, None, "not a regular file: not shown"
    data, size = head
    if not size:
        return size, None, "empty"
    if budget <= 0:
        return size, None, (f"not shown inline: the page keeps {MAX_INLINE_ATTEMPT:,} characters of files per "
                            f"attempt and {MAX_INLINE_PAGE:,} in all (`show BUNDLE ATTEMPT` shows the attempt)")
    if b"\0" in data[:8192]:
        return size, None, f"binary ({size:,} bytes): not shown"
    text = data.decode("utf-8", "replace")
    if text.count("\ufffd") > max(4, len(text) // 100):
        return size, None, f"not UTF-8 text ({size:,} bytes): not shown"
    cap = min(MAX_INLINE, budget)
    shown = escaped(text[:cap], newlines=True)
    if len(text) > cap or len(data) < size:
        return size, shown, f"the first {cap:,} characters of {size:,} bytes are shown; the rest is cut"
    return size, shown, None


@dataclass
class _Budget:
    """What is left of the characters the page shows inline (MAX_INLINE_PAGE)."""

    left: int = field(default_factory=lambda: MAX_INLINE_PAGE)


def _evidence(run_dir: Path, attempt_id: str, status: str, page: _Budget) -> dict[str, Any] | None:
    """An attempt's evidence: its files (at most MAX_FILES, then a count), text files inline
    (escaped, capped, with a note of what was cut), its answer, the tails of the agent's
    stdout and stderr when the trial failed or errored, and its transcript when it is an
    episode."""
    root = run_dir / ATTEMPTS_DIR / attempt_id
    if not root.is_dir() or root.is_symlink():
        return None
    files: list[list[Any]] = []
    more = 0
    budget = min(MAX_INLINE_ATTEMPT, page.left)
    spent = budget
    for dirpath, dirs, names in os.walk(root):
        dirs.sort()
        rel = os.path.relpath(dirpath, root)
        for name in sorted(names):
            if len(files) >= MAX_FILES:
                more += 1
                continue
            rel_name = name if rel == "." else f"{rel}/{name}"
            if rel_name == TRANSCRIPT:  # shown as the transcript, message by message
                files.append([rel_name, None, None, "shown below as the transcript"])
                continue
            size, text, note = _file_text(Path(dirpath) / name, budget)
            budget -= len(text or "")
            files.append([_clip(rel_name, 300), size, text, note])  # names are the agent's
    page.left -= spent - budget
    answer = None
    for name in ANSWERS:
        got = read_head(root / name, MAX_TEXT * 4 + 4)
        if got is not None:
            answer = _clip(got[0].decode("utf-8", "replace"))
            break
    tails = None
    if status in FAILED and page.left > 0:
        tails = {}
        for name in (STDOUT_TXT, STDERR_TXT):
            data = read_regular(root / name)
            tails[name] = tail(data) if data else ""
            page.left -= len(tails[name])
    transcript = _transcript(root / TRANSCRIPT) if (root / TRANSCRIPT).is_file() else None
    return {"files": files, "more": more, "answer": answer, "tails": tails, "transcript": transcript}


def _text_of(content: Any) -> str:
    return content if isinstance(content, str) else ("" if content is None else orjson.dumps(content).decode())


class _Transcript:
    """An episode as the agent saw it (docs/report.md): each message once, tool calls with
    their results inline; the rig's hops to and from the driver (copies of the same
    messages) kept apart as raw frames."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.raw: list[list[str]] = []
        self.calls: dict[str, dict[str, Any]] = {}

    def item(self, who: str, role: str, text: str | None, flag: str = "", calls: list[Any] | None = None) -> None:
        self.items.append({"who": who, "role": role, "text": text, "flag": flag, "calls": calls or []})

    def messages(self, who: str, messages: Any) -> None:
        for m in messages if isinstance(messages, list) else []:
            if not isinstance(m, dict):
                self.item(who, "?", _clip(repr(m)), "error")
                continue
            role = str(m.get("role", "?"))
            text = _text_of(m.get("content"))
            error = m.get("error") is True
            call_id = m.get("tool_call_id")
            if role == "tool" and isinstance(call_id, str) and call_id in self.calls \
                    and "result" not in self.calls[call_id]:
                self.calls[call_id] |= {"result": _clip(text), "error": error}  # shown under its call
                continue
            if role == "tool":
                role = f"tool result {call_id or ''}".strip()
            calls = []
            for call in m.get("tool_calls") or []:
                fn = call.get("function", {}) if isinstance(call, dict) else {}
                fn = fn if isinstance(fn, dict) else {}
                c = {"id": _clip(str(call.get("id", "")) if isinstance(call, dict) else "", 200),
                     "name": _clip(str(fn.get("name", "?")), 300), "args": _clip(_text_of(fn.get("arguments")))}
                calls.append(c)
                if isinstance(call, dict) and isinstance(call.get("id"), str):
                    self.calls.setdefault(call["id"], c)
            self.item(who, role, _clip(text) if text else None, "error" if error else ("call" if calls else ""),
                      calls)


def _transcript(path: Path) -> dict[str, Any]:
    """An episode turn by turn (docs/report.md): who spoke, each message once as the agent saw
    it, each tool call with its arguments and its result (errors marked), the termination;
    the frames between the rig and the driver apart, as raw frames."""
    t = _Transcript()
    try:
        data = path.read_bytes()
    except OSError as e:
        t.item("rig", "unreadable", f"{TRANSCRIPT} cannot be read ({e.strerror})", "error")
        return {"items": t.items, "raw": t.raw}
    lines, torn = whole_lines(data)
    for raw in lines[:MAX_FRAMES]:
        try:
            rec = loads(raw)
        except ValueError:
            t.item("?", "not JSON", _clip(raw.decode("utf-8", "replace")), "error")
            continue
        if not isinstance(rec, dict):
            continue
        ends = (str(rec.get("from", "?")), str(rec.get("to", "?")))
        who = _clip(f"{ends[0]} → {ends[1]}", 200)
        frame = rec.get("frame")
        reason = rec.get("reason") if isinstance(rec.get("reason"), str) else None
        if not isinstance(frame, dict):
            why = f" ({reason})" if reason else ""
            t.item(who, "not a frame" + _clip(why, 300), _clip(str(rec.get("raw", frame))), "error")
            continue
        kind = frame.get("type")
        if "driver" in ends:  # the rig's hop to or from the driver: the same messages again
            t.raw.append([who, _clip(str(kind), 100), _clip(orjson.dumps(frame).decode())])
            if kind == "end" or reason:  # why the episode ended is the agent's story too
                t.item(who, str(kind), _clip(str(frame.get("reason") or frame.get("termination") or "")), "end")
            if reason:
                t.item(who, "not relayed", _clip(reason), "error")
            continue
        if kind in ("session", "turn", "reply"):
            t.messages(who, frame.get("messages"))
        elif kind == "message":
            t.messages(who, [frame.get("message")])
        elif kind in ("end", "finish"):
            t.item(who, str(kind), _clip(str(frame.get("termination") or frame.get("reason") or "")), "end")
        elif kind != "start":
            t.item(who, _clip(str(kind), 100), _clip(orjson.dumps(frame).decode()))
        if reason:  # a frame that ended the episode or broke a rule: not relayed
            t.item(who, "not relayed", _clip(reason), "error")
    if len(lines) > MAX_FRAMES:
        t.item("rig", "…", f"{len(lines) - MAX_FRAMES} more frames in {TRANSCRIPT}")
    if torn is not None:
        t.item("rig", "torn", f"line {torn} is torn (the episode was cut off)", "error")
    return {"items": t.items, "raw": t.raw}


def _trials(run: RunData, side: str, page: _Budget) -> dict[str, list[list[Any]]]:
    """task id -> its attempts as rows [side, rep, attempt_id, status, reward, wall_s, cost,
    counts, evidence]; `counts` marks the attempt that counts for its trial, `evidence` is
    _evidence's (or None)."""
    final = {r.attempt_id for r in final_of(run.records.results).values()}
    out: dict[str, list[list[Any]]] = defaultdict(list)
    has_evidence = (run.dir / ATTEMPTS_DIR).is_dir()
    for r in run.records.results:
        a = run.records.actuals.get(r.attempt_id)
        evidence = _evidence(run.dir, r.attempt_id, r.status, page) if has_evidence else None
        out[r.task_id].append([side, r.rep, r.attempt_id, r.status, r.reward, a.wall_s if a else None,
                               a.cost_usd if a else None, 1 if r.attempt_id in final else 0, evidence])
    for rows in out.values():
        rows.sort(key=lambda a: (a[1], a[7]))  # by repetition, the attempt that counts last
    return out


def _calibration_pairs(run: RunData) -> list[tuple[float, bool]]:
    """(p_success, passed) of every final scored attempt with a valid estimate."""
    out = []
    for r in final_of(run.records.results).values():
        e = run.records.estimates.get(r.attempt_id)
        if e is not None and e.state == "valid" and e.p_success is not None and r.passed is not None:
            out.append((float(e.p_success), bool(r.passed)))
    return out


# -- a comparison bundle -----------------------------------------------------------------


def _check_comparison(dir: Path) -> tuple[Comparison, ComparisonManifest, list[str]]:
    """The comparison and its manifest, and every digest of the bundle that does not verify."""
    manifest = read_json(dir / MANIFEST, ComparisonManifest)
    problems = []
    for name in (COMPARISON_JSON, COMPARISON_MD):
        path = dir / name
        want = manifest.files.get(name)
        try:
            got = sha256_bytes(path.read_bytes())
        except OSError:
            problems.append(f"{path}: missing (listed in manifest.json files)")
            continue
        if got != want:
            problems.append(f"{path}: digest {got} differs from manifest.json's {want}")
    path = dir / COMPARISON_JSON
    try:
        data = path.read_bytes()
    except OSError as e:
        raise invalid(f"cannot be read ({e.strerror})", file=path,
                      hint=f"give the --out directory of `{command_name()} compare`") from None
    return parse_json(path, data, Comparison), manifest, problems


def _decisions(dir: Path, comparison_digest: str) -> tuple[list[tuple[Path, Decision]], list[str]]:
    """The bundle's decisions, the latest issued last, and the digests that do not verify:
    a decision no gate issued as it reads, or one made on another comparison."""
    found: list[tuple[float, Path, Decision]] = []
    problems: list[str] = []
    for folder in (dir / DECISIONS, dir / DECISIONS / ADVISORY):
        if not folder.is_dir():
            continue
        issued = ledger.issued(folder) if (folder / "issued.jsonl").is_file() else []
        order = {i.decision_file: n for n, i in enumerate(issued)}
        digests = {i.decision_digest for i in issued}
        for path in sorted(folder.glob("*.json")):
            data = path.read_bytes()
            try:
                d = parse_json(path, data, Decision)
            except EvalrigError as e:
                problems.append(f"{path}: {e.message}")
                continue
            digest = sha256_bytes(data)
            if digest not in digests:
                problems.append(f"{path}: digest {digest} is in no line of {folder / 'issued.jsonl'} "
                                "(edited after the gate, or not written by one)")
            if d.comparison_digest != comparison_digest:
                problems.append(f"{path}: made on the comparison {d.comparison_digest}, and comparison.json "
                                f"is now {comparison_digest}")
            found.append((-1 if d.advisory else order.get(path.name, -1), path, d))
    found.sort(key=lambda x: (not x[2].advisory, x[0], x[1].name))
    return [(p, d) for _, p, d in found], problems


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _runs(dir: Path, manifest: ComparisonManifest) -> tuple[dict[str, RunData], list[str], list[str]]:
    """The two run bundles where compare recorded them: those found, the notes on those
    moved, and the digests that do not verify."""
    found: dict[str, RunData] = {}
    notes: list[str] = []
    problems: list[str] = []
    for side in SIDES:
        path, why = compared_run(manifest, side)
        if path is None:
            notes.append(f"{_capital(str(why))}. Its trials, evidence and calibration are left out; the numbers "
                         "below are the comparison's own.")
            continue
        try:
            run = _read_run(path)
        except EvalrigError as e:
            notes.append(f"The {side}'s run bundle at {path} cannot be read ({e.message}); its trials are left out.")
            continue
        other = not_compared(manifest, side, path, dict(run.manifest.files))
        if other is not None:
            notes.append(f"{_capital(other)}; its trials are left out.")
            continue
        problems += run.problems
        notes += _torn_notes(run, f"the {side}'s ")
        found[side] = run
    return found, notes, problems


def _banner(problems: Sequence[str]) -> str | None:
    if not problems:
        return None
    more = f" ({count(len(problems) - 1, 'more problem')} below)" if len(problems) > 1 else ""
    return f"This bundle does not verify. First digest that fails: {problems[0]}{more}"


def _comparison_page(dir: Path, tasks_dir: Path | None, home: Path) -> Page:
    comparison, manifest, problems = _check_comparison(dir)
    comparison_digest = sha256_bytes((dir / COMPARISON_JSON).read_bytes())
    decisions, d_problems = _decisions(dir, comparison_digest)
    runs, run_notes, run_problems = _runs(dir, manifest)
    problems += d_problems + run_problems
    page = Page(title=f"Comparison {short_digest(comparison_digest)}", kind="comparison")
    if (b := _banner(problems)) is not None:
        page.banners.append(b)
    page.notes += run_notes
    page.sections.append(_verdict_section(dir, decisions, home))
    if problems[1:]:
        page.sections.append(_list_section("Every problem found", problems))
    page.sections.append(_comparison_facts(comparison, runs))
    page.sections.append(_suite_tables(comparison))
    settings = _Settings(next(iter(runs.values())).manifest, tasks_dir) if runs else None
    if settings is not None and settings.note:
        page.notes.append(settings.note)
    page.sections.append(_comparison_plots(comparison, runs))
    page.data = _comparison_data(comparison, runs, settings)
    return page


def _signed(path: Path, d: Decision, home: Path) -> str:
    """Whether a person signed the decision, by the home's record (the one check-release
    believes), or how to sign it."""
    if d.advisory:
        return ('<p class="warn"><strong>ADVISORY</strong>: this decision applies a policy the runs did not '
                "pin; it cannot be signed.</p>")
    try:
        signoffs = ledger.home_signoffs_of(home, sha256_bytes(path.read_bytes()))
    except (EvalrigError, OSError) as e:
        return f"<p>Sign-offs cannot be read from this rig's home ({esc(e)}).</p>"
    if not signoffs:
        return (f"<p><strong>Not signed yet</strong> (in this rig's home, {esc(home)}). A person signs it: "
                f"<code>{esc(command_name())} sign {esc(quoted(path))} --approve|--reject --by NAME</code>.</p>")
    last = signoffs[-1]
    stance = "agrees with the gate" if last.agrees_with_gate else f"overrides the gate: {last.reason or ''}"
    return (f"<p><strong>Signed: {'approved' if last.action == 'approve' else 'rejected'} by {esc(last.by)}</strong> "
            f"at {esc(last.at.isoformat())} ({esc(stance)}).</p>")


def _verdict_section(dir: Path, decisions: list[tuple[Path, Decision]], home: Path) -> str:
    if not decisions:
        return (f'<section id="verdict"><h2 class="verdict pending">Not gated yet</h2><p>No decision in '
                f"{esc(dir / DECISIONS)}. <code>{esc(command_name())} gate {esc(quoted(dir))} --policy FILE</code> applies a policy "
                "and writes the verdict.</p></section>")
    path, d = decisions[-1]
    cls = {"promote": "good", "promote-maintenance": "good", "keep-champion": "neutral", "block": "bad"}[d.verdict]
    rows = []
    for r in d.rules:
        outcome, bad = words.rule_outcome(r.name, r.held)
        rows.append(f'<tr class="{"bad" if bad else "ok"}"><td><code>{esc(r.name)}</code></td>'
                    f"<td>{esc(outcome)}</td><td>{esc(r.says)}</td>"
                    f"<td>{esc(words.rule_numbers(r.model_dump()))}</td></tr>")
    change = "".join(f"<li>{esc(w)}</li>" for w in d.what_would_change) or "<li>nothing short of new evidence</li>"
    others = ""
    if len(decisions) > 1:
        others = "<p>Other decisions in this bundle: " + ", ".join(
            f"{esc(p.relative_to(dir))} ({esc(x.verdict)}{', advisory' if x.advisory else ''})"
            for p, x in decisions[:-1]) + ".</p>"
    signed = _signed(path, d, home)
    return (
        f'<section id="verdict"><h2 class="verdict {cls}">{esc(words.verdict_headline(d))}</h2>'
        f'<p class="sentence"><strong>Verdict: <code>{esc(d.verdict)}</code></strong> (reason: '
        f"<code>{esc(d.reason)}</code>). {esc(d.summary)}</p>{signed}"
        f"<p>Policy {esc(d.policy.name)} v{esc(d.policy.version)} <code>{esc(short_digest(d.policy.digest))}"
        f"</code>{', exception ' + esc(d.exception) if d.exception else ''}; decision file "
        f"<code>{esc(path.relative_to(dir))}</code>, verdict file <code>{esc(path.with_suffix('.md').relative_to(dir))}"
        f"</code> (who signed is there).</p>{others}"
        f'<h3>Rules</h3><table class="rules"><thead><tr><th>rule</th><th>outcome</th><th>what it checks</th>'
        f"<th>numbers</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
        f"<h3>What would change the answer</h3><ul>{change}</ul></section>"
    )


def _list_section(title: str, items: Iterable[str]) -> str:
    return f"<section><h2>{esc(title)}</h2><ul>" + "".join(f"<li>{esc(i)}</li>" for i in items) + "</ul></section>"


def _comparison_facts(c: Comparison, runs: Mapping[str, RunData]) -> str:
    f = c.facts
    rows = [
        ("champion", f"run {c.champion.run_id}, checkpoint {short_digest(c.champion.checkpoint_id)}"
         + (f" ({runs['champion'].manifest.checkpoint.name})" if "champion" in runs else "")),
        ("candidate", f"run {c.candidate.run_id}, checkpoint {short_digest(c.candidate.checkpoint_id)}"
         + (f" ({runs['candidate'].manifest.checkpoint.name})" if "candidate" in runs else "")),
        ("trials per task (k)", str(c.repeat)),
        ("both runs complete", words.fmt(f.both_complete)),
        ("history", f.history.message),
    ]
    return ('<section><h2>The two runs</h2><table class="facts"><tbody>'
            + "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows) + "</tbody></table></section>")


def _suite_tables(c: Comparison) -> str:
    k = c.repeat
    out = ["<section id=\"suites\"><h2>Suites</h2><div class=\"row\">"]
    for name, s in c.suites.items():
        out.append(f"<div><h3>{esc(name)} ({esc(count(s.tasks, 'task'))})</h3>")
        if s.tasks == 0:
            out.append("<p>No tasks in this suite.</p></div>")
            continue
        rows = [
            ("pass rate", words.pct(s.champion.pass_rate), words.pct(s.candidate.pass_rate)),
            ("mean reward", words.fmt(s.champion.mean_reward), words.fmt(s.candidate.mean_reward)),
            (f"pass^{k}", words.fmt(s.champion.pass_hat_k.get(str(k))), words.fmt(s.candidate.pass_hat_k.get(str(k)))),
            (f"pass@{k}", words.fmt(s.champion.pass_at_k.get(str(k))), words.fmt(s.candidate.pass_at_k.get(str(k)))),
            ("cost per task (USD)", words.fmt(s.champion.cost_per_task), words.fmt(s.candidate.cost_per_task)),
            ("wall s per task", words.fmt(s.champion.wall_s_per_task), words.fmt(s.candidate.wall_s_per_task)),
        ]
        out.append('<table class="suite"><thead><tr><th></th><th>champion</th><th>candidate</th></tr></thead><tbody>'
                   + "".join(f"<tr><th>{esc(a)}</th><td>{esc(b)}</td><td>{esc(c_)}</td></tr>" for a, b, c_ in rows)
                   + "</tbody></table>")
        stats = [
            ("mean_d", words.fmt(s.mean_d)), ("se_d", words.fmt(s.se_d)),
            ("better / worse / equal", f"{s.better} / {s.worse} / {s.equal}"),
            ("p one-sided (better)", words.fmt(s.p_one_sided)), ("p worse", words.fmt(s.p_worse)),
            ("p two-sided", words.fmt(s.p_two_sided)),
            ("t bounds (97.5 % one-sided)", "–" if s.t_bounds is None
             else f"[{words.fmt(s.t_bounds.lower)}, {words.fmt(s.t_bounds.upper)}]"),
            ("MDE (α 0.025, power 0.8)", words.fmt(s.mde.value if s.mde else None)),
        ]
        out.append('<table class="stats"><tbody>' + "".join(
            f"<tr><th>{esc(a)}</th><td>{esc(b)}</td></tr>" for a, b in stats) + "</tbody></table></div>")
    cal = c.calibration
    out.append("<div><h3>The reward channel</h3><table class=\"suite\"><thead><tr><th></th><th>champion</th>"
               "<th>candidate</th></tr></thead><tbody>"
               f"<tr><th>valid estimates</th><td>{cal['champion'].estimates}</td><td>{cal['candidate'].estimates}</td></tr>"
               f"<tr><th>Brier (p_success)</th><td>{esc(words.fmt(cal['champion'].brier))}</td>"
               f"<td>{esc(words.fmt(cal['candidate'].brier))}</td></tr></tbody></table></div>")
    out.append("</div></section>")
    return "".join(out)


def _suite_pass_k(s: SuiteStats) -> dict[str, tuple[Mapping[str, float | None], Mapping[str, float | None]]]:
    return {side: (getattr(s, side).pass_hat_k, getattr(s, side).pass_at_k) for side in SIDES}


def _plots_section(svgs: Sequence[tuple[str, str]]) -> str:
    return ('<section id="plots"><h2>Plots</h2><div class="row">'
            + "".join(f'<figure class="{"wide" if svg.count("<svg ") > 1 else "one"}"><figcaption>{esc(cap)}'
                      f'</figcaption><div class="panels">{svg}</div></figure>' for cap, svg in svgs)
            + "</div></section>")


def _comparison_plots(c: Comparison, runs: Mapping[str, RunData]) -> str:
    from evalrig.read import plots  # matplotlib: only when a report is drawn (docs/report.md)

    suites = [s for s, st in c.suites.items() if st.tasks]
    diffs: dict[str, list[float]] = {s: [r.d for r in c.suites[s].per_task if r.d is not None]
                                      for s in suites or list(c.suites)}
    points: dict[str, list[plots.TaskPoint]] = {side: [] for side in SIDES}
    for s, st in c.suites.items():
        for r in st.per_task:
            points["champion"].append(plots.TaskPoint(s, r.champion_passes / r.champion_n if r.champion_n else None,
                                                      r.champion_cost))
            points["candidate"].append(plots.TaskPoint(s, r.candidate_passes / r.candidate_n if r.candidate_n
                                                       else None, r.candidate_cost))
    svgs = [
        ("Per-task differences, sorted, by suite: green where the candidate passes more often, red where less.",
         plots.differences(diffs)),
        ("pass^k (every one of k attempts passes; solid) and pass@k (at least one passes; dashed) against k.",
         plots.pass_k({s: _suite_pass_k(c.suites[s]) for s in suites or list(c.suites)})),
        ("Cost against pass rate, per task.", plots.cost_vs_pass(points)),
    ]
    if runs:
        svgs.append(("The reward channel: the agents' predicted p_success against the observed pass rate "
                     "(the dotted diagonal is a calibrated agent).",
                     plots.calibration({side: _calibration_pairs(run) for side, run in runs.items()})))
    else:
        svgs.append(("The reward channel's calibration needs the run bundles' estimates, and neither run "
                     "bundle is at hand.", ""))
    return _plots_section(svgs)


def _comparison_data(c: Comparison, runs: Mapping[str, RunData], settings: _Settings | None) -> dict[str, Any]:
    trials: dict[str, list[list[Any]]] = defaultdict(list)
    budget = _Budget()
    for side, run in runs.items():
        for task_id, rows in _trials(run, side, budget).items():
            trials[task_id] += rows
    tasks = []
    for suite, s in c.suites.items():
        for r in s.per_task:
            tasks.append([r.task_id, suite, r.champion_passes, r.champion_n, r.candidate_passes, r.candidate_n,
                          r.d, r.fisher_p_worse, r.champion_cost, r.candidate_cost,
                          settings.by_id.get(r.task_id) if settings else None, trials.get(r.task_id, [])])
    return {"paired": True, "k": c.repeat, "tasks": tasks}


# -- a run bundle ------------------------------------------------------------------------


def _run_page(dir: Path, tasks_dir: Path | None) -> Page:
    run = _read_run(dir)
    m = run.manifest
    page = Page(title=f"Run {m.run_id}", kind="run")
    if (b := _banner(run.problems)) is not None:
        page.banners.append(b)
    page.notes += _torn_notes(run, "")
    settings = _Settings(m, tasks_dir)
    if settings.note:
        page.notes.append(settings.note)
    final = final_of(run.records.results)
    per_task: dict[str, dict[str, Any]] = {}
    for r in run.records.results:
        per_task.setdefault(r.task_id, {"suite": r.suite, "passes": 0, "n": 0, "costs": []})
    for r in final.values():
        t = per_task[r.task_id]
        t["n"] += 1
        t["passes"] += bool(r.passed)
        a = run.records.actuals.get(r.attempt_id)
        if a is not None and a.cost_usd is not None:
            t["costs"].append(a.cost_usd)
    c = m.counts
    status = (f"{m.status}: {count(c.trials, 'trial')}, {c.scored} scored, {c.passed} passed, {c.failed} failed, "
              f"{c.agent_error} agent errors, {c.timeout} timeouts, {c.infra_error} infrastructure errors, "
              f"{c.unscored} unscored")
    rows = [("checkpoint", f"{m.checkpoint.name} {short_digest(m.checkpoint.id)}"), ("status", status),
            ("trials per task (k)", str(m.repeat)), ("task set", short_digest(m.taskset.id))]
    page.sections.append('<section id="verdict"><h2 class="verdict neutral">' + esc(f"Run {m.run_id}: {m.status}")
                         + '</h2><table class="facts"><tbody>'
                         + "".join(f"<tr><th>{esc(a)}</th><td>{esc(b)}</td></tr>" for a, b in rows)
                         + "</tbody></table></section>")
    if run.problems[1:]:
        page.sections.append(_list_section("Every problem found", run.problems))
    by_suite: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in per_task.values():
        by_suite[t["suite"]].append(t)
    suites_html = ['<section id="suites"><h2>Suites</h2><table class="suite"><thead><tr><th>suite</th><th>tasks</th>'
                   f"<th>pass rate</th><th>pass^{m.repeat}</th><th>pass@{m.repeat}</th></tr></thead><tbody>"]
    summaries = {}
    for suite in sorted(by_suite):
        ts = by_suite[suite]
        s = side_summary([t["passes"] for t in ts], [t["n"] for t in ts])
        summaries[suite] = s
        suites_html.append(f"<tr><th>{esc(suite)}</th><td>{len(ts)}</td><td>{esc(words.pct(s.pass_rate))}</td>"
                           f"<td>{esc(words.fmt(s.pass_hat_k.get(str(m.repeat))))}</td>"
                           f"<td>{esc(words.fmt(s.pass_at_k.get(str(m.repeat))))}</td></tr>")
    suites_html.append("</tbody></table></section>")
    page.sections.append("".join(suites_html))

    from evalrig.read import plots  # matplotlib: only when a report is drawn (docs/report.md)

    points = {"champion": [plots.TaskPoint(t["suite"], t["passes"] / t["n"] if t["n"] else None,
                                           sum(t["costs"]) / len(t["costs"]) if t["costs"] else None)
                           for t in per_task.values()]}
    page.sections.append(_plots_section([
        ("Per-task pass rates, by suite.", plots.histogram(
            {s: [t["passes"] / t["n"] for t in ts if t["n"]] for s, ts in sorted(by_suite.items())})),
        ("pass^k (solid) and pass@k (dashed) against k.", plots.pass_k(
            {s: {"champion": (x.pass_hat_k, x.pass_at_k)} for s, x in summaries.items()})),
        ("Cost against pass rate, per task.", plots.cost_vs_pass(points)),
        ("The reward channel: predicted p_success against the observed pass rate.",
         plots.calibration({"champion": _calibration_pairs(run)})),
    ]))
    trials = _trials(run, "run", _Budget())
    tasks = []
    for task_id in sorted(per_task):
        t = per_task[task_id]
        cost = sum(t["costs"]) / len(t["costs"]) if t["costs"] else None
        tasks.append([task_id, t["suite"], t["passes"], t["n"], None, None, None, None, cost, None,
                      settings.by_id.get(task_id), trials.get(task_id, [])])
    page.data = {"paired": False, "k": m.repeat, "tasks": tasks}
    return page


# -- the release log ---------------------------------------------------------------------


def _short(digest: Any) -> str:
    return short_digest(digest) if isinstance(digest, str) else ""


def _event_text(e: Any) -> str:
    """One release event in a line of words."""
    if e.kind == "ship":
        signed = f"; signed by {e.signed_by}" if e.signed_by else ""
        return (f"{e.verdict} ({e.reason}): {e.candidate.name} {_short(e.candidate.checkpoint_id)} "
                f"replaces {_short(e.replaces) or 'nothing (the first ship)'}{signed}")
    if e.kind == "rollback":
        return f"{_short(e.from_)} → {_short(e.to)} ({e.trigger}, by {e.by}): {e.reason}"
    if e.kind == "tripwire":
        return f"{_short(e.checkpoint_id)}: {'held' if e.held else 'FAILED'}"
    return f"{e.alert_kind} on {e.metric}: {e.detail}"


def _log_page(path: Path, home: Path) -> Page:
    """The release curves exactly as `watch` computes them (evalrig.core.curves over the gate
    ledger and the verified release log; docs/curves.md), without appending any alert."""
    from evalrig.core import curves
    from evalrig.read import plots  # matplotlib: only when a report is drawn (docs/report.md)
    from evalrig.store.releases import read_verified_prefix
    from evalrig.store.watch import gate_lines, marks_of, thresholds

    page = Page(title=f"Release log {path.name}", kind="log")
    log, failure = read_verified_prefix(path)
    if failure is not None:
        where = Problem(failure.file, failure.message, failure.field, failure.line).render()
        page.banners.append(f"The release log does not verify. First line that fails: {where}; "
                            "the events before it are shown.")
    elif log.torn_line is not None:
        page.notes.append(f"{path}:{log.torn_line}: a torn last line, ignored")
    try:
        lines = gate_lines(home)
    except EvalrigError as e:
        where = Problem(e.file, e.message, e.field, e.line).render()
        page.banners.append(f"The gate ledger does not verify, so no curve is drawn: {where}")
        lines = None
    trains = curves.trains_of(lines or [])
    marks = marks_of(log)
    watch, _ = thresholds(None, log)
    series = curves.series(trains.trains, marks, curves.alerts(trains.trains, marks, watch))
    _curves_section(page, series, [e for e in log.events if e.kind == "alert"], plots)
    if not trains.trains and lines is not None:
        page.notes.append(f"No train in the gate ledger ({ledger.ledger_path(home)}) carries curve figures yet: "
                          "the curves are empty until gates record them.")
    rows = [f'<tr class="ev-{esc(e.kind)}"><td>{e.seq}</td><td>{esc(e.at.isoformat())}</td><td>{esc(e.kind)}</td>'
            f"<td>{esc(_clip(_event_text(e)))}</td></tr>" for e in log.events]
    page.sections.append(f'<section id="events"><h2>Events ({len(rows)})</h2><table class="events"><thead><tr>'
                         "<th>seq</th><th>at</th><th>kind</th><th>what</th></tr></thead><tbody>" + "".join(rows)
                         + "</tbody></table></section>")
    return page


def _curves_section(page: Page, series: dict[str, Any], alert_events: Sequence[Any], plots: Any) -> None:
    """The curves of `series` (as `watch --json` gives them), the logged alerts marked too; the
    series is also kept in the page as JSON, the numbers each plot was drawn from."""
    trains = series["trains"]
    times = [t["at"] for t in trains]

    def position(at: datetime) -> float:
        """An event's place on the train axis: after the trains gated before it."""
        return sum(1 for t in times if t <= at) - 0.5

    def pick(key: str, side: str | None = None) -> list[float | None]:
        return [t[key] if side is None else t[key][side] for t in trains]

    plotted = {
        "champion fixed pass rate": pick("fixed_pass_rate", "champion"),
        "fresh delta (mean_d)": pick("fresh_mean_d"),
        "cost per task, champion": pick("cost_per_task", "champion"),
        "cost per task, candidate": pick("cost_per_task", "candidate"),
        "public pass rate, candidate": pick("public_pass_rate", "candidate"),
    } if trains else {}
    bounds: list[tuple[float, float] | None] = [(b[0], b[1]) if b else None for b in
                                                (t["fresh_bounds"] for t in trains)]
    marks = [plots.Mark(position(m["at"]), m["kind"], str(m["seq"])) for m in series["releases"]]
    marks += [plots.Mark(position(e.at), "alert", str(e.seq)) for e in alert_events]
    labels = [f"#{i + 1} {t.strftime('%m-%d %H:%M')}" for i, t in enumerate(times)]
    firing = "".join(f"<li>{esc(a['alert_kind'])} [{esc(a['alert_id'])}]: {esc(_clip(a['detail']))}</li>"
                     for a in series["alerts"])
    page.sections.append(_plots_section([
        ("The curves over the trains (numbered, with the date each was gated), with ships (green), rollbacks "
         "(red dashed) and alerts (orange dotted), each named above by its event number (s3: the ship of event "
         "#3; marks between the same two trains stand side by side); the fresh delta's band is its two-sided "
         "t bounds.",
         plots.curves(plotted, labels, marks, {"fresh delta (mean_d)": bounds}))])
        + (f'<section id="firing"><h2>Alerts firing now</h2><ul>{firing}</ul></section>' if firing else "")
        + f'<script type="application/json" id="curves-data">{_json_for_script(series)}</script>')


# -- the page ----------------------------------------------------------------------------

_CSS = """
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:1em 2em;color:#222;overflow-wrap:break-word}
h2.verdict{font-size:1.6em;padding:.4em .6em;border-radius:6px}
.good{background:#e3f3e6}.bad{background:#fbe3e4}.neutral{background:#eef0f4}.pending{background:#fff5d6}
.banner{background:#c44e52;color:#fff;padding:.8em 1em;border-radius:6px;font-weight:600}
.note{background:#fff5d6;padding:.5em 1em;border-radius:6px}
p code,li code{overflow-wrap:anywhere;white-space:pre-wrap}td code{white-space:nowrap}
table{border-collapse:collapse;margin:.5em 0;display:block;max-width:100%;overflow-x:auto}
td,th{border-bottom:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}tr.bad td{background:#fbe3e4}
table.rules td:nth-child(3){min-width:12em}
.scroll{max-width:100%;overflow-x:auto}#task-table{display:table;width:100%}
figure{margin:1em 0;max-width:100%;min-width:0}svg.plot{max-width:100%;height:auto;display:block}
figure.wide{flex:1 1 100%}.panels{display:flex;flex-wrap:wrap;gap:0 1em;align-items:flex-end}
.panels svg.plot{flex:0 1 auto;min-width:0}
.row{display:flex;flex-wrap:wrap;gap:0 2.5em;align-items:flex-start}.row>*{min-width:0;max-width:100%}
figcaption{max-width:40em;color:#444}
#tasks th[data-key]{cursor:pointer;user-select:none}#tasks th[data-key]:hover{background:#eef0f4}
#tasks th[data-sort=asc]::after{content:" ▲"}#tasks th[data-sort=desc]::after{content:" ▼"}
tr.task{cursor:pointer}tr.task:hover{background:#f6f7f9}.up{color:#2f7d3d}.down{color:#b3363b}
tr.detail>td{background:#fafafa}pre{white-space:pre-wrap;word-break:break-word;margin:.2em 0;max-height:20em;
overflow:auto;background:#f3f3f3;padding:.3em}
.turn{border-left:3px solid #ccc;padding-left:.5em;margin:.3em 0}.turn.error{border-color:#c44e52}
.vs{display:grid;grid-template-columns:1fr 1fr;gap:1em}.turn.call{border-color:#4c72b0}.turn.end{border-color:#dd8452}
.who{color:#666;font-size:.85em}
.call{margin:.2em 0 .2em .5em;padding:.2em .4em;background:#eef3fb;border-radius:4px}
.call .result{margin-left:1em}.call .result.error pre{background:#fbe3e4}
.reps{display:grid;grid-template-columns:repeat(var(--sides,2),minmax(0,1fr));gap:.4em 1em}
.reps>h5{grid-column:1/-1;margin:.6em 0 0;border-bottom:1px solid #ddd}
.trial{min-width:0;border:1px solid #e3e3e3;border-radius:5px;padding:.3em .5em;background:#fff}
.trial h4{margin:.1em 0;font-size:1em;font-weight:600}
.st{display:inline-block;padding:0 .45em;border-radius:3px;color:#fff;background:#777}
.st-passed{background:#2f7d3d}.st-failed{background:#b3363b}
.st-agent_error,.st-timeout,.st-infra_error,.st-interrupted{background:#c46a12}
.filenote{color:#666;font-size:.85em}.tails{margin:.3em 0}
#tasks p{display:flex;flex-wrap:wrap;gap:.3em;align-items:center}
@media (max-width:700px){
body{padding:.6em .7em}h1{font-size:1.4em}h2.verdict{font-size:1.25em}
.panels svg.plot,.row>figure{flex:1 1 100%;width:100%}
.reps,.vs{grid-template-columns:minmax(0,1fr)}
table.rules,table.rules tbody,table.rules tr,table.rules td{display:block}table.rules thead{display:none}
table.rules tr{border-bottom:1px solid #ccc;padding:.3em 0}table.rules td{border:0;padding:1px 4px;min-width:0}
table.rules td:nth-child(4){color:#555;font-size:.9em}table.rules td:nth-child(-n+2){display:inline-block}
}
"""

_JS = r"""
(function(){
"use strict";
var D=JSON.parse(document.getElementById("report-data").textContent);
var PAGE=200, key="moved", dir=1, page=0, open={};
var SIDES=D.paired?["champion","candidate"]:["run"];
function el(tag,text,cls){var e=document.createElement(tag);if(text!==undefined&&text!==null)e.textContent=String(text);if(cls)e.className=cls;return e;}
function num(x,dg){return x===null||x===undefined?"–":(typeof x==="number"?+x.toFixed(dg===undefined?3:dg):x);}
function val(t,k){var i={id:0,suite:1,champion:2,candidate:4,d:6,fisher:7,cost:8}[k];
  if(k==="champion")return t[3]?t[2]/t[3]:-1; if(k==="candidate")return t[5]?t[4]/t[5]:-1; return t[i];}
function moved(t){return t[6]!==0&&t[6]!==null&&t[6]!==undefined;}
function rows(){
  var q=document.getElementById("filter").value.toLowerCase(), s=document.getElementById("suite").value,
      m=document.getElementById("moved").value;
  var out=D.tasks.filter(function(t){
    if(q&&t[0].toLowerCase().indexOf(q)<0)return false; if(s&&t[1]!==s)return false;
    if(m==="worse"&&!(t[6]<0))return false; if(m==="better"&&!(t[6]>0))return false;
    if(m==="moved"&&!moved(t))return false;
    if(m==="failing"&&!(t[3]&&t[2]<t[3]))return false; return true;});
  out.sort(function(a,b){
    if(key==="moved"){var ma=moved(a),mb=moved(b);if(ma!==mb)return ma?-1:1;
      if(ma&&a[6]!==b[6])return a[6]<b[6]?-1:1;return a[0]<b[0]?-1:(a[0]>b[0]?1:0);}
    var x=val(a,key),y=val(b,key);if(x===null||x===undefined)x=-Infinity;if(y===null||y===undefined)y=-Infinity;
    if(x<y)return -dir;if(x>y)return dir;return a[0]<b[0]?-1:(a[0]>b[0]?1:0);});
  return out;}
function pre(text,cls){var p=el("pre",text);if(cls)p.className=cls;return p;}
function transcript(tr){
  var d=el("details",null,"transcript");d.appendChild(el("summary","Transcript ("+tr.items.length+" items, as the agent saw it)"));
  tr.items.forEach(function(it){var div=el("div",null,"turn "+it.flag);div.appendChild(el("div",it.who+" · "+it.role,"who"));
    if(it.text)div.appendChild(pre(it.text));
    it.calls.forEach(function(c){var cd=el("div",null,"call");cd.appendChild(el("code",c.name+"("+c.args+")"));
      if(c.id)cd.appendChild(el("span"," ["+c.id+"]","who"));
      if(c.result!==undefined){var r=el("div",null,"result"+(c.error?" error":""));r.appendChild(el("span",c.error?"→ result (error)":"→ result","who"));
        r.appendChild(pre(c.result));cd.appendChild(r);}else cd.appendChild(el("div","→ no result recorded","who result"));
      div.appendChild(cd);});
    d.appendChild(div);});
  if(tr.raw.length){var raw=el("details",null,"raw-frames");raw.appendChild(el("summary","Raw frames: the rig's hops to and from the driver ("+tr.raw.length+")"));
    tr.raw.forEach(function(r){var div=el("div",null,"turn");div.appendChild(el("div",r[0]+" · "+r[1],"who"));div.appendChild(pre(r[2]));raw.appendChild(div);});
    d.appendChild(raw);}
  return d;}
function attempt(t,a){
  var box=el("div",null,"trial"),h=el("h4");h.appendChild(el("span",a[0]+" "));h.appendChild(el("span",a[3],"st st-"+a[3]));
  h.appendChild(el("span",(a[7]?"":" (superseded)")+" · reward "+num(a[4])+" · "+num(a[5],2)+" s · $"+num(a[6],4)));
  box.appendChild(h);box.appendChild(el("div","attempt "+a[2],"who"));
  var ev=a[8];if(!ev){box.appendChild(el("div","no evidence at hand","who"));return box;}
  if(ev.answer!==null){var g=el("div",null,"vs");
    if(t[10]&&t[10].kind!=="command"){var w=el("div");w.appendChild(el("strong",t[10].kind==="regex"?"pattern":"expected"));
      w.appendChild(pre(t[10].kind==="regex"?t[10].pattern:(typeof t[10].expected==="string"?t[10].expected:JSON.stringify(t[10].expected,null,1))));g.appendChild(w);}
    var got=el("div");got.appendChild(el("strong","got"));got.appendChild(pre(ev.answer));g.appendChild(got);box.appendChild(g);}
  if(ev.tails){var tl=el("div",null,"tails");["stderr.txt","stdout.txt"].forEach(function(n){
    tl.appendChild(el("strong","The agent's "+n+", its last lines"));tl.appendChild(pre(ev.tails[n]||"(empty)"));});box.appendChild(tl);}
  if(ev.files.length){var d=el("details",null,"files");d.appendChild(el("summary","Evidence files ("+(ev.files.length+ev.more)+")"));
    ev.files.forEach(function(f){var fd=el("details",null,"file");var s=el("summary",f[0]);
      s.appendChild(el("span",f[1]===null?"":" ("+f[1]+" bytes)","who"));fd.appendChild(s);
      if(f[2]!==null)fd.appendChild(pre(f[2]));if(f[3])fd.appendChild(el("div",f[3],"filenote"));d.appendChild(fd);});
    if(ev.more)d.appendChild(el("div","… and "+ev.more+" more files","filenote"));box.appendChild(d);}
  if(ev.transcript)box.appendChild(transcript(ev.transcript));
  return box;}
function detail(t){
  var td=el("td");td.colSpan=7;
  if(t[10]){var ex=el("div");ex.appendChild(el("strong","Verifier ("+t[10].kind+"): "));
    var want=t[10].expected!==undefined?JSON.stringify(t[10].expected):(t[10].pattern!==undefined?t[10].pattern:JSON.stringify(t[10].command));
    ex.appendChild(el("span",(t[10].kind==="regex"?"pattern ":(t[10].kind==="command"?"command ":"expected "))));ex.appendChild(el("code",want));td.appendChild(ex);}
  if(!t[11].length)td.appendChild(el("p","No trials at hand: the run bundles are not where compare recorded them."));
  var reps={},order=[];t[11].forEach(function(a){if(!(a[1] in reps)){reps[a[1]]={};order.push(a[1]);}
    (reps[a[1]][a[0]]=reps[a[1]][a[0]]||[]).push(a);});
  order.sort(function(x,y){return x-y;});
  var grid=el("div",null,"reps");grid.style.setProperty("--sides",String(SIDES.length));
  order.forEach(function(r){grid.appendChild(el("h5","repetition "+r));
    SIDES.forEach(function(side){var cell=el("div",null,"side side-"+side);
      (reps[r][side]||[]).forEach(function(a){cell.appendChild(attempt(t,a));});
      if(!(reps[r][side]||[]).length)cell.appendChild(el("div",side+": no attempt at hand","who"));grid.appendChild(cell);});});
  td.appendChild(grid);
  var row=el("tr",null,"detail");row.appendChild(td);return row;}
function render(){
  var all=rows(), body=document.getElementById("task-body"), pages=Math.max(1,Math.ceil(all.length/PAGE));
  if(page>=pages)page=pages-1;
  body.textContent="";
  all.slice(page*PAGE,(page+1)*PAGE).forEach(function(t){
    var tr=el("tr",null,"task");tr.dataset.id=t[0];
    var dd=t[6];
    [t[0],t[1],t[3]?t[2]+"/"+t[3]:"–",D.paired?(t[5]?t[4]+"/"+t[5]:"–"):"",D.paired?num(dd):"",D.paired?num(t[7]):"",
     num(t[8],4)+(D.paired?" → "+num(t[9],4):"")].forEach(function(v,i){var c=el("td",v);if(i===4&&dd>0)c.className="up";if(i===4&&dd<0)c.className="down";tr.appendChild(c);});
    tr.addEventListener("click",function(){open[t[0]]=!open[t[0]];render();});
    body.appendChild(tr); if(open[t[0]])body.appendChild(detail(t));});
  document.getElementById("count").textContent=all.length+" of "+D.tasks.length+" tasks; page "+(page+1)+" of "+pages
    +(key==="moved"?"; the tasks that moved first, worst first":"");
  document.querySelectorAll("#tasks th[data-key]").forEach(function(th){th.dataset.sort=th.dataset.key===key?(dir>0?"asc":"desc"):"";});}
document.querySelectorAll("#tasks th[data-key]").forEach(function(th){th.addEventListener("click",function(){
  if(key===th.dataset.key)dir=-dir;else{key=th.dataset.key;dir=1;}page=0;render();});});
["filter","suite","moved"].forEach(function(id){document.getElementById(id).addEventListener("input",function(){page=0;render();});});
document.getElementById("prev").addEventListener("click",function(){if(page>0)page--;render();});
document.getElementById("next").addEventListener("click",function(){page++;render();});
if(!D.paired){key="id";}
render();
})();
"""


def _json_for_script(obj: Any) -> str:
    """JSON inside <script type="application/json">, in the rig's one encoding (times as
    `watch --json` writes them): no character can close the element, and none of the
    characters core/untrusted.py escapes is in the page raw (the same JSON)."""
    text = json_escaped(canonical_json(obj).decode())
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _tasks_section(data: dict[str, Any]) -> str:
    suites = sorted({t[1] for t in data["tasks"]})
    options = "".join(f'<option value="{esc(s)}">{esc(s)}</option>' for s in suites)
    paired = data["paired"]
    heads = [("id", "task"), ("suite", "suite"), ("champion", "champion" if paired else "passes"),
             ("candidate", "candidate" if paired else ""), ("d", "d" if paired else ""),
             ("fisher", "Fisher p (worse)" if paired else ""), ("cost", "cost champ → cand" if paired else "cost")]
    th = "".join(f'<th data-key="{k}">{esc(label)}</th>' for k, label in heads)
    moved = ('<option value="moved">moved (d ≠ 0)</option><option value="worse">worse</option>'
             '<option value="better">better</option>') if paired else ""
    return (f'<section id="tasks"><h2>Tasks ({len(data["tasks"])})</h2><p>Click a column to sort, a task to open '
            f'its trials. <input id="filter" type="search" placeholder="filter task ids"> <select id="suite">'
            f'<option value="">every suite</option>{options}</select> <select id="moved"><option value="">every task'
            f'</option>{moved}<option value="failing">a trial failed</option></select> '
            '<button id="prev" type="button">‹ previous</button> <button id="next" type="button">next ›</button> '
            '<span id="count"></span></p>'
            f'<div class="scroll"><table id="task-table"><thead><tr>{th}</tr></thead><tbody id="task-body"></tbody>'
            '</table></div>'
            f'<script type="application/json" id="report-data">{_json_for_script(data)}</script></section>')


def script_hash(script: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()


def render(page: Page, now: datetime) -> bytes:
    """The page: verdict and banners first, then the sections, the task table and its script.
    The Content-Security-Policy allows no fetch and no script but this page's own, by hash."""
    csp = (f"default-src 'none'; script-src '{script_hash(_JS)}'; style-src 'unsafe-inline'; img-src data:; "
           "base-uri 'none'; form-action 'none'")
    parts = [
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        f'<meta http-equiv="Content-Security-Policy" content="{esc(csp)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(page.title)} · evalrig report</title><style>{_CSS}</style></head><body>",
        f"<header><h1>{esc(page.title)}</h1></header>",
    ]
    # A failed verification before everything (a reader never hides tampering); then the
    # verdict; then the notes on what could not be shown.
    parts += [f'<div class="banner" role="alert">{esc(b)}</div>' for b in page.banners]
    parts += page.sections[:1]
    parts += [f'<p class="note">{esc(n)}</p>' for n in page.notes]
    parts += page.sections[1:]
    if page.data is not None:
        parts.append(_tasks_section(page.data))
        parts.append(f"<script>{_JS}</script>")
    parts.append(f"<footer><p class=\"who\">Made by evalrig report at {esc(now.isoformat())}; everything shown "
                 "is in this file.</p></footer></body></html>\n")
    return "".join(parts).encode()
