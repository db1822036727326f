"""Markdown for people: `comparison.md` and the verdict file beside a decision.

Both are functions of values (the comparison, the decision, the ledger lines given),
so that the same inputs give the same text. The verdict file reads as an argument:
the verdict first, the reason in one sentence, the rules as a table, what would change
the answer, and the candidate's earlier gates (docs/gate.md).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evalrig.core.digest import short_digest
from evalrig.core.untrusted import md_code, md_line
from evalrig.core.words import count
from evalrig.models.base import format_ts
from evalrig.models.comparison import (
    SPEND_ROLES,
    Comparison,
    CurveSides,
    Decision,
    GateLedgerEntry,
    SignOff,
    SpendTotal,
    SuiteStats,
    TaskRow,
)


def fmt(x: Any, digits: int = 4) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


def pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A GFM table; a `|` in a cell (a code span's too) is escaped so that it cannot end the cell."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return out


def _rate(passes: int, n: int) -> str:
    return f"{passes}/{n}"


# -- comparison.md -----------------------------------------------------------------------


_SOURCE_LABEL = {
    "metered": "metered by the rig",
    "reported": "reported by the agent itself",
    "missing": "missing",
    "mixed": "partly reported by the agent, partly missing or metered",
}


def cost_label(source: str | None) -> str:
    """Whose word a cost figure is (docs/gate.md: a self-reported figure is shown, labelled, and never grants)."""
    return _SOURCE_LABEL.get(source or "", "source not recorded")


def _suite_section(name: str, s: SuiteStats, k: int) -> list[str]:
    both = f", {s.paired} scored on both sides" if s.paired is not None and s.paired != s.tasks else ""
    cost = s.efficiency.get("cost")
    lines = [f"## {name} ({count(s.tasks, 'task')}{both})", ""]
    if s.tasks == 0:
        return lines + ["No tasks in this suite.", ""]
    lines += _table(
        ["", "champion", "candidate"],
        [
            ["pass rate", pct(s.champion.pass_rate), pct(s.candidate.pass_rate)],
            ["pass rate se", pct(s.champion.pass_rate_se), pct(s.candidate.pass_rate_se)],
            ["mean reward", fmt(s.champion.mean_reward), fmt(s.candidate.mean_reward)],
            [f"pass^{k}", fmt(s.champion.pass_hat_k.get(str(k))), fmt(s.candidate.pass_hat_k.get(str(k)))],
            [f"pass@{k}", fmt(s.champion.pass_at_k.get(str(k))), fmt(s.candidate.pass_at_k.get(str(k)))],
            ["cost per task (USD)", fmt(s.champion.cost_per_task), fmt(s.candidate.cost_per_task)],
            ["cost source", cost_label(cost.champion_source if cost else None),
             cost_label(cost.candidate_source if cost else None)],
            ["wall s per task", fmt(s.champion.wall_s_per_task), fmt(s.candidate.wall_s_per_task)],
        ],
    )
    lines.append("")
    tb = s.t_bounds
    lines += _table(
        ["statistic", "value"],
        [
            ["mean_d", fmt(s.mean_d)],
            ["se_d", fmt(s.se_d)],
            ["better / worse / equal", f"{s.better} / {s.worse} / {s.equal}"],
            ["p one-sided (better)", f"{fmt(s.p_one_sided)}" + (f" = {s.p_exact.one_sided}" if s.p_exact else "")],
            ["p worse", f"{fmt(s.p_worse)}" + (f" = {s.p_exact.worse}" if s.p_exact else "")],
            ["p two-sided", fmt(s.p_two_sided)],
            ["t bounds (97.5 % one-sided)", "–" if tb is None else f"[{fmt(tb.lower)}, {fmt(tb.upper)}]"],
            ["MDE (α 0.025, power 0.8)", fmt(s.mde.value if s.mde else None)],
            ["McNemar two-sided p", fmt(s.mcnemar.p_two_sided if s.mcnemar else None)],
        ] + [
            [f"{m} ratio (upper bound)", f"{fmt(e.ratio)} ({fmt(e.upper)})"] for m, e in s.efficiency.items()
        ],
    )
    lines.append("")
    if cost is not None and {cost.champion_source, cost.candidate_source} & {"reported", "mixed"}:
        lines += ["Cost figures reported by an agent itself (its out/usage.json) are its own word: shown here, "
                  "never used to grant a promotion.", ""]
    improved = [r for r in s.per_task if r.d is not None and r.d > 0]
    regressed = [r for r in s.per_task if r.d is not None and r.d < 0]
    flaky = [r for r in s.per_task if r.champion_n and 0 < r.champion_passes < r.champion_n]
    for title, rows in (("Regressions", regressed), ("Improvements", improved), ("Flaky on the champion", flaky)):
        lines.append(f"### {title} ({len(rows)})")
        lines.append("")
        if rows:
            lines += _task_table(sorted(rows, key=lambda r: ((r.d or 0), r.task_id))[:50])
            if len(rows) > 50:
                lines.append(f"… and {len(rows) - 50} more (comparison.json has every task).")
        lines.append("")
    return lines


def _task_table(rows: Sequence[TaskRow]) -> list[str]:
    return _table(
        ["task", "champion", "candidate", "d", "fisher p (worse)", "cost champ → cand"],
        [[md_code(r.task_id), _rate(r.champion_passes, r.champion_n), _rate(r.candidate_passes, r.candidate_n),
          fmt(r.d, 3), fmt(r.fisher_p_worse, 3), f"{fmt(r.champion_cost)} → {fmt(r.candidate_cost)}"] for r in rows],
    )


def comparison_markdown(c: Comparison, names: Mapping[str, str] | None = None) -> str:
    """comparison.md; `names` maps checkpoint ids to their names (checkpoint.toml, as the
    run manifests recorded them), each shown in a code span."""
    f = c.facts
    names = names or {}
    lines = [
        "# Comparison",
        "",
        f"- champion: run {md_code(c.champion.run_id)}, checkpoint {checkpoint_label(c.champion.checkpoint_id, names)}",
        f"- candidate: run {md_code(c.candidate.run_id)}, checkpoint "
        f"{checkpoint_label(c.candidate.checkpoint_id, names)}",
        f"- k = {c.repeat}, seed {c.seed}, task set `{short_digest(c.taskset_id)}`",
        f"- both runs complete: {fmt(f.both_complete)}" + (" (compared with --allow-incomplete)"
                                                         if f.allow_incomplete else ""),
        f"- history: {md_line(f.history.message)}",
        "",
    ]
    if c.pricing is not None:  # docs/gateway.md, "Cost that decides"
        p = c.pricing
        lines[-1:-1] = [f"- model calls priced with one table: genai-prices {md_code(p.genai_prices)}, prices "
                        f"`{short_digest(p.prices_digest)}`, as of {p.as_of}"
                        + (f" (cost cannot decide: {md_line(p.closed)})" if p.closed else "")]
    worst = [(side, getattr(f, side).unscored_counted_worst) for side in ("champion", "candidate")]
    if any(t for _, t in worst):
        # docs/statistics.md: each a failure on the candidate's side, a pass on the champion's
        lines[-1:-1] = ["- unscored trials, counted against the candidate: " + "; ".join(
            f"{side} {len(t)} (" + ", ".join(md_code(x) for x in t[:20]) + (", …" if len(t) > 20 else "") + ")"
            for side, t in worst if t)]
    for name in ("fresh", "fixed", "invariant"):
        lines += _suite_section(name, c.suites[name], c.repeat)
    public = c.suites.get("public")
    if public is not None and public.tasks:  # public benchmarks: reported, read by no rule
        lines += _suite_section("public", public, c.repeat)
    lines += ["## Calibration of the agents' estimates", ""]
    lines += _table(
        ["", "champion", "candidate"],
        [
            ["valid estimates", *(str(c.calibration[s].estimates) for s in ("champion", "candidate"))],
            ["Brier (p_success)", *(fmt(c.calibration[s].brier) for s in ("champion", "candidate"))],
            ["time range coverage", *(pct(c.calibration[s].time.coverage) for s in ("champion", "candidate"))],
            ["time interval score", *(fmt(c.calibration[s].time.interval_score) for s in ("champion", "candidate"))],
            ["cost range coverage", *(pct(c.calibration[s].cost.coverage) for s in ("champion", "candidate"))],
        ],
    )
    return "\n".join(lines) + "\n"


# -- the verdict file --------------------------------------------------------------------

_HEADLINE = {
    "promote": "PROMOTE the candidate",
    "promote-maintenance": "PROMOTE the candidate (maintenance)",
    "keep-champion": "KEEP the champion",
    "block": "BLOCK: a person must look",
}

# numbers: the flat keys again; why: the **Cost.** paragraph says it
_SKIP_NUMBERS = {"name", "held", "says", "numbers", "why"}

# Rules that grant a promotion; `fresh.loss` is a veto whose `held` means "a loss was
# shown"; every other rule (invariants, fixed, min_tasks) must hold.
_GRANTS = frozenset({"fresh.quality", "fresh.noninferior", "fresh.efficiency"})
_PROMOTIONS = frozenset({"promote", "promote-maintenance"})


def rule_outcome(name: str, held: bool) -> tuple[str, bool]:
    """A rule's result in words, and whether it is bad news for the candidate: a veto that
    holds (no loss shown) is never styled like a failure (docs/gate.md)."""
    if name == "fresh.loss":
        return ("loss shown", True) if held else ("no loss shown", False)
    if name in _GRANTS:
        return ("met" if held else "not met"), False
    return ("holds", False) if held else ("FAILS", True)


def _outcome(name: str, held: bool) -> str:
    """The outcome in the verdict file: bold only when it is bad news."""
    words, bad = rule_outcome(name, held)
    return f"**{words}**" if bad else words


def _numbers(d: dict[str, Any]) -> str:
    return md_line(rule_numbers(d))  # task ids and hosts among the rig's words


def rule_numbers(d: dict[str, Any]) -> str:
    """A rule's numbers in one line of plain text (the verdict file's and the report's)."""
    parts = []
    for k, v in d.items():
        if k in _SKIP_NUMBERS or v == [] or v == {}:
            continue
        if v is None:
            if k in ("champion_pin", "candidate_pin"):
                parts.append(f"{k} none (run without --policy)")
            continue
        if isinstance(v, str) and v.startswith("sha256:"):
            v = short_digest(v)
        if isinstance(v, list):
            v = ", ".join(str(x.get("task_id", x)) if isinstance(x, dict) else str(x) for x in v[:10])
        parts.append(f"{k} {fmt(v)}")
    return "; ".join(parts)


def _caveats(d: Decision) -> list[str]:
    """What the person who signs must know beyond the verdict: a closed cost route, network."""
    out: list[str] = []
    rules = {r.name: r.figures() for r in d.rules}
    eff = rules.get("fresh.efficiency", {})
    if eff.get("why"):
        out += ["", f"**Cost.** {md_line(eff['why'])} Cost figures below: the champion's "
                f"{cost_label(eff.get('champion_source'))}, the candidate's {cost_label(eff.get('candidate_source'))}."]
    complete = rules.get("invariant.complete", {})
    unscored = [(side, complete.get(f"{side}_unscored", 0), complete.get(f"{side}_unscored_trials") or [])
                for side in ("champion", "candidate")]
    if any(named for _, _, named in unscored):
        # docs/gate.md: an unscored trial counts against the candidate, and the verdict file names it
        out += ["", "**Unscored trials, counted against the candidate** (a failure on its side, a pass on "
                "the champion's, in every statistic): " + "; ".join(
                    f"the {side}'s {n} (" + ", ".join(md_code(str(t)) for t in named)
                    + (", …" if n > len(named) else "") + ")" for side, n, named in unscored if named)
                + ". If the fault is the verifier's or the driver's, fix it and run both sides again."]
    iso = rules.get("invariant.isolated", {})
    if iso.get("note"):
        hosts = sorted(set(iso.get("champion_hosts_reached", []) + iso.get("candidate_hosts_reached", [])))
        out += ["", f"**Network.** The policy allows network, and attempts of these runs had it "
                f"(hosts reached: {', '.join(md_code(h) for h in hosts) or 'none'}); {md_line(iso['note'])}."]
    return out


_ROLE_LABEL = {"candidate": "the agent (its own usage)", "driver": "episode drivers (a simulated user)",
               "judge": "command verifiers (a judge)"}


def _spend_section(d: Decision) -> list[str]:
    """Spend by role per side (docs/episodes.md): only the agent's enters cost and efficiency."""
    if not d.spend:
        return []
    sides = [d.spend.get("champion", {}), d.spend.get("candidate", {})]

    def cell(t: SpendTotal | None) -> str:
        if t is None or t.attempts == 0:
            return "–"
        return f"{fmt(t.cost_usd)} USD, {fmt(t.input_tokens)} in / {fmt(t.output_tokens)} out tokens"

    return ["", "## Spend by role (every attempt)", "",
            *_table(["role", "champion", "candidate"],
                    [[_ROLE_LABEL[role], *(cell(s.get(role)) for s in sides)] for role in SPEND_ROLES]),
            "", "Cost and efficiency above count the agent's spend alone."]


def checkpoint_label(checkpoint_id: str, names: Mapping[str, str]) -> str:
    """A checkpoint as people know it: its name (checkpoint.toml, from the seal registry), in
    a code span as all untrusted text is, and a short id."""
    name = names.get(checkpoint_id)
    return (f"{md_code(name)} `{short_digest(checkpoint_id)}`" if name
            else f"`{short_digest(checkpoint_id)}` (no name: not in this home's seal registry)")


def _pts(x: Any) -> str:
    return "–" if not isinstance(x, (int, float)) else f"{100 * x:+.1f} points"


def _figures(d: Decision, names: Mapping[str, str], decision_file: str) -> list[str]:
    """The facts the verdict stands on, one line each."""
    rules = {r.name: r.figures() for r in d.rules}
    q, loss, eff = rules.get("fresh.quality", {}), rules.get("fresh.loss", {}), rules.get("fresh.efficiency", {})
    det = d.detectable
    lines = [
        f"- candidate: {checkpoint_label(d.candidate.checkpoint_id, names)}, run {md_code(d.candidate.run_id)}",
        f"- champion: {checkpoint_label(d.champion.checkpoint_id, names)}, run {md_code(d.champion.run_id)}",
        f"- policy: {md_code(d.policy.name)} v{d.policy.version} `{short_digest(d.policy.digest)}`"
        + (f", exception {md_code(d.exception)}" if d.exception else ""),
        f"- fresh suite: {count(det.tasks, 'task')}; mean_d {_pts(q.get('mean_d'))}, p better {fmt(q.get('p_one_sided'))}, "
        f"p worse {fmt(loss.get('p_worse'))}, {fmt(q.get('discordant'))} discordant tasks",
    ]
    if eff:
        closed = "" if not eff.get("why") else "; closed here, see **Cost** below"
        lines.append(f"- efficiency: {eff['metric']} ratio (candidate / champion) {fmt(eff.get('ratio'))}, upper "
                     f"{100 * (1 - eff['alpha']):g} % bound {fmt(eff.get('upper_bound'))} (the efficiency route needs "
                     f"at most {eff['efficiency_ratio']} with the bound below 1{closed})")
    needed = (f"; a win of {_pts(det.win_margin)} would need {count(det.tasks_needed, 'task')}"
              if det.tasks_needed is not None else "")
    lines.append(f"- smallest difference this fresh suite could detect (α {det.alpha}, 80 % power): "
                 f"{_pts(det.mde)} with {count(det.tasks, 'task')}{needed}")
    lines += [f"- comparison `{short_digest(d.comparison_digest)}`; decision file {md_code(decision_file)}"]
    return lines


def _sign_lines(d: Decision, signoffs: Sequence[SignOff], decision_file: str, prog: str) -> list[str]:
    """Whether a person signed, and by whom; or the command that signs, as the person
    invokes the rig (docs/gate.md)."""
    if d.advisory:
        return ["**ADVISORY**: this decision applies a policy the runs did not pin; it cannot be signed."]
    command = f"{prog} sign {shlex.quote(decision_file)}"
    agree, override = ("--approve", "--reject") if d.verdict in _PROMOTIONS else ("--reject", "--approve")
    how = (f"{md_code(f'{command} {agree} --by NAME')} agrees with the gate; `{override}` overrides it and needs "
           "`--reason TEXT`")
    if not signoffs:
        return [f"**Not signed yet.** A person signs it: {how}."]
    last = signoffs[-1]
    word = "approved" if last.action == "approve" else "rejected"
    stance = "agrees with the gate" if last.agrees_with_gate else f"overrides the gate: {md_code(last.reason or '')}"
    counts = "" if len(signoffs) == 1 else f" ({len(signoffs)} sign-offs; the last one counts)"
    return [f"**Signed: {word} by {md_code(last.by)}** at {format_ts(last.at)} ({stance}){counts}. "
            f"To change it, sign again: {how}."]


def verdict_headline(d: Decision) -> str:
    """The verdict file's title, which the HTML report repeats word for word (docs/report.md)."""
    if d.verdict == "block":  # its first sentence names what failed (core/gate.py `_blocked`)
        return "BLOCK: " + d.summary.split(" Also failing: ")[0].removeprefix("Blocked: ").rstrip(".")
    return _HEADLINE[d.verdict]


@dataclass(frozen=True)
class ReportLink:
    """Where the comparison's HTML report is, for the verdict file's pointer to it."""

    comparison_dir: str
    """The comparison bundle, as the person names it in a command."""
    href: str | None
    """report.html relative to the verdict file when it exists, else None."""


def _report_line(link: ReportLink, prog: str) -> str:
    """A pointer to the HTML report, or how to make one (docs/report.md). The verdict file is
    never digested (gate and sign rewrite it), so this line can change without touching a
    decision's digest."""
    make = md_code(f"{prog} report {shlex.quote(link.comparison_dir)}")  # a path: a person's, still text
    if link.href is None:
        return (f"**Plots and every task:** no HTML report yet; {make} makes one "
                "(report.html in the comparison bundle).")
    return (f"**Plots and every task:** [the HTML report]({link.href.replace(' ', '%20')}) "
            f"(made by {make}; run it again after new gates or sign-offs).")


def verdict_markdown(d: Decision, earlier: Sequence[GateLedgerEntry], decision_file: str,
                     signoffs: Sequence[SignOff] = (), names: Mapping[str, str] | None = None,
                     prog: str = "evalrig", report: ReportLink | None = None,
                     public: CurveSides | None = None) -> str:
    """The verdict file (docs/gate.md): the verdict and its reason, whether it is signed, the
    figures it stands on, what would change it, the rules, the sign-offs and the
    candidate's earlier gates. `names` maps checkpoint ids to their names; `prog` is the
    command the person runs the rig by; `report` where the HTML report is (or is made)."""
    names = names or {}
    lines = [
        f"# {md_line(verdict_headline(d))}",
        "",
        f"**Verdict: `{d.verdict}`** (reason: `{d.reason}`). {md_line(d.summary)}",
        "",
        *_sign_lines(d, signoffs, decision_file, prog),
        "",
        *_figures(d, names, decision_file),
    ]
    if report is not None:
        lines += ["", _report_line(report, prog)]
    lines += _caveats(d)
    if public is not None and (public.champion is not None or public.candidate is not None):
        lines += ["", f"**Public benchmarks** (reported, read by no rule): pass rate {pct(public.champion)} "
                  f"(champion), {pct(public.candidate)} (candidate)."]
    lines += _spend_section(d)
    lines += ["", "## What would change the answer", ""]
    lines += [f"- {md_line(w)}" for w in d.what_would_change] or ["- nothing short of new evidence"]
    lines += ["", "## Rules", ""]
    lines += _table(["rule", "outcome", "what it checks", "numbers"],
                    [[md_code(r.name), _outcome(r.name, r.held), md_line(r.says), _numbers(r.model_dump())]
                     for r in d.rules])
    if signoffs:
        lines += ["", f"## Sign-offs ({len(signoffs)})", ""]
        lines += _table(["at", "by", "action", "agrees with the gate", "reason"],
                        [[format_ts(s.at), md_code(s.by), s.action, fmt(s.agrees_with_gate),
                          md_code(s.reason) if s.reason else "–"]
                         for s in signoffs])
    lines += ["", f"## Earlier gates of this candidate ({len(earlier)})", ""]
    if earlier:
        lines += _table(
            ["at", "verdict", "reason", "champion", "policy", "exception", "comparison", "advisory"],
            [[format_ts(e.at), e.verdict, e.reason, checkpoint_label(e.champion_id, names),
              f"{md_code(e.policy.name)} v{e.policy.version}", md_code(e.exception) if e.exception else "–",
              f"`{short_digest(e.comparison_digest)}`", fmt(e.advisory)] for e in earlier],
        )
    else:
        lines.append("None: this is the first gate of this candidate.")
    return "\n".join(lines) + "\n"
