"""`show`'s views laid out for a person: rich tables on a colour terminal, aligned plain
text otherwise (not a terminal, or NO_COLOR). Every cell is plain text, never markup: the
views' untrusted strings were escaped when they were read (read/text.py), and rich is
given `Text` objects, so `[bold]` from an agent prints as it is."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evalrig.core.report import points
from evalrig.store.invocation import command_name

Cell = Any


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[Cell]] = field(default_factory=list)


Block = str | Table


def _f(x: Any, digits: int = 4) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


def _pts(x: float | None) -> str:
    """A difference of pass rates in the verdict file's words (`+30.0 points`)."""
    return "-" if x is None else points(x)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _checks(c: dict[str, bool]) -> str:
    return " ".join(f"{k}={'ok' if v else 'FAIL'}" for k, v in sorted(c.items())) or "-"


MAX_TASKS = 30


def blocks(view: dict[str, Any]) -> list[Block]:
    out: list[Block] = []
    banner = view.get("integrity", {}).get("banner")
    if banner:
        out.append("WARNING: " + banner)
    for name, line in sorted(view.get("integrity", {}).get("torn", {}).items()):
        out.append(f"torn: {name} ends in a torn line {line} (a crash mid-write); it is not shown")
    out += globals()["_" + view["kind"].replace("-", "_")](view)
    return out


def _run(v: dict[str, Any]) -> list[Block]:
    c = v["counts"]
    out: list[Block] = [
        f"run {v['run_id']}  checkpoint {v['checkpoint']['name']} ({v['checkpoint']['id'][:19]})",
        f"status {v['status']}: {c['passed']} of {c['scored']} scored trials passed "
        f"({c['trials']} trials, {c['attempts']} attempts, k = {v['repeat']})",
        f"cost ${v['cost_usd']:.4f}" + (f" ({v['cost_missing']} attempts without a figure)" if v["cost_missing"] else "")
        + f", wall {v['wall_s']:.1f} s, cpu {v['cpu_s']:.1f} s",
    ]
    out.append(Table("pass rate by suite", ["suite", "trials", "passed", "rate"],
                     [[s, r["trials"], r["passed"], _pct(r["pass_rate"])] for s, r in v["by_suite"].items()]))
    if v["by_tag"]:
        out.append(Table("pass rate by tag", ["tag", "trials", "passed", "rate"],
                         [[s, r["trials"], r["passed"], _pct(r["pass_rate"])] for s, r in v["by_tag"].items()]))
    elif v.get("tags_note"):
        out.append(f"by tag: not shown: {v['tags_note']}")
    out.append("errors: " + (", ".join(f"{k} {n}" for k, n in v["errors"].items()) or "none"))
    tasks = v["tasks"]
    rows = [[t["task_id"], t["suite"], f"{t['passed']}/{t['trials']}",
             _first(t["first_failing"])] for t in tasks[:MAX_TASKS]]
    out.append(Table("tasks, failing first", ["task", "suite", "passed", "first failing trial"], rows))
    if len(tasks) > MAX_TASKS:
        out.append(f"… {len(tasks) - MAX_TASKS} more tasks (--json lists them all)")
    return out


def _first(f: dict[str, Any] | None) -> str:
    if f is None:
        return "-"
    s = f"{f['trial_id']} {f['status']} ({f['attempt_id']})"
    return s + (f": {f['error']}" if f.get("error") else "")


def _task(v: dict[str, Any]) -> list[Block]:
    return [f"{v['kind']} {v['id']}  (task {v['task_id']}, suite {v['suite']}, verifier "
            f"{v['verifier'].get('kind')} v{v['verifier'].get('version')})", *_expected(v), *_attempts(v, "")]


def _expected(v: dict[str, Any], long: bool | None = None) -> list[Block]:
    """What the verifier expects (or why it is not shown): said once per task."""
    out: list[Block] = []
    if long is None:
        long = any(a.get("diff") for a in v["attempts"])
    if v["expected"] is not None:
        out.append(("pattern" if v["expected_kind"] == "regex" else "expected") + ": "
                   + (_clip(v["expected"]) if long else v["expected"].rstrip("\n")))
    elif v["expected_note"]:
        out.append(f"expected: not shown: {v['expected_note']}")
    return out


def _attempts(v: dict[str, Any], who: str) -> list[Block]:
    out: list[Block] = []
    rows = [[a["trial_id"], a["attempt"], a["status"], _f(a["reward"]), _checks(a["checks"]), _f(a["wall_s"]),
             _f(a["cost_usd"]), a["attempt_id"]] for a in v["attempts"]]
    out.append(Table(f"{who}attempts", ["trial", "#", "status", "reward", "checks", "wall s", "cost $", "attempt"], rows))
    for a in v["attempts"]:
        if "got" in a:
            got = "(no answer)" if a["got"] is None else _clip(a["got"]) if a.get("diff") else a["got"].rstrip("\n")
            out.append(f"{who}{a['trial_id']} #{a['attempt']} got: {got}")
            if a.get("diff"):
                out.append("\n".join(a["diff"]))
        if a.get("verifier_output"):
            vo = a["verifier_output"]
            out.append(f"{who}{a['trial_id']} #{a['attempt']} verifier output ({vo['run']}), stdout tail:\n"
                       f"{vo['stdout.txt'] or '(empty)'}\nstderr tail:\n{vo['stderr.txt'] or '(empty)'}")
        if a.get("error"):
            out.append(f"{who}{a['trial_id']} #{a['attempt']} error: {a['error']}")
    return out


_trial = _task

CLIP_LINES = 3


def _clip(text: str) -> str:
    """The first lines of a long text; the diff after it shows where the two differ."""
    lines = text.rstrip("\n").split("\n")
    more = len(lines) - CLIP_LINES
    return "\n".join(lines[:CLIP_LINES]) + (f"\n… {more} more lines" if more > 0 else "")


def _attempt(v: dict[str, Any]) -> list[Block]:
    out: list[Block] = [
        f"attempt {v['attempt_id']}  (trial {v['trial_id']}, task {v['task_id']}, attempt {v['attempt']})",
        f"status {v['status']}, reward {_f(v['reward'])}, checks {_checks(v['checks'])}, wall {_f(v['wall_s'])} s, "
        f"cost {_f(v['cost_usd'])}, exit {_f(v['exit_code'])}"
        + (f", termination {v['termination']}" if v.get("termination") else ""),
    ]
    if v.get("error"):
        out.append(f"error: {v['error']}")
    out.append(Table("evidence files", ["file", "bytes"], [[f["path"], _f(f["bytes"])] for f in v["files"]]))
    out.append("stdout tail:\n" + (v["stdout_tail"] or "(empty)"))
    out.append("stderr tail:\n" + (v["stderr_tail"] or "(empty)"))
    if v["transcript"] is not None:
        out.append("transcript:")
        out += [_turn(t) for t in v["transcript"]]
    return out


def _turn(t: dict[str, Any]) -> str:
    head = f"  [{t['seq']}] {t['from']} -> {t['to']}  {t['type']}"
    if t["type"] == "raw":
        return f"{head} (not a frame: {t['reason']}): {t['raw']}"
    lines = [head + (f"  tools: {', '.join(t['tools'])}" if t.get("tools") else "")]
    for m in t.get("messages", []):
        mark = " ERROR" if m.get("error") else ""
        who = m["role"] + (f" (result of {m['tool_call_id']})" if m.get("tool_call_id") else "") + mark
        if m.get("content") is not None:
            lines.append(f"      {who}: " + m["content"].replace("\n", "\n        "))
        for c in m.get("tool_calls", []):
            lines.append(f"      {who} calls {c['name']}({c['arguments']})  [{c['id']}]")
    for key in ("termination", "reason"):
        if key in t:
            lines.append(f"      {key}: {t[key]}")
    return "\n".join(lines)


def _comparison(v: dict[str, Any]) -> list[Block]:
    out: list[Block] = [f"comparison: candidate {v['candidate']['run_id']} against champion "
                        f"{v['champion']['run_id']}, k = {v['repeat']}"]
    if not v["decisions"]:
        out.append(f"verdict: none yet (run `{command_name()} gate` on this bundle)")
    for d in v["decisions"]:
        stale = "" if d["of_this_comparison"] else " (of another comparison.json: gate again)"
        out.append(f"verdict {d['verdict']} ({d['reason']}){' advisory' if d['advisory'] else ''} "
                   f"[{d['file']}]{stale}: {d['summary']}")
        out.append(Table("rules", ["rule", "outcome", "what it checks"],
                         [[r["name"], r["outcome"], r["says"]] for r in d["rules"]]))
    out.append(Table("suites", ["suite", "tasks", "champion", "candidate", "mean d", "better", "worse",
                                "p better", "p worse"],
                     [[s, x["tasks"], _pct(x["champion_pass_rate"]), _pct(x["candidate_pass_rate"]),
                       _pts(x["mean_d"]), x["better"], x["worse"], _f(x["p_one_sided"]), _f(x["p_worse"])]
                      for s, x in v["suites"].items()]))
    moved = v["moved"]
    out.append(Table("tasks that moved, worst first", ["task", "suite", "d", "champion", "candidate"],
                     [[m["task_id"], m["suite"], _pts(m["d"]), m["champion"], m["candidate"]]
                      for m in moved[:MAX_TASKS]]))
    if len(moved) > MAX_TASKS:
        out.append(f"… {len(moved) - MAX_TASKS} more (--json lists them all)")
    return out


def _comparison_task(v: dict[str, Any]) -> list[Block]:
    out: list[Block] = [f"task {v['task_id']} ({v['suite']}): champion {v['champion_passes']}/{v['champion_n']}, "
                        f"candidate {v['candidate_passes']}/{v['candidate_n']}, d {_pts(v['d'])}"]
    shown = [s["trials"] for s in v.get("sides", {}).values() if s["trials"] is not None]
    said = next((t for t in shown if t["expected"] is not None), shown[0] if shown else None)
    if said is not None:  # the task's expected answer, once (both sides ran the same task)
        out += _expected(said, any(a.get("diff") for t in shown for a in t["attempts"]))
    for side, s in v.get("sides", {}).items():
        if s["trials"] is None:
            out.append(f"{side} ({s['run_id']}): trials not shown: {s['note']}")
            continue
        t = s["trials"]
        out.append(f"{side} ({s['run_id']}, {s['bundle']}):")
        if t["integrity"]["banner"]:
            out.append(f"{side}: WARNING: {t['integrity']['banner']}")
        out += _attempts(t, f"{side} ")
    return out


def plain(view: dict[str, Any]) -> str:
    parts = []
    for b in blocks(view):
        if isinstance(b, str):
            parts.append(b)
            continue
        cells = [[_f(c) for c in r] for r in b.rows]
        widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(b.columns)]
        lines = [b.title + ":", "  " + "  ".join(h.ljust(w) for h, w in zip(b.columns, widths, strict=True)).rstrip()]
        lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
        if not cells:
            lines.append("  (none)")
        parts.append("\n".join(lines))
    return "\n".join(parts) + "\n"


def to_console(view: dict[str, Any], console: Any) -> None:
    from rich.table import Table as RichTable
    from rich.text import Text

    for b in blocks(view):
        if isinstance(b, str):
            console.print(Text(b), soft_wrap=True)
            continue
        t = RichTable(title=Text(b.title), title_justify="left")
        for c in b.columns:
            t.add_column(Text(c))
        for r in b.rows:
            t.add_row(*(Text(_f(c)) for c in r))
        console.print(t)
