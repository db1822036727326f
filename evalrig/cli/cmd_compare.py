"""Commands `compare`, `gate`, `sign` and `check-release` (docs/gate.md, docs/release-flow.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from evalrig.cli.app import DebugOpt, HomeKeyOpt, JsonOpt, command, emit_json, err, say
from evalrig.core.errors import ExitCode, UsageError
from evalrig.core.words import count
from evalrig.store.layout import COMPARISON_JSON, COMPARISON_MD


@command("compare", "evalrig compare runs/champion runs/candidate --out trains/t1")
def compare_cmd(
    champion: Annotated[Path, typer.Argument(help="The champion's run bundle.")],
    candidate: Annotated[Path, typer.Argument(help="The candidate's run bundle.")],
    out: Annotated[Path, typer.Option("--out", help="The comparison bundle to write.")],
    allow_incomplete: Annotated[
        bool, typer.Option("--allow-incomplete", help="Compare runs with unscored trials (never promotes).")
    ] = False,
    json_out: JsonOpt = False,
    debug: DebugOpt = False,
) -> int:
    """Pair two runs task by task and write a comparison bundle (comparison.json, comparison.md)."""
    from evalrig.store.checkpoint import evalrig_home
    from evalrig.store.compare import compare_bundles

    c = compare_bundles(champion, candidate, out, evalrig_home(), allow_incomplete)
    fresh = c.suites["fresh"]
    if json_out:
        emit_json({"out": str(out), "champion": c.champion, "candidate": c.candidate,
                   "suites": {s: {"tasks": v.tasks, "mean_d": v.mean_d, "p_one_sided": v.p_one_sided,
                                  "p_worse": v.p_worse} for s, v in c.suites.items()}})
    else:
        say([
            f"compared {c.candidate.run_id} (candidate) with {c.champion.run_id} (champion), k = {c.repeat}",
            f"fresh: {count(fresh.tasks, 'task')}, mean_d {_f(fresh.mean_d)}, p better {_f(fresh.p_one_sided)}, "
            f"p worse {_f(fresh.p_worse)}",
            f"fixed: {count(c.suites['fixed'].tasks, 'task')}; invariant: {count(c.suites['invariant'].tasks, 'task')}",
            f"wrote {out / COMPARISON_JSON} and {out / COMPARISON_MD}",
        ])
    return 0


def _f(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


@command("gate", "evalrig gate trains/t1 --policy policies/default.toml")
def gate_cmd(
    comparison: Annotated[Path, typer.Argument(help="The comparison bundle (compare --out).")],
    policy: Annotated[Path, typer.Option("--policy", help="The release policy the runs pinned.")],
    exception: Annotated[
        str | None, typer.Option("--exception", help="An exception of the policy (waives only the win).")
    ] = None,
    advisory: Annotated[
        bool, typer.Option("--advisory", help="Apply any policy; the decision goes to decisions/advisory/ "
                           "and cannot be signed.")
    ] = False,
    json_out: JsonOpt = False,
    debug: DebugOpt = False,
) -> int:
    """Apply the release policy; write the decision and its verdict file. Exit: 0 promote, 1 keep, 3 block."""
    from evalrig.store.checkpoint import evalrig_home
    from evalrig.store.clock import utcnow
    from evalrig.store.decisions import gate_comparison

    r = gate_comparison(comparison, policy, exception, advisory, evalrig_home(), utcnow())
    d = r.decision
    if json_out:
        emit_json({"verdict": d.verdict, "reason": d.reason, "summary": d.summary,
                   "decision_file": str(r.decision_file), "verdict_file": str(r.verdict_file),
                   "advisory": d.advisory, "exit_code": int(r.exit_code),
                   "rules": [{"name": x.name, "held": x.held} for x in d.rules]})
    else:
        from evalrig.store.invocation import command_name, quoted

        say([f"{d.verdict} ({d.reason})" + (" [advisory]" if d.advisory else ""), d.summary,
             f"verdict file: {r.verdict_file}", f"decision: {r.decision_file}"]
            + ([] if d.advisory else
               [f"a person signs it: {command_name()} sign {quoted(r.decision_file)} --approve|--reject --by NAME"]))
    return int(r.exit_code)


@command("sign", "evalrig sign trains/t1/decisions/default-v2.json --approve --by alice")
def sign_cmd(
    decision: Annotated[Path, typer.Argument(help="The decision file gate wrote.")],
    by: Annotated[str, typer.Option("--by", help="Who signs.")],
    approve: Annotated[bool, typer.Option("--approve", help="Ship the candidate.")] = False,
    reject: Annotated[bool, typer.Option("--reject", help="Do not ship the candidate.")] = False,
    reason: Annotated[str | None, typer.Option("--reason", help="Why; required to override the gate.")] = None,
    json_out: JsonOpt = False,
    debug: DebugOpt = False,
) -> int:
    """Record a person's sign-off of a decision in $EVALRIG_HOME/signoffs.jsonl and decisions/signoffs.jsonl (the last one counts)."""
    from evalrig.store.checkpoint import evalrig_home
    from evalrig.store.clock import utcnow
    from evalrig.store.signoff import sign

    if approve == reject:
        raise UsageError("give exactly one of --approve and --reject")
    s = sign(decision, approve, by, reason, utcnow(), evalrig_home())
    report, report_error = _remake_report(Path(decision))
    if json_out:
        emit_json(s)
    else:
        from evalrig.core.words import shown

        say([f"{s.action} by {shown(s.by)} recorded ({'agrees with' if s.agrees_with_gate else 'overrides'} "
             f"the gate's {s.verdict})", f"candidate {s.candidate_checkpoint_id}",
             f"verdict file: {Path(decision).with_suffix('.md')} (now says who signed)"]
            + ([f"report: {report} (made again: it says who signed)"] if report is not None else []))
    if report_error is not None:
        err(f"warning: the sign-off is recorded, but {report_error}")
    return 0


def _remake_report(decision: Path) -> tuple[Path | None, str | None]:
    """Make again the report.html that stands beside a signed decision (the comparison bundle's,
    docs/report.md), so that the page the signer is sent to says who signed, not "Not signed
    yet". Only a report that exists is made again; one that cannot be is named, and the
    sign-off stands. Returns (the report made, or None; why it could not be, or None)."""
    from evalrig.core.errors import EvalrigError
    from evalrig.read.report import write_report
    from evalrig.store.checkpoint import evalrig_home
    from evalrig.store.clock import utcnow
    from evalrig.store.invocation import command_name, quoted
    from evalrig.store.layout import DECISIONS, REPORT_HTML

    folder = decision.parent
    if folder.name != DECISIONS:
        return None, None
    cmp = folder.parent
    html = cmp / REPORT_HTML
    if not html.is_file() or html.is_symlink():
        return None, None
    try:
        w = write_report(cmp, None, None, None, evalrig_home(), utcnow())
    except EvalrigError as e:
        return None, (f"{html} could not be made again ({e.message}); it still says \"Not signed yet\": "
                      f"`{command_name()} report {quoted(cmp)}` makes it")
    return w.path, None


@command("check-release", "evalrig check-release trains/t1/decisions/default-v2.json --checkpoint examples/candidate")
def check_release_cmd(
    decision: Annotated[Path, typer.Argument(help="The signed decision file.")],
    checkpoint: Annotated[Path, typer.Option("--checkpoint", help="The checkpoint directory about to ship.")],
    home_key: HomeKeyOpt = None,
    json_out: JsonOpt = False,
    debug: DebugOpt = False,
) -> int:
    """Exit 0 only for a decision a gate issued, whose comparison still verifies, whose last sign-off in
    $EVALRIG_HOME approves it, and whose sealed candidate is the directory. Exit 4 when the home's
    records do not verify, or its key is not the one `--home-key` / EVALRIG_HOME_KEY pins."""
    from evalrig.store.checkpoint import evalrig_home
    from evalrig.store.signoff import check_release

    r = check_release(decision, checkpoint, evalrig_home(), home_key)
    if json_out:
        emit_json({"approved": r.approved, "reason": r.reason, "checkpoint_id": r.checkpoint_id,
                   "hint": r.hint})
    elif r.approved:
        say(r.reason)
    else:
        err(r.reason + (f"\n  -> {r.hint}" if r.hint else ""))
    return int(ExitCode.OK if r.approved else ExitCode.KEEP)
