"""compare, gate and verify on runs a model gateway served (docs/gateway.md, "Cost that
decides"), through eval.sh: one price table for both runs, metered efficiency, the refusals
of unlike setups, replays that never decide, and verify pricing every call again."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from gate_bundles import T0, Call, Side, Task, write_run
from redteam import SMALL_POLICY, eval_sh

from evalrig.core.digest import sha256_bytes
from evalrig.core.pricing import genai_prices_version, prices_digest
from evalrig.models.base import format_ts
from evalrig.models.gateway import (
    CallUsage,
    GatewayFacts,
    ModelCall,
    ModelPrice,
    ReplayOf,
    UpstreamFacts,
)

POLICY_DIGEST = sha256_bytes(SMALL_POLICY.encode())


def facts(prices: dict[str, ModelPrice] | None = None, base_url: str = "https://api.openai.com/v1") -> GatewayFacts:
    prices = prices or {}
    return GatewayFacts(file_digest=sha256_bytes(b"gateway.toml"), genai_prices=genai_prices_version(),
                        prices_digest=prices_digest(prices),
                        upstreams={"openai": UpstreamFacts(api="openai", base_url=base_url, price_provider="openai")},
                        prices=prices)


def tasks(calls: list[Call], fresh: int = 12) -> dict[str, Task]:
    """Every attempt passes and makes `calls`: the two sides differ only in what they cost."""
    out = {f"fresh-{i:03d}": Task("fresh", [True] * 5, calls=calls) for i in range(fresh)}
    out["fixed-000"] = Task("fixed", [True] * 5, calls=calls)
    out["inv-000"] = Task("invariant", [True] * 5, calls=calls)
    return out


# the champion on an expensive model, its lines priced by an older, cheaper table than today's
EXPENSIVE_STALE = [Call("openai/gpt-4.1", cost_usd=0.001)]
CHEAP = [Call("openai/gpt-4.1-mini")]  # priced with today's table: $0.0012 a call


def train(tmp_path: Path, home: Path, champion: Side, candidate: Side) -> tuple[Path, Path, Path]:
    a = write_run(tmp_path / "a", champion, home)
    b = write_run(tmp_path / "b", candidate, home)
    policy = tmp_path / "policy.toml"
    policy.write_text(SMALL_POLICY)
    return a, b, policy


def side(name: str, calls: list[Call], **kw: object) -> Side:
    kw.setdefault("gateway", facts())
    return Side(name, tasks(calls), policy_digest=POLICY_DIGEST, **kw)  # type: ignore[arg-type]


def decision_of(cmp: Path) -> dict:
    return json.loads((cmp / "decisions" / "redteam-v1.json").read_text())


def rule_of(d: dict, name: str) -> dict:
    return next(r for r in d["rules"] if r["name"] == name)


def test_metered_cost_priced_with_one_table_promotes_on_efficiency(tmp_path: Path, evalrig_home: Path) -> None:
    a, b, policy = train(tmp_path, evalrig_home, side("champ", EXPENSIVE_STALE), side("cand", CHEAP))
    step = eval_sh(evalrig_home, "compare", a, b, "--out", tmp_path / "cmp")
    assert step.code == 0, step
    comparison = json.loads((tmp_path / "cmp" / "comparison.json").read_text())
    # one table: today's genai-prices as of the candidate run's created_at, for both sides
    assert comparison["pricing"] == {"genai_prices": genai_prices_version(), "prices_digest": prices_digest({}),
                                     "as_of": format_ts(T0 + timedelta(hours=2))}
    fresh = comparison["suites"]["fresh"]
    # the champion's recorded $0.001 (its own, older table) is priced again: gpt-4.1 is $0.006 a call
    assert fresh["champion"]["cost_per_task"] == pytest.approx(0.006)
    assert fresh["candidate"]["cost_per_task"] == pytest.approx(0.0012)
    assert comparison["facts"]["candidate"]["cost_source"] == {"metered": 70}
    said = (tmp_path / "cmp" / "comparison.md").read_text()
    assert (f"- model calls priced with one table: genai-prices `{genai_prices_version()}`, prices "
            f"`{prices_digest({}).removeprefix('sha256:')[:12]}`, as of {format_ts(T0 + timedelta(hours=2))}"
            in said), said
    gate = eval_sh(evalrig_home, "gate", tmp_path / "cmp", "--policy", policy)
    assert gate.code == 0, gate
    d = decision_of(tmp_path / "cmp")
    assert (d["verdict"], d["reason"]) == ("promote", "efficiency"), gate
    eff = rule_of(d, "fresh.efficiency")
    assert eff["held"] and eff["metered"] and eff["ratio"] == pytest.approx(0.2)
    table = (f"genai-prices {genai_prices_version()} with the gateway file's prices {prices_digest({})}, as of "
             f"{format_ts(T0 + timedelta(hours=2))}")
    assert eff["priced_with"] == table
    verdict = (tmp_path / "cmp" / "decisions" / "redteam-v1.md").read_text()
    assert ("Its cost was metered by the model gateway on every scored attempt of both runs and priced with "
            f"one table: {table}.") in " ".join(verdict.split()), verdict
    # byte-identical for the same bundles and pricing
    assert eval_sh(evalrig_home, "compare", a, b, "--out", tmp_path / "cmp2").code == 0
    assert (tmp_path / "cmp2" / "comparison.json").read_bytes() == (tmp_path / "cmp" / "comparison.json").read_bytes()


def test_different_prices_close_the_cost_route(tmp_path: Path, evalrig_home: Path) -> None:
    cheap = {"openai/gpt-4.1": ModelPrice(input=0.01, output=0.01)}
    a, b, policy = train(tmp_path, evalrig_home, side("champ", [Call("openai/gpt-4.1")]),
                         side("cand", CHEAP, gateway=facts(cheap)))
    assert eval_sh(evalrig_home, "compare", a, b, "--out", tmp_path / "cmp").code == 0
    comparison = json.loads((tmp_path / "cmp" / "comparison.json").read_text())
    assert "price models differently" in comparison["pricing"]["closed"]
    gate = eval_sh(evalrig_home, "gate", tmp_path / "cmp", "--policy", policy)
    eff = rule_of(decision_of(tmp_path / "cmp"), "fresh.efficiency")
    assert gate.code == 1 and not eff["held"], gate
    assert eff["why"].startswith("The cost route to promotion is closed: the two runs' gateway files price "
                                 "models differently"), eff


def test_an_estimated_call_keeps_the_cost_route_closed(tmp_path: Path, evalrig_home: Path) -> None:
    a, b, policy = train(tmp_path, evalrig_home, side("champ", EXPENSIVE_STALE),
                         side("cand", [Call("openai/gpt-4.1-mini", usage_source="estimated")]))
    assert eval_sh(evalrig_home, "compare", a, b, "--out", tmp_path / "cmp").code == 0
    gate = eval_sh(evalrig_home, "gate", tmp_path / "cmp", "--policy", policy)
    eff = rule_of(decision_of(tmp_path / "cmp"), "fresh.efficiency")
    assert gate.code == 1 and not eff["held"] and eff["candidate_source"] == "estimated", gate
    assert "the candidate's partly the rig's own estimate (a provider that returned no usage)" in eff["why"], eff


@pytest.mark.parametrize(("what", "field"), [
    ("base_url", "gateway.upstreams"), ("budget", "settings.max_cost_usd_per_attempt"), ("replay", "replay_of")])
def test_compare_refuses_unlike_gateway_setups(tmp_path: Path, evalrig_home: Path, what: str, field: str) -> None:
    kw: dict[str, object] = {
        "base_url": {"gateway": facts(base_url="http://127.0.0.1:9/v1")},
        "budget": {"max_cost_usd_per_attempt": 0.5},
        "replay": {"gateway": None, "replay_of": ReplayOf(run_id="run-x", manifest_sha256=sha256_bytes(b"x"))},
    }[what]
    a, b, _ = train(tmp_path, evalrig_home, side("champ", CHEAP), side("cand", CHEAP, **kw))
    step = eval_sh(evalrig_home, "compare", a, b, "--out", tmp_path / "cmp")
    assert step.code == 4, step
    assert f"{b / 'manifest.json'}: {field}: the runs differ in" in step.stderr, step


def test_a_replayed_run_never_satisfies_complete(tmp_path: Path, evalrig_home: Path) -> None:
    replay = {"gateway": None, "replay_of": ReplayOf(run_id="run-rec", manifest_sha256=sha256_bytes(b"rec"))}
    a, b, policy = train(tmp_path, evalrig_home, side("champ", EXPENSIVE_STALE, **replay), side("cand", CHEAP, **replay))
    assert eval_sh(evalrig_home, "compare", a, b, "--out", tmp_path / "cmp").code == 0
    gate = eval_sh(evalrig_home, "gate", tmp_path / "cmp", "--policy", policy)
    d = decision_of(tmp_path / "cmp")
    assert gate.code == 3 and (d["verdict"], d["reason"]) == ("block", "invariant"), gate
    complete = rule_of(d, "invariant.complete")
    assert not complete["held"] and complete["candidate_replay_of"] == "run-rec", complete
    assert "neither a replay" in complete["says"]
    eff = rule_of(d, "fresh.efficiency")
    assert not eff["held"] and eff["candidate_source"] == "replayed"


def test_verify_prices_every_call_again(tmp_path: Path, evalrig_home: Path) -> None:
    from evalrig.run.verify import metered_problems
    from evalrig.store.bundle import load_run

    b = write_run(tmp_path / "b", side("cand", [Call("openai/gpt-4.1-mini"), Call("openai/gpt-4.1")]), evalrig_home)
    assert metered_problems(b, load_run(b)) == []
    a = write_run(tmp_path / "a", side("champ", EXPENSIVE_STALE), evalrig_home)
    problems = [p.render() for p in metered_problems(a, load_run(a))]
    assert len(problems) == 70, problems[:3]
    assert problems[0] == (f"{a}/attempts/champ-fixed-000-0-1/model.jsonl: attempt champ-fixed-000-0-1, call seq 0: "
                           "cost_usd 0.001 is not its usage priced with the run's table as of its t_start (0.006)")


def test_verify_prices_a_live_runs_calls_even_where_a_line_says_replayed(tmp_path: Path,
                                                                        evalrig_home: Path) -> None:
    """A run that called its provider has no replayed call: a line that says so is priced like
    any other (a bundle whose lines were relabelled and cut in cost is caught)."""
    from evalrig.run.verify import metered_problems
    from evalrig.store.bundle import load_run

    b = write_run(tmp_path / "b", side("cand", [Call("openai/gpt-4.1", usage_source="replayed", cost_usd=0.0006)]),
                  evalrig_home)
    problems = [p.render() for p in metered_problems(b, load_run(b))]
    assert len(problems) == 70, problems[:3]
    assert problems[0].endswith("call seq 0: cost_usd 0.0006 is not its usage priced with the run's table as of "
                                "its t_start (0.006)"), problems[0]


def _judge_call(seq: int, cost_usd: float) -> ModelCall:
    """A judge's gateway call as verifier/model.jsonl records it: 1000 tokens in, 500 out of
    gpt-4.1-mini two hours after T0 (priced with the table: $0.0012)."""
    at = T0 + timedelta(hours=2)
    return ModelCall(
        seq=seq, role="judge", upstream="openai", model="gpt-4.1-mini", api="openai-chat", stream=False, status=200,
        t_start=format_ts(at), t_start_ms=int(at.timestamp() * 1000), t_ms=1.0, request_sha256=sha256_bytes(b"q"),
        response_sha256=sha256_bytes(b"r"), usage=CallUsage(input_tokens=1000, output_tokens=500),
        usage_source="provider", cost_usd=cost_usd)


def test_verify_prices_the_judges_calls_too(tmp_path: Path, evalrig_home: Path) -> None:
    from evalrig.core.digest import canonical_line
    from evalrig.run.verify import metered_problems
    from evalrig.store.bundle import load_run

    b = write_run(tmp_path / "b", side("cand", CHEAP), evalrig_home)
    judged = b / "attempts" / "cand-fixed-000-0-1" / "verifier"
    judged.mkdir(parents=True)
    (judged / "model.jsonl").write_bytes(canonical_line(_judge_call(3, 0.5)))
    problems = [p.render() for p in metered_problems(b, load_run(b))]
    assert problems == [f"{judged}/model.jsonl: attempt cand-fixed-000-0-1, call seq 3: cost_usd 0.5 is not its "
                        "usage priced with the run's table as of its t_start (0.0012)"], problems


def test_verify_sums_the_drivers_and_the_judges_metered_spend_again(tmp_path: Path, evalrig_home: Path) -> None:
    """Each role's metered spend in actuals.jsonl is the sum of that role's lines: the
    driver's from the attempt's model.jsonl, the judge's from the verifier's."""
    from evalrig.core.digest import canonical_line
    from evalrig.models.run import Actual, RoleSpend
    from evalrig.run.verify import metered_problems
    from evalrig.store.bundle import load_run

    b = write_run(tmp_path / "b", side("cand", [Call(), Call(role="driver", input_tokens=2000)]), evalrig_home)
    assert metered_problems(b, load_run(b)) == []
    aid = "cand-fixed-000-0-1"
    judged = b / "attempts" / aid / "verifier"
    judged.mkdir(parents=True)
    (judged / "model.jsonl").write_bytes(canonical_line(_judge_call(0, 0.0012)))
    actuals = [Actual.model_validate_json(x) for x in (b / "actuals.jsonl").read_bytes().splitlines()]
    edited = []
    for a in actuals:
        if a.attempt_id == aid:
            assert a.spend is not None and a.spend.driver is not None and a.spend.driver.cost_usd == pytest.approx(0.0016)
            a = a.model_copy(update={"spend": a.spend.model_copy(update={
                "driver": a.spend.driver.model_copy(update={"cost_usd": 0.0001}),
                "judge": RoleSpend(cost_usd=0.0002, input_tokens=1000, output_tokens=500, source="metered", calls=1,
                                   estimated=False)})})
        edited.append(canonical_line(a))
    (b / "actuals.jsonl").write_bytes(b"".join(edited))
    problems = [p.render() for p in metered_problems(b, load_run(b))]
    assert problems == [
        f"{b}/actuals.jsonl: attempt {aid}: the metered judge spend 0.0002 is not the sum of its "
        "verifier/model.jsonl lines (0.0012)",
        f"{b}/actuals.jsonl: attempt {aid}: the metered driver spend 0.0001 is not the sum of its model.jsonl "
        "lines (0.0016)"], problems


def test_a_spend_recorded_to_ten_decimals_is_not_a_mismatch() -> None:
    """The ledger records a role's spend rounded to 10 decimals of a dollar; its calls can
    cost more decimals than that (1001 cached tokens at $0.01875/M): the sum is compared
    within one unit of the last decimal kept, and a larger difference is still caught."""
    from evalrig.core.metering import SPEND_DECIMALS, spend_mismatches
    from evalrig.core.pricing import pricer

    cost = 1001 * 0.01875e-6
    lines = [_judge_call(seq, cost).model_copy(update={"usage": None}) for seq in range(3)]  # priced elsewhere
    recorded = round(cost + cost + cost, SPEND_DECIMALS)
    assert recorded != sum(x.cost_usd for x in lines)
    assert spend_mismatches("a", lines, facts(), pricer({}), {"judge": recorded}, True) == []
    off = spend_mismatches("a", lines, facts(), pricer({}), {"judge": recorded + 3e-10}, True)
    assert [(m.role, m.seq) for m in off] == [("judge", None)], off
