"""Markdown for people: `comparison.md` and the verdict file beside a decision.

Both are functions of values (the comparison, the decision, the ledger lines given),
so that the same inputs give the same text. The verdict file reads as an argument:
the verdict first, the reason in one sentence, the rules as a table, what would change
the answer, and the candidate's earlier gates (docs/gate.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evalrig.models.base import format_ts
from evalrig.models.comparison import Comparison, Decision, GateLedgerEntry, SuiteStats, TaskRow


def _f(x: Any, digits: int = 4) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def _short(digest: str) -> str:
    return digest.removeprefix("sha256:")[:12]


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
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
    lines = [f"## {name} ({s.tasks} tasks{both})", ""]
    if s.tasks == 0:
        return lines + ["No tasks in this suite.", ""]
    lines += _table(
        ["", "champion", "candidate"],
        [
            ["pass rate", _pct(s.champion.pass_rate), _pct(s.candidate.pass_rate)],
            ["pass rate se", _pct(s.champion.pass_rate_se), _pct(s.candidate.pass_rate_se)],
            ["mean reward", _f(s.champion.mean_reward), _f(s.candidate.mean_reward)],
            [f"pass^{k}", _f(s.champion.pass_hat_k.get(str(k))), _f(s.candidate.pass_hat_k.get(str(k)))],
            [f"pass@{k}", _f(s.champion.pass_at_k.get(str(k))), _f(s.candidate.pass_at_k.get(str(k)))],
            ["cost per task (USD)", _f(s.champion.cost_per_task), _f(s.candidate.cost_per_task)],
            ["cost source", cost_label(cost.champion_source if cost else None),
             cost_label(cost.candidate_source if cost else None)],
            ["wall s per task", _f(s.champion.wall_s_per_task), _f(s.candidate.wall_s_per_task)],
        ],
    )
    lines.append("")
    tb = s.t_bounds
    lines += _table(
        ["statistic", "value"],
        [
            ["mean_d", _f(s.mean_d)],
            ["se_d", _f(s.se_d)],
            ["better / worse / equal", f"{s.better} / {s.worse} / {s.equal}"],
            ["p one-sided (better)", f"{_f(s.p_one_sided)}" + (f" = {s.p_exact.one_sided}" if s.p_exact else "")],
            ["p worse", f"{_f(s.p_worse)}" + (f" = {s.p_exact.worse}" if s.p_exact else "")],
            ["p two-sided", _f(s.p_two_sided)],
            ["t bounds (97.5 % one-sided)", "–" if tb is None else f"[{_f(tb.lower)}, {_f(tb.upper)}]"],
            ["MDE (α 0.025, power 0.8)", _f(s.mde.value if s.mde else None)],
            ["McNemar two-sided p", _f(s.mcnemar.p_two_sided if s.mcnemar else None)],
        ] + [
            [f"{m} ratio (upper bound)", f"{_f(e.ratio)} ({_f(e.upper)})"] for m, e in s.efficiency.items()
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
        [[r.task_id, _rate(r.champion_passes, r.champion_n), _rate(r.candidate_passes, r.candidate_n),
          _f(r.d, 3), _f(r.fisher_p_worse, 3), f"{_f(r.champion_cost)} → {_f(r.candidate_cost)}"] for r in rows],
    )


def comparison_markdown(c: Comparison) -> str:
    f = c.facts
    lines = [
        "# Comparison",
        "",
        f"- champion: run `{c.champion.run_id}`, checkpoint `{_short(c.champion.checkpoint_id)}`",
        f"- candidate: run `{c.candidate.run_id}`, checkpoint `{_short(c.candidate.checkpoint_id)}`",
        f"- k = {c.repeat}, seed {c.seed}, task set `{_short(c.taskset_id)}`",
        f"- both runs complete: {_f(f.both_complete)}" + (" (compared with --allow-incomplete)"
                                                         if f.allow_incomplete else ""),
        f"- history: {f.history.message}",
        "",
    ]
    for name in ("fresh", "fixed", "invariant"):
        lines += _suite_section(name, c.suites[name], c.repeat)
    lines += ["## Calibration of the agents' estimates", ""]
    lines += _table(
        ["", "champion", "candidate"],
        [
            ["valid estimates", *(str(c.calibration[s].estimates) for s in ("champion", "candidate"))],
            ["Brier (p_success)", *(_f(c.calibration[s].brier) for s in ("champion", "candidate"))],
            ["time range coverage", *(_pct(c.calibration[s].time.coverage) for s in ("champion", "candidate"))],
            ["time interval score", *(_f(c.calibration[s].time.interval_score) for s in ("champion", "candidate"))],
            ["cost range coverage", *(_pct(c.calibration[s].cost.coverage) for s in ("champion", "candidate"))],
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

_SKIP_NUMBERS = {"name", "held", "says", "numbers"}  # numbers: the flat keys again


def _numbers(d: dict[str, Any]) -> str:
    parts = []
    for k, v in d.items():
        if k in _SKIP_NUMBERS or v is None or v == [] or v == {}:
            continue
        if isinstance(v, str) and v.startswith("sha256:"):
            v = _short(v)
        if isinstance(v, list):
            v = ", ".join(str(x.get("task_id", x)) if isinstance(x, dict) else str(x) for x in v[:10])
        parts.append(f"{k} {_f(v)}")
    return "; ".join(parts).replace("|", "\\|")


def _caveats(d: Decision) -> list[str]:
    """What the person who signs must know beyond the verdict: a closed cost route, network."""
    out: list[str] = []
    rules = {r.name: r.figures() for r in d.rules}
    eff = rules.get("fresh.efficiency", {})
    if eff.get("why"):
        out += ["", f"**Cost.** {eff['why']} Cost figures below: the champion's "
                f"{cost_label(eff.get('champion_source'))}, the candidate's {cost_label(eff.get('candidate_source'))}."]
    iso = rules.get("invariant.isolated", {})
    if iso.get("note"):
        hosts = sorted(set(iso.get("champion_hosts_reached", []) + iso.get("candidate_hosts_reached", [])))
        out += ["", f"**Network.** The policy allows network, and attempts of these runs had it "
                f"(hosts reached: {', '.join(hosts) or 'none'}); {iso['note']}."]
    return out


def verdict_markdown(d: Decision, earlier: Sequence[GateLedgerEntry], decision_file: str) -> str:
    lines = [
        f"# {_HEADLINE[d.verdict]}",
        "",
        f"**Verdict: `{d.verdict}`** (reason: `{d.reason}`). {d.summary}",
        "",
        f"- policy: {d.policy.name} v{d.policy.version} (`{_short(d.policy.digest)}`)"
        + (f", exception `{d.exception}`" if d.exception else ""),
        f"- candidate checkpoint `{d.candidate.checkpoint_id}` (run `{d.candidate.run_id}`)",
        f"- champion checkpoint `{d.champion.checkpoint_id}` (run `{d.champion.run_id}`)",
        f"- comparison `{d.comparison_digest}`",
        f"- decision file `{decision_file}`",
    ]
    if d.advisory:
        lines.append("- **ADVISORY**: this decision applies a policy the runs did not pin; it cannot be signed.")
    lines += _caveats(d)
    lines += ["", "## Rules", ""]
    lines += _table(["rule", "held", "requires", "numbers"],
                    [[f"`{r.name}`", "yes" if r.held else "**no**", r.says, _numbers(r.model_dump())]
                     for r in d.rules])
    lines += ["", "## What would change the answer", ""]
    lines += [f"- {w}" for w in d.what_would_change] or ["- nothing short of new evidence"]
    det = d.detectable
    lines += ["", f"Smallest fresh-suite difference this train could detect (α {det.alpha}, 80 % power): "
              f"{_f(det.mde)} with {det.tasks} tasks; the win margin {det.win_margin} would need "
              f"{_f(det.tasks_needed)} tasks.", ""]
    lines += [f"## Earlier gates of this candidate ({len(earlier)})", ""]
    if earlier:
        lines += _table(
            ["at", "verdict", "reason", "policy", "exception", "comparison", "advisory"],
            [[format_ts(e.at), e.verdict, e.reason, f"{e.policy.name} v{e.policy.version}", e.exception or "–",
              f"`{_short(e.comparison_digest)}`", _f(e.advisory)] for e in earlier],
        )
    else:
        lines.append("None: this is the first gate of this candidate.")
    lines += ["", "Sign with `evalrig sign DECISION_FILE --approve|--reject --by NAME [--reason TEXT]`."]
    return "\n".join(lines) + "\n"
