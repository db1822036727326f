"""The gate: a Comparison and a parsed policy in, a Decision out (docs/gate.md). Pure: the
store (`evalrig.store.decisions`) reads the bundle and the policy file and writes the decision.

Every rule is recorded under its name (docs/policy.md) with its numbers and `held`, where `held`
means "the condition the rule states is true" (for `fresh.loss` that is "a loss was
shown"). The verdict is the first line of the table that applies. p-values are compared
as exact rationals against the policy's alphas read as decimals (`0.025` is 1/40).

Three principles shape every rule:
- a null never satisfies a rule that grants (quality, noninferior, efficiency);
- a veto (`fixed.*`, `fresh.loss`) fails only on evidence: no statistic, no veto;
- every `fresh.*` rule needs `fresh.min_tasks`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import Any

from evalrig.core import stats
from evalrig.core.errors import ExitCode, invalid
from evalrig.core.words import count
from evalrig.models.base import format_ts
from evalrig.models.comparison import (
    CandidateRef,
    ChampionRef,
    Comparison,
    Decision,
    Inconclusiveness,
    PolicyRef,
    Reason,
    RuleResult,
    SideFacts,
    SuiteStats,
    Verdict,
)
from evalrig.models.gateway import Pricing
from evalrig.models.inputs import INVARIANT_CHECKS, InvariantCheck, PolicyFile
from evalrig.models.run import SandboxLevel

POWER = 0.8


def exact(value: float) -> Fraction:
    """A policy number as the decimal it was written as (0.025 -> 1/40, not the binary float)."""
    return Fraction(repr(value))


def _rule(name: str, held: bool, says: str, **numbers: Any) -> RuleResult:
    return RuleResult(name=name, held=held, says=says, numbers=numbers, **numbers)


# -- invariants --------------------------------------------------------------------------


def _sides(c: Comparison) -> tuple[SideFacts, SideFacts]:
    return c.facts.champion, c.facts.candidate


def _covers_taskset(side: SideFacts) -> bool:
    return all(side.run_suites.get(s, 0) == n for s, n in side.taskset_suites.items())


UNSCORED_NAMED = 20
"""How many unscored trials per side the decision names (the comparison lists up to 1000)."""


def rule_complete(c: Comparison, p: PolicyFile) -> RuleResult:
    limit = p.invariants.max_infra_error_rate
    ch, ca = _sides(c)

    def rate_ok(side: SideFacts) -> bool:
        return side.infra_error_rate is not None and side.infra_error_rate <= limit

    def final_ok(side: SideFacts) -> bool:
        # docs/gate.md: a side's final unscored trials within max_infra_error_rate of its plan
        return Fraction(side.final_unscored) <= exact(limit) * side.trials

    held = (
        all(s.status == "complete" and not s.subset and _covers_taskset(s) and rate_ok(s) and final_ok(s)
            for s in (ch, ca))
        and not c.facts.tasks_only_champion
        and not c.facts.tasks_only_candidate
        and ch.repeat == ca.repeat
        and ch.replay_of is None and ca.replay_of is None
    )
    replays = {f"{side}_replay_of": s.replay_of for side, s in (("champion", ch), ("candidate", ca))
               if s.replay_of is not None}
    return _rule(
        "invariant.complete", held,
        "both runs complete, not subsets, covering every suite of the task set, with the same "
        f"tasks and k, infra errors at most {limit}" + (", and neither a replay (run --replay reproduces, "
                                                       "it never decides)" if replays else ""),
        **replays,
        champion_status=ch.status, candidate_status=ca.status,
        champion_subset=ch.subset, candidate_subset=ca.subset,
        champion_covers_taskset=_covers_taskset(ch), candidate_covers_taskset=_covers_taskset(ca),
        champion_unscored=ch.unscored, candidate_unscored=ca.unscored,
        tasks_only_champion=len(c.facts.tasks_only_champion),
        tasks_only_candidate=len(c.facts.tasks_only_candidate),
        champion_repeat=ch.repeat, candidate_repeat=ca.repeat,
        champion_infra_error_rate=ch.infra_error_rate, candidate_infra_error_rate=ca.infra_error_rate,
        max_infra_error_rate=limit,
        champion_final_unscored=ch.final_unscored, candidate_final_unscored=ca.final_unscored,
        champion_final_unscored_ok=final_ok(ch), candidate_final_unscored_ok=final_ok(ca),
        # named in the verdict file: counted worst for the candidate (docs/gate.md)
        champion_unscored_trials=ch.unscored_counted_worst[:UNSCORED_NAMED],
        candidate_unscored_trials=ca.unscored_counted_worst[:UNSCORED_NAMED],
    )


def rule_sealed(c: Comparison, p: PolicyFile) -> RuleResult:
    ch, ca = _sides(c)

    def ok(s: SideFacts) -> bool:
        # No seal check recorded is no evidence of a sealed build, so it does not hold.
        return s.registered and s.seal_checks > 0 and s.seal_checks_matched == s.seal_checks

    return _rule(
        "invariant.sealed", ok(ch) and ok(ca),
        "both checkpoints registered in the seal registry and every seal check of both runs matched",
        champion_registered=ch.registered, candidate_registered=ca.registered,
        champion_seal_checks=ch.seal_checks, champion_seal_checks_matched=ch.seal_checks_matched,
        candidate_seal_checks=ca.seal_checks, candidate_seal_checks_matched=ca.seal_checks_matched,
    )


NETWORK_NOTE = ("the canary check cannot see what was sent over the network: a secret sent to an allowed "
                "host leaves no trace in the evidence the rig scans")


def rule_isolated(c: Comparison, p: PolicyFile) -> RuleResult:
    """Every attempt under bwrap and none with network, unless the policy allows network
    (`[invariants] allow_network = true`); then the hosts reached are listed instead."""
    ch, ca = _sides(c)
    allow = p.invariants.allow_network

    def count(s: SideFacts, level: SandboxLevel) -> int:
        return s.sandbox.get(level, 0)

    bwrap = all(count(s, "process") == 0 and count(s, "bwrap") > 0 for s in (ch, ca))
    networked = ch.network_attempts + ca.network_attempts
    says = ("every attempt of both runs ran under bwrap; attempts with network are allowed by the policy "
            "(allow_network = true) and their hosts are listed" if allow
            else "every attempt of both runs ran under bwrap, and none had network")
    return _rule(
        "invariant.isolated", bwrap and (allow or networked == 0), says,
        champion_bwrap=count(ch, "bwrap"), champion_process=count(ch, "process"),
        candidate_bwrap=count(ca, "bwrap"), candidate_process=count(ca, "process"),
        champion_network_attempts=ch.network_attempts, candidate_network_attempts=ca.network_attempts,
        allow_network=allow,
        champion_hosts_reached=ch.hosts_reached[:50], candidate_hosts_reached=ca.hosts_reached[:50],
        note=NETWORK_NOTE if allow and networked else None,
    )


def rule_policy_pinned(c: Comparison, p: PolicyFile, digest: str, advisory: bool = False) -> RuleResult:
    """Both runs pinned this policy (docs/gate.md): runs pinned to a *different* policy are not
    a failed rule but a refused input (§6), and --advisory is the one way past that refusal;
    so an advisory preview of another policy asks only that both runs pinned one policy,
    and records that the preview differs from it. Runs that pinned nothing fail either way."""
    pins = c.facts.policy_pins
    same = pins.champion is not None and pins.champion == pins.candidate
    preview = advisory and same and pins.champion != digest
    return _rule(
        "invariant.policy-pinned", same and (pins.champion == digest or preview),
        "both runs pinned this policy's digest" + (" (an advisory preview of another policy: "
                                                   "both runs pinned one policy)" if preview else ""),
        policy_digest=digest, champion_pin=pins.champion, candidate_pin=pins.candidate,
        advisory_preview=preview,
    )


def rule_fresh_after_seal(c: Comparison, p: PolicyFile, seen: Mapping[str, str] | None = None) -> RuleResult:
    """`seen` maps the content digest of every fresh task some earlier gate of *another*
    candidate judged on to that candidate's id, and of every task of a recorded export to
    that export (the shell reads both from the home; docs/gate.md, docs/reading.md). A task whose content is there was not made for this train: a
    regenerated copy of an old task (a new created_at, the same prompt, files and
    verifier) is not fresh. A fresh task whose content was not recorded cannot be shown
    fresh either."""
    seen = seen or {}
    sealed = c.facts.candidate_sealed_at
    created = c.facts.fresh_created_at
    content = c.facts.fresh_content
    early = sorted(t for t, at in created.items() if sealed is None or not at > sealed)
    earliest = min(created.values()) if created else None
    reused = sorted(t for t, d in content.items() if d in seen)
    unrecorded = sorted(t for t in created if t not in content)
    held = (not created or (sealed is not None and not early)) and not reused and not unrecorded
    return _rule(
        "invariant.fresh-after-seal", held,
        "every fresh task's created_at is after the candidate's registered sealed_at, and no fresh task's "
        "content (its digest without created_at) was in the fresh suite of a gate of another candidate or in a "
        "recorded export",
        candidate_sealed_at=_ts(sealed), fresh_tasks=len(created),
        earliest_created_at=_ts(earliest), not_after_seal=len(early), not_after_seal_tasks=early[:20],
        seen_before=len(reused), seen_before_tasks=reused[:20],
        seen_by_candidates=sorted({seen[content[t]] for t in reused})[:5],
        content_unrecorded=len(unrecorded), content_unrecorded_tasks=unrecorded[:20],
    )


def rule_no_secret_leak(c: Comparison, p: PolicyFile) -> RuleResult:
    ch, ca = _sides(c)
    return _rule(
        "invariant.no-secret-leak", ch.canary_found == 0 and ca.canary_found == 0,
        "no canary found in either run",
        champion_canary_found=ch.canary_found, candidate_canary_found=ca.canary_found,
        candidate_canary_attempts=ca.canary_attempts[:20],
    )


def rule_history_preserved(c: Comparison, p: PolicyFile) -> RuleResult:
    h = c.facts.history
    return _rule(
        "invariant.history-preserved", h.held,
        "the candidate's event log is an intact chain with the champion's as a byte-prefix "
        "(trivial where neither declares one)",
        champion_declared=h.champion_declared, candidate_declared=h.candidate_declared,
        champion_lines=h.champion_lines, candidate_lines=h.candidate_lines,
        chain_intact=h.chain_intact, chain_break_line=h.chain_break_line,
        champion_prefix=h.champion_prefix, detail=h.message,
    )


def rule_bundle_integrity(c: Comparison, p: PolicyFile) -> RuleResult:
    ch, ca = _sides(c)
    return _rule(
        "invariant.bundle-integrity", ch.integrity.ok and ca.integrity.ok,
        "every digest of both runs verified when compared",
        champion_verified_files=ch.integrity.verified_files, champion_problems=ch.integrity.problems[:20],
        candidate_verified_files=ca.integrity.verified_files, candidate_problems=ca.integrity.problems[:20],
        torn=ch.integrity.torn + ca.integrity.torn,
    )


def rule_invariant_suite(c: Comparison, p: PolicyFile) -> RuleResult:
    k = c.repeat
    rows = c.suites["invariant"].per_task
    failing = sorted(
        r.task_id for r in rows
        if not (r.champion_passes == r.champion_n == k and r.candidate_passes == r.candidate_n == k)
    )
    return _rule(
        "invariant.invariant-suite", not failing,
        "every invariant-suite task passed on every trial, both sides",
        tasks=len(rows), failing=len(failing), failing_tasks=failing[:20],
    )


INVARIANT_RULES: dict[InvariantCheck, Callable[[Comparison, PolicyFile], RuleResult]] = {
    "complete": rule_complete,
    "sealed": rule_sealed,
    "isolated": rule_isolated,
    "no-secret-leak": rule_no_secret_leak,
    "history-preserved": rule_history_preserved,
    "bundle-integrity": rule_bundle_integrity,
    "invariant-suite": rule_invariant_suite,
}


def _ts(ts: datetime | None) -> str | None:
    return None if ts is None else format_ts(ts)


# -- fixed suite: veto only --------------------------------------------------------------


def rule_fixed_task(c: Comparison, p: PolicyFile) -> RuleResult:
    suite = c.suites["fixed"]
    alpha = exact(p.fixed.alpha)
    stable, flaky, regressed = [], [], []
    for r in suite.per_task:
        if r.champion_n == 0 or r.candidate_n == 0:
            continue  # nothing scored: no evidence, no veto
        if Fraction(r.champion_passes, r.champion_n) >= exact(p.fixed.stable_min_rate):
            stable.append(r.task_id)
            if r.fisher_p_worse_exact is not None and Fraction(r.fisher_p_worse_exact) <= alpha:
                regressed.append({"task_id": r.task_id, "champion": f"{r.champion_passes}/{r.champion_n}",
                                  "candidate": f"{r.candidate_passes}/{r.candidate_n}",
                                  "fisher_p_worse": r.fisher_p_worse})
        else:
            flaky.append(r.task_id)
    return _rule(
        "fixed.task", not regressed,
        f"no stable fixed task (champion pass rate >= {p.fixed.stable_min_rate}) on which the "
        f"candidate is worse with Fisher p <= {p.fixed.alpha}",
        alpha=p.fixed.alpha, stable_min_rate=p.fixed.stable_min_rate, tasks=suite.tasks,
        stable=len(stable), flaky=len(flaky), flaky_tasks=flaky[:50], regressed=regressed[:50],
    )


def rule_fixed_aggregate(c: Comparison, p: PolicyFile) -> RuleResult:
    suite = c.suites["fixed"]
    a = exact(p.fixed.aggregate_alpha)
    # Fewer than two tasks: no statistic, so no evidence of a regression.
    worse = suite.p_exact is not None and Fraction(suite.p_exact.worse) <= a
    return _rule(
        "fixed.aggregate", not worse,
        f"over all fixed tasks, the sign-flip p_worse > {p.fixed.aggregate_alpha}",
        aggregate_alpha=p.fixed.aggregate_alpha, tasks=suite.tasks, mean_d=suite.mean_d,
        p_worse=suite.p_worse, p_worse_exact=suite.p_exact.worse if suite.p_exact else None,
    )


# -- fresh suite: the only one that can promote ------------------------------------------


_SOURCE_WORDS = {
    "reported": "self-reported (the agents' own usage.json)",
    "missing": "missing",
    "mixed": "partly self-reported, estimated, replayed or missing",
    "estimated": "partly the rig's own estimate (a provider that returned no usage)",
    "replayed": "a replay's recording (run --replay reproduces, it never decides)",
    None: "not recorded",
}


def route_closed(metric: str, champion: str | None, candidate: str | None,
                 pricing: Pricing | None = None) -> str | None:
    """Why the efficiency route cannot grant on these figures, in one sentence; None when it can.

    An efficiency win stands only on figures the rig measured. Wall and CPU time
    always are; cost is metered only where the rig meters model spend (a later step), never
    when the agent writes it into usage.json: an agent that under-reports its cost must not
    win by it. Metered cost (the model gateway's, docs/gateway.md) may grant, priced for both
    runs with one table: `pricing` says which, or why no one table could price them (then
    the route is closed)."""
    if metric != "cost":
        return None
    if champion == "metered" and candidate == "metered":
        if pricing is not None and pricing.closed is not None:
            return f"The cost route to promotion is closed: {pricing.closed}."
        return None
    if champion == candidate:
        figures = f"both sides' cost figures are {_SOURCE_WORDS.get(champion, champion)}"
    else:
        figures = (f"the champion's cost figures are {_SOURCE_WORDS.get(champion, champion)} and the "
                   f"candidate's {_SOURCE_WORDS.get(candidate, candidate)}")
    return ("The cost route to promotion is closed: a cost win needs cost the rig metered on both sides, "
            f"and {figures}, which never grant, since an agent that under-reports its cost must not win by it "
            "(cost is metered only when a model gateway serves both runs: run --gateway FILE).")


def _priced_with(pricing: Pricing) -> str:
    """The one price table of a comparison, as the decision and the verdict file name it."""
    return (f"genai-prices {pricing.genai_prices} with the gateway file's prices {pricing.prices_digest}, "
            f"as of {pricing.as_of}")


@dataclass(frozen=True)
class FreshRules:
    min_tasks: RuleResult
    quality: RuleResult
    noninferior: RuleResult
    efficiency: RuleResult
    loss: RuleResult
    detectable: Inconclusiveness


def _p(s: SuiteStats, which: str) -> Fraction | None:
    return None if s.p_exact is None else Fraction(getattr(s.p_exact, which))


def paired(s: SuiteStats) -> int:
    """The n of a suite's statistics: its tasks scored on both sides (docs/statistics.md). A task
    that one side never scored (a subset, or every trial faulted) gives no evidence, so
    it counts toward neither min_tasks nor the bounds."""
    return s.tasks if s.paired is None else s.paired


def fresh_rules(c: Comparison, p: PolicyFile) -> FreshRules:
    s, f, k = c.suites["fresh"], p.fresh, c.repeat
    n = paired(s)
    alpha = exact(f.alpha)
    enough = n >= f.min_tasks
    min_tasks = _rule("fresh.min_tasks", enough, f"the fresh suite has at least {count(f.min_tasks, 'task')}",
                      tasks=n, min_tasks=f.min_tasks, **({"tasks_in_suite": s.tasks} if s.tasks != n else {}))

    p_one, p_worse = _p(s, "one_sided"), _p(s, "worse")
    mean = None if s.mean_d_exact is None else Fraction(s.mean_d_exact)
    quality = _rule(
        "fresh.quality",
        enough and p_one is not None and mean is not None and s.discordant >= f.min_discordant
        and p_one <= alpha and mean >= exact(f.win_margin),
        f"discordant >= {f.min_discordant}, p_one_sided <= {f.alpha} and mean_d >= {f.win_margin}",
        discordant=s.discordant, min_discordant=f.min_discordant, p_one_sided=s.p_one_sided,
        p_one_sided_exact=s.p_exact.one_sided if s.p_exact else None, alpha=f.alpha,
        mean_d=s.mean_d, win_margin=f.win_margin,
    )

    lower = se_floored = None
    if s.mean_d is not None and s.se_d is not None and n >= 2:
        # Floored so that a suite where every task agrees cannot claim a zero-width bound.
        se_floored = max(s.se_d, 1.0 / (k * n))
        b = stats.t_bounds(s.mean_d, se_floored, n, f.alpha)
        lower = b.lower if b is not None else None
    noninferior = _rule(
        "fresh.noninferior",
        enough and lower is not None and lower > -f.noninferiority_margin,
        f"the lower one-sided {1 - f.alpha:g} t bound of mean_d (se_d floored at 1/(k*n)) is above "
        f"-{f.noninferiority_margin}",
        mean_d=s.mean_d, se_d=s.se_d, se_floored=se_floored, lower_bound=lower, alpha=f.alpha,
        noninferiority_margin=f.noninferiority_margin,
    )

    eff = s.efficiency.get(f.efficiency_metric)
    upper = None
    if eff is not None and eff.log_mean is not None and eff.log_sd is not None and eff.n >= 2:
        b = stats.t_bounds(eff.log_mean, eff.log_sd / math.sqrt(eff.n), eff.n, f.alpha)
        upper = math.exp(b.upper) if b is not None else None
    ratio = eff.ratio if eff is not None else None
    sources = (eff.champion_source, eff.candidate_source) if eff is not None else (None, None)
    why = route_closed(f.efficiency_metric, *sources, pricing=c.pricing)
    worst = s.unscored_counted_worst
    if why is None and worst is not None and (worst.champion or worst.candidate):
        # docs/gate.md: a fault must not drop an expensive attempt's cost from the ratio
        why = (f"The efficiency route is closed: the fresh suite has unscored trials (champion "
               f"{worst.champion}, candidate {worst.candidate}), whose cost no ratio can count.")
    efficiency = _rule(
        "fresh.efficiency",
        enough and noninferior.held and p_worse is not None and p_worse > alpha
        and ratio is not None and upper is not None
        and exact(ratio) <= exact(f.efficiency_ratio) and upper < 1 and why is None,
        f"fresh.noninferior holds, p_worse > {f.alpha}, and the {f.efficiency_metric} ratio is <= "
        f"{f.efficiency_ratio} with its upper {1 - f.alpha:g} bound below 1, from figures the rig measured "
        "on both sides",
        metric=f.efficiency_metric, ratio=ratio, upper_bound=upper, efficiency_ratio=f.efficiency_ratio,
        noninferior=noninferior.held, p_worse=s.p_worse, alpha=f.alpha,
        tasks_with_values=eff.n if eff else 0, tasks_missing_values=eff.missing if eff else n,
        champion_source=sources[0], candidate_source=sources[1], metered=why is None, why=why,
        **({"priced_with": _priced_with(c.pricing)} if f.efficiency_metric == "cost" and c.pricing else {}),
    )

    loss = _rule(
        "fresh.loss", enough and p_worse is not None and p_worse <= alpha,
        f"the candidate is worse: sign-flip p_worse <= {f.alpha}",
        p_worse=s.p_worse, p_worse_exact=s.p_exact.worse if s.p_exact else None, alpha=f.alpha,
    )

    mde = stats.floored_mde(s.se_d, n, k, f.alpha, f.min_discordant, POWER)
    needed = (stats.tasks_for_margin(s.se_d, n, k, f.alpha, f.win_margin, f.min_tasks, f.min_discordant, POWER)
              if f.win_margin > 0 else None)
    detectable = Inconclusiveness(alpha=f.alpha, mde=mde, win_margin=f.win_margin, tasks=n,
                                  tasks_needed=needed)
    return FreshRules(min_tasks, quality, noninferior, efficiency, loss, detectable)


# -- the verdict -------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    verdict: Verdict
    reason: Reason
    summary: str


def _verdict(
    c: Comparison, p: PolicyFile, invariants: list[RuleResult], fixed: list[RuleResult],
    fr: FreshRules, exception: str | None,
) -> Outcome:
    failed_inv = [r for r in invariants if not r.held]
    if failed_inv:
        return Outcome("block", "invariant", _blocked(failed_inv))
    failed_fixed = [r for r in fixed if not r.held]
    if failed_fixed:
        return Outcome("block", "regression", _blocked(failed_fixed))
    # --allow-incomplete comparisons never promote, whatever the policy lists.
    promotable = c.facts.both_complete
    s = c.suites["fresh"]
    if promotable and fr.quality.held:
        return Outcome("promote", "quality",
                       f"Promote: the candidate is better on the fresh suite by {_pts(s.mean_d)} "
                       f"(p = {_num(s.p_one_sided)}).")
    if promotable and fr.efficiency.held:
        metered = ""
        if p.fresh.efficiency_metric == "cost" and c.pricing is not None:
            metered = (" Its cost was metered by the model gateway on every scored attempt of both runs and "
                       f"priced with one table: {_priced_with(c.pricing)}.")
        return Outcome("promote", "efficiency",
                       f"Promote: the candidate is as good and its {p.fresh.efficiency_metric} is "
                       f"{_num(fr.efficiency.figures()['ratio'])}x the champion's.{metered}")
    if promotable and exception is not None and fr.noninferior.held:
        return Outcome("promote-maintenance", "maintenance",
                       f"Promote under the exception {exception!r}: the candidate is not worse than the "
                       "champion and needs no win.")
    if promotable and exception is not None and not fr.min_tasks.held:
        return Outcome("promote-maintenance", "maintenance",
                       f"Promote under the exception {exception!r}: the fresh suite has {count(paired(s), 'task')}, "
                       f"fewer than {p.fresh.min_tasks}, too few to judge whether the candidate is worse; "
                       "the exception needs no win.")
    if fr.loss.held:
        return Outcome("keep-champion", "loss",
                       f"Keep the champion: the candidate is worse on the fresh suite by {_pts(-(s.mean_d or 0))} "
                       f"(p = {_num(s.p_worse)}).")
    d = fr.detectable
    if not fr.min_tasks.held or d.mde is None or d.mde > p.fresh.win_margin or not promotable:
        why = (f"the fresh suite has {count(paired(s), 'task')}, fewer than {p.fresh.min_tasks}" if not fr.min_tasks.held
               else "the runs are incomplete" if not promotable
               else f"it could only detect a difference of {_pts(d.mde)}, more than the win margin "
                    f"{_pts(p.fresh.win_margin)}")
        return Outcome("keep-champion", "inconclusive", f"Keep the champion: inconclusive, {why}.")
    return Outcome("keep-champion", "tie",
                   f"Keep the champion: the fresh suite could show a win of {_pts(p.fresh.win_margin)} "
                   f"and showed none (mean_d {_pts(s.mean_d)}).")


def _blocked(failed: list[RuleResult]) -> str:
    """A block's one sentence: the first failing rule by name with what failed (the task,
    the side, the count), then any other failing rules by name (docs/gate.md)."""
    first = failed[0]
    sentence = f"Blocked: {first.name} does not hold: {_what_failed(first)}."
    if len(failed) > 1:
        sentence += f" Also failing: {', '.join(r.name for r in failed[1:])}."
    return sentence


def _listed(items: list[Any], count: int, noun: str) -> str:
    """`3 fresh tasks (a, b, c)`, at most five named, with how many more."""
    names = ", ".join(str(x) for x in items[:5])
    more = f" and {count - 5} more" if count > 5 else ""
    plural = f"{count} {noun}{'' if count == 1 else 's'}"
    return f"{plural} ({names}{more})" if names else plural


def _what_failed(r: RuleResult) -> str:
    f = r.figures()
    if r.name == "invariant.complete":
        parts = [f"the {side} run is {f[side + '_status']}" for side in ("champion", "candidate")
                 if f[side + "_status"] != "complete"]
        parts += [f"the {side} run is a subset of the task set" for side in ("champion", "candidate")
                  if f[side + "_subset"] or not f[side + "_covers_taskset"]]
        parts += [f"{f['tasks_only_' + side]} tasks only the {side} ran" for side in ("champion", "candidate")
                  if f["tasks_only_" + side]]
        if f["champion_repeat"] != f["candidate_repeat"]:
            parts.append(f"k differs (champion {f['champion_repeat']}, candidate {f['candidate_repeat']})")
        parts += [f"the {side}'s infra error rate {_num(f[side + '_infra_error_rate'])} is above "
                  f"{f['max_infra_error_rate']}" for side in ("champion", "candidate")
                  if f[side + "_infra_error_rate"] is None or f[side + "_infra_error_rate"] > f["max_infra_error_rate"]]
        parts += [f"the {side}'s {f[side + '_final_unscored']} trials unscored for good are more than "
                  f"{f['max_infra_error_rate']} of its planned trials" for side in ("champion", "candidate")
                  if f.get(side + "_final_unscored_ok") is False]
        return "; ".join(parts) or "the runs are not complete"
    if r.name == "invariant.sealed":
        parts = [f"the {side}'s checkpoint is not registered in the seal registry"
                 for side in ("champion", "candidate") if not f[side + "_registered"]]
        parts += [f"{f[side + '_seal_checks'] - f[side + '_seal_checks_matched']} of {f[side + '_seal_checks']} "
                  f"seal checks of the {side}'s run did not match" if f[side + "_seal_checks"]
                  else f"the {side}'s run recorded no seal check" for side in ("champion", "candidate")
                  if not f[side + "_seal_checks"] or f[side + "_seal_checks_matched"] != f[side + "_seal_checks"]]
        return "; ".join(parts)
    if r.name == "invariant.isolated":
        parts = [f"{_listed([], f[side + '_process'], 'attempt')} of the {side} ran without bwrap"
                 for side in ("champion", "candidate") if f[side + "_process"]]
        parts += [f"the {side} run has no attempt under bwrap" for side in ("champion", "candidate")
                  if not f[side + "_bwrap"] and not f[side + "_process"]]
        if not f["allow_network"]:
            parts += [f"{_listed([], f[side + '_network_attempts'], 'attempt')} of the {side} had network"
                      for side in ("champion", "candidate") if f[side + "_network_attempts"]]
        return "; ".join(parts)
    if r.name == "invariant.policy-pinned":
        def pin(side: str) -> str:
            v = f[side + "_pin"]
            return "no policy pinned (run without --policy)" if v is None else f"the policy {v}"
        if f["champion_pin"] != f["candidate_pin"]:
            return f"the champion's run has {pin('champion')}, the candidate's {pin('candidate')}"
        if f["champion_pin"] is None:
            return "neither run pinned a policy (both ran without --policy)"
        return f"both runs pinned the policy {f['champion_pin']}, not this one ({f['policy_digest']})"
    if r.name == "invariant.fresh-after-seal":
        parts = []
        if f["not_after_seal"]:
            parts.append(_listed(f["not_after_seal_tasks"], f["not_after_seal"], "fresh task")
                         + f" created no later than the candidate's seal ({f['candidate_sealed_at'] or 'never sealed'})")
        if f["seen_before"]:
            parts.append(_listed(f["seen_before_tasks"], f["seen_before"], "fresh task")
                         + " already in the fresh suite of another candidate's gate")
        if f["content_unrecorded"]:
            parts.append(_listed(f["content_unrecorded_tasks"], f["content_unrecorded"], "fresh task")
                         + " with no recorded content digest")
        if not parts and f["candidate_sealed_at"] is None:
            parts.append("the candidate has no registered sealed_at")
        return "; ".join(parts)
    if r.name == "invariant.no-secret-leak":
        parts = [f"the canary was found in {_listed([], f[side + '_canary_found'], 'attempt')} of the {side}"
                 for side in ("candidate", "champion") if f[side + "_canary_found"]]
        if f.get("candidate_canary_attempts"):
            parts[0] += f" ({', '.join(f['candidate_canary_attempts'][:3])})"
        return "; ".join(parts)
    if r.name == "invariant.history-preserved":
        return str(f["detail"])
    if r.name == "invariant.bundle-integrity":
        problems = f.get("champion_problems", []) + f.get("candidate_problems", []) + f.get("torn", [])
        return f"{problems[0]}" if problems else "a run's digests were not verified"
    if r.name == "invariant.invariant-suite":
        return _listed(f["failing_tasks"], f["failing"], "invariant-suite task") + " did not pass on every trial"
    if r.name == "fixed.task":
        worst = f["regressed"][0]
        first = (f"the candidate regressed on the stable fixed task {worst['task_id']} (champion "
                 f"{worst['champion']}, candidate {worst['candidate']}, Fisher p {_num(worst['fisher_p_worse'])})")
        return first + (f", and on {len(f['regressed']) - 1} more" if len(f["regressed"]) > 1 else "")
    if r.name == "fixed.aggregate":
        return (f"the fixed suite as a whole is worse (mean_d {_pts(f['mean_d'])}, p_worse {_num(f['p_worse'])} "
                f"<= {f['aggregate_alpha']})")
    return r.says


def _pts(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:+.1f} points"


def _num(x: Any) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def _what_would_change(c: Comparison, p: PolicyFile, out: Outcome, invariants: list[RuleResult],
                       fixed: list[RuleResult], fr: FreshRules) -> list[str]:
    lines: list[str] = []
    if out.verdict == "block":
        for r in invariants + fixed:
            if not r.held:
                lines.append(f"{r.name} holding ({r.says}).")
        return lines
    if out.verdict.startswith("promote"):
        return _what_would_undo(c, p, out, fr)
    d = fr.detectable
    if not fr.min_tasks.held:
        lines.append(f"A fresh suite of at least {count(p.fresh.min_tasks, 'task')} (it has {paired(c.suites['fresh'])}).")
    if not c.facts.both_complete:
        lines.append("Complete runs on both sides (compare ran with --allow-incomplete).")
    if d.mde is not None and d.tasks_needed is not None and d.mde > p.fresh.win_margin:
        lines.append(f"About {d.tasks_needed} fresh tasks, so that a {_pts(p.fresh.win_margin)} win is "
                     f"detectable (now {_pts(d.mde)} at alpha {p.fresh.alpha}).")
    if out.verdict == "keep-champion" and out.reason != "loss":
        lines.append(f"A fresh-suite win: mean_d >= {p.fresh.win_margin}, p_one_sided <= {p.fresh.alpha} and "
                     f"at least {p.fresh.min_discordant} discordant tasks (now mean_d {_num(c.suites['fresh'].mean_d)}, "
                     f"p {_num(c.suites['fresh'].p_one_sided)}, discordant {c.suites['fresh'].discordant}).")
        if fr.efficiency.figures().get("why"):
            lines.append(f"Not a lower {p.fresh.efficiency_metric}: {fr.efficiency.figures()['why']}")
        else:
            lines.append(f"Or non-inferiority with a {p.fresh.efficiency_metric} ratio <= {p.fresh.efficiency_ratio} "
                         f"and an upper bound below 1 (now ratio {_num(fr.efficiency.figures()['ratio'])}).")
        if p.exceptions:
            lines.append(f"Or an exception of the policy ({', '.join(sorted(p.exceptions))}) with a non-inferior "
                         "candidate.")
    if out.reason == "loss":
        lines.append("A candidate that is not significantly worse on the fresh suite.")
    return lines


def _what_would_undo(c: Comparison, p: PolicyFile, out: Outcome, fr: FreshRules) -> list[str]:
    """What would turn a promotion into another answer: the figures its route stands on,
    each beside the threshold it must stay on the right side of, what the next route
    would say without it, and what would block it (docs/gate.md)."""
    f = p.fresh
    q, eff, ni = fr.quality.figures(), fr.efficiency.figures(), fr.noninferior.figures()
    efficiency_now = (f"the efficiency route would still promote ({f.efficiency_metric} ratio {_num(eff['ratio'])}, "
                      f"upper bound {_num(eff['upper_bound'])})" if fr.efficiency.held
                      else f"the efficiency route would not grant either (its {f.efficiency_metric} figures are "
                           "not ones the rig measured)" if eff.get("why")
                      else f"the efficiency route would not grant either ({f.efficiency_metric} ratio "
                           f"{_num(eff['ratio'])}, upper bound {_num(eff['upper_bound'])}; it needs <= "
                           f"{f.efficiency_ratio} and a bound below 1)")
    lines: list[str] = []
    if out.reason == "quality":
        lines.append(f"The quality win stands on {q['discordant']} discordant tasks (at least {f.min_discordant} "
                     f"needed), p_one_sided {_num(q['p_one_sided'])} (at most {f.alpha}) and mean_d "
                     f"{_pts(q['mean_d'])} (at least {_pts(f.win_margin)}); with any of them across its threshold "
                     f"there is no quality win, and {efficiency_now}.")
    elif out.reason == "efficiency":
        lines.append(f"The efficiency win stands on the {f.efficiency_metric} ratio {_num(eff['ratio'])} (at most "
                     f"{f.efficiency_ratio}) with its upper bound {_num(eff['upper_bound'])} (below 1), and the "
                     f"lower bound of mean_d {_pts(ni['lower_bound'])} (above {_pts(-f.noninferiority_margin)}); "
                     "with any of them across its threshold there is no efficiency win.")
    elif fr.min_tasks.held:
        lines.append(f"The exception stands on non-inferiority: the lower bound of mean_d {_pts(ni['lower_bound'])} "
                     f"is above {_pts(-f.noninferiority_margin)}; a candidate shown worse by more than that "
                     "keeps the champion.")
    else:
        lines.append(f"The exception promotes because the fresh suite ({count(paired(c.suites['fresh']), 'task')}) is too "
                     f"small to judge; with {f.min_tasks} or more it would need the candidate shown not worse "
                     f"than the champion by more than {_pts(f.noninferiority_margin)}.")
    lines.append("Any invariant failing, or a stable fixed task regressing, would block it instead (each holds "
                 "now: see the rules).")
    return lines


def decide(
    comparison: Comparison,
    policy: PolicyFile,
    policy_digest: str,
    exception: str | None,
    advisory: bool,
    comparison_digest: str,
    seen_fresh: Mapping[str, str] | None = None,
) -> Decision:
    """Apply the policy to the comparison. Raises exit 4 for an exception the policy lacks.

    `seen_fresh` maps the content digest of every fresh task an earlier gate of another
    candidate judged on to that candidate's id (`invariant.fresh-after-seal`); the shell
    reads it from the gate ledger, so that this function stays pure."""
    if exception is not None and exception not in policy.exceptions:
        known = ", ".join(sorted(policy.exceptions)) or "none"
        raise invalid(f"the policy has no exception {exception!r} (it has: {known})",
                      field="exceptions", hint="name one of the policy's [exceptions], or gate without --exception")
    listed = set(policy.invariants.checks)
    invariants = []
    for name in INVARIANT_CHECKS:  # in the order the docs list them, whatever the policy's
        if name not in listed:
            continue  # only the invariants the policy lists are applied
        if name == "policy-pinned":
            invariants.append(rule_policy_pinned(comparison, policy, policy_digest, advisory))
        elif name == "fresh-after-seal":
            invariants.append(rule_fresh_after_seal(comparison, policy, seen_fresh))
        else:
            invariants.append(INVARIANT_RULES[name](comparison, policy))
    fixed = [rule_fixed_task(comparison, policy), rule_fixed_aggregate(comparison, policy)]
    fr = fresh_rules(comparison, policy)
    out = _verdict(comparison, policy, invariants, fixed, fr, exception)
    rules = invariants + fixed + [fr.min_tasks, fr.quality, fr.noninferior, fr.efficiency, fr.loss]
    return Decision(
        verdict=out.verdict, reason=out.reason, summary=out.summary, rules=rules,
        policy=PolicyRef(name=policy.name, version=policy.version, digest=policy_digest),
        comparison_digest=comparison_digest,
        champion=ChampionRef(checkpoint_id=comparison.champion.checkpoint_id, run_id=comparison.champion.run_id),
        candidate=CandidateRef(checkpoint_id=comparison.candidate.checkpoint_id, run_id=comparison.candidate.run_id),
        exception=exception, advisory=advisory, detectable=fr.detectable,
        what_would_change=_what_would_change(comparison, policy, out, invariants, fixed, fr),
        tripwires=policy.tripwires, watch=policy.watch, invariants=policy.invariants,
        spend=({"champion": comparison.facts.champion.spend or {}, "candidate": comparison.facts.candidate.spend or {}}
               if comparison.facts.champion.spend or comparison.facts.candidate.spend else None),
    )


EXIT_OF_VERDICT: dict[Verdict, ExitCode] = {
    "promote": ExitCode.OK, "promote-maintenance": ExitCode.OK, "keep-champion": ExitCode.KEEP,
    "block": ExitCode.BLOCK,
}
