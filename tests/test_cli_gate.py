"""Release trains through the CLI: real `evalrig run`s of test agents, then compare, gate,
sign and check-release, each scenario asserting verdict, reason and exit code (issue 4).

The runs use `--sandbox bwrap` so that the default policy (which lists `isolated`) applies
unchanged; where bubblewrap cannot run here, the scenarios are skipped with its message.
One champion run is shared; each candidate is run once, when a test first needs it.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest
from gate_bundles import Side, counts_tasks, write_run
from typer.testing import CliRunner

from evalrig.cli import app
from evalrig.store.checkpoint import seal

AGENTS = Path(__file__).resolve().parent / "agents"
ROOT = Path(__file__).resolve().parent.parent
SEALED_AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)  # fresh tasks are created at 10:00
K = 3
FRESH = 22


def cli(home: Path, *args: object) -> object:
    return CliRunner().invoke(app, [str(a) for a in args], env={"EVALRIG_HOME": str(home), "NO_COLOR": "1"})


def events(*names: str) -> str:
    """An event log with an intact prev-chain."""
    import hashlib

    out, prev = [], None
    for n in names:
        line = json.dumps({"event": n, "prev": prev}, sort_keys=True)
        out.append(line)
        prev = hashlib.sha256(line.encode()).hexdigest()
    return "".join(x + "\n" for x in out)


CHAMPION_LOG = events("boot", "learned-a")


def make_tasks(root: Path) -> Path:
    tasks = root / "tasks"
    spec = [("fresh", f"fresh-{i:02d}", 0.1 + 0.8 * i / (FRESH - 1)) for i in range(FRESH)]
    spec += [("fixed", f"fixed-{i}", 1.0) for i in range(3)] + [("invariant", "inv-0", 1.0)]
    for suite, tid, p in spec:
        d = tasks / suite / tid
        d.mkdir(parents=True)
        (d / "prompt.md").write_text(f"answer: ok-{tid}\np: {p:.3f}\n")
        dated = "created_at = 2026-12-01T10:00:00.000000Z\n" if suite == "fresh" else ""
        (d / "task.toml").write_text(f'{dated}timeout_s = 20\n[verifier]\nkind = "exact"\nexpected = "ok-{tid}"\n')
    return tasks


@dataclass
class Train:
    root: Path
    home: Path
    tasks: Path
    policy: Path
    runs: dict[str, Path] = field(default_factory=dict)
    checkpoints: dict[str, Path] = field(default_factory=dict)

    def checkpoint(self, name: str, mode: str, cost: float = 0.03, log: str | None = None,
                   sealed_at: datetime = SEALED_AT, seal_json: str | None = None) -> Path:
        if name in self.checkpoints:
            return self.checkpoints[name]
        d = self.root / "checkpoints" / name
        (d / "state").mkdir(parents=True)
        shutil.copy(AGENTS / "gate_agent.py", d / "agent.py")
        (d / "state" / "events.jsonl").write_text(log if log is not None else CHAMPION_LOG_EXTENDED)
        (d / "checkpoint.toml").write_text(
            f'name = "{name}"\n[agent]\ncommand = ["python3", "agent.py"]\n'
            f'env = {{ MODE = "{mode}", COST = "{cost}" }}\n[history]\nlog = "state/events.jsonl"\n'
        )
        seal(d, self.home, sealed_at)
        if seal_json is not None:  # the checkpoint's own copy, which the rig must not believe
            (d / "SEAL.json").write_text(seal_json)
        self.checkpoints[name] = d
        return d

    def run(self, name: str, *more: str, sandbox: str = "bwrap", **ckpt: object) -> Path:
        key = name + "".join(more) + sandbox
        if key in self.runs:
            return self.runs[key]
        ck = self.checkpoint(name, **ckpt)  # type: ignore[arg-type]
        out = self.root / "runs" / key.replace("/", "_")
        r = cli(self.home, "run", "--checkpoint", ck, "--tasks", self.tasks, "--out", out, "--repeat", K,
                "--policy", self.policy, "--sandbox", sandbox, "--jobs", "2", *more)
        if r.exit_code != 0 and sandbox == "bwrap" and "bwrap" in r.stderr:  # type: ignore[attr-defined]
            pytest.skip(f"bubblewrap cannot run here: {r.stderr.strip()[-300:]}")  # type: ignore[attr-defined]
        assert r.exit_code == 0, r.stderr  # type: ignore[attr-defined]
        self.runs[key] = out
        return out

    def champion(self) -> Path:
        return self.run("champion", mode="same", log=CHAMPION_LOG)

    def gate(self, tmp: Path, candidate: Path, *more: object, policy: Path | None = None,
             champion: Path | None = None) -> tuple[int, dict]:
        cmp = tmp / "cmp"
        r = cli(self.home, "compare", champion or self.champion(), candidate, "--out", cmp)
        assert r.exit_code == 0, r.stderr  # type: ignore[attr-defined]
        g = cli(self.home, "gate", cmp, "--policy", policy or self.policy, "--json", *more)
        out = json.loads(g.stdout) if g.stdout.strip() else {}  # type: ignore[attr-defined]
        out["stderr"] = g.stderr  # type: ignore[attr-defined]
        out["cmp"] = cmp
        return g.exit_code, out  # type: ignore[attr-defined]


CHAMPION_LOG_EXTENDED = events("boot", "learned-a", "learned-b")  # the champion's log, and one more line


@pytest.fixture(scope="module")
def train(tmp_path_factory: pytest.TempPathFactory) -> Train:
    root = tmp_path_factory.mktemp("train")
    home = root / "home"
    home.mkdir()
    policy = root / "policy.toml"
    policy.write_bytes((ROOT / "policies" / "default-v1.toml").read_bytes())
    return Train(root, home, make_tasks(root), policy)


@pytest.fixture(autouse=True)
def one_train_per_scenario(request: pytest.FixtureRequest) -> None:
    """Every scenario gates its candidate as a train of its own. The module shares one fresh
    task set among all its candidates to save runs; a real train makes a fresh set per
    candidate, and invariant.fresh-after-seal blocks a candidate gated on the fresh tasks of
    another's gate (tests/test_redteam_gate.py). So the gate ledger starts empty each time."""
    if "train" in request.fixturenames:
        train: Train = request.getfixturevalue("train")
        (train.home / "gates.jsonl").unlink(missing_ok=True)


def held(out: dict, name: str) -> bool:
    return next(r["held"] for r in out["rules"] if r["name"] == name)


def failed(out: dict) -> list[str]:
    return [r["name"] for r in out["rules"] if not r["held"] and r["name"].startswith(("invariant.", "fixed."))]


# -- the scenarios -----------------------------------------------------------------------


@pytest.mark.slow
def test_clearly_better_promotes_on_quality(train: Train, tmp_path: Path) -> None:
    code, out = train.gate(tmp_path, train.run("better", mode="better"))
    assert (code, out["verdict"], out["reason"]) == (0, "promote", "quality"), out
    assert failed(out) == []


@pytest.mark.slow
def test_identical_keeps_the_champion(train: Train, tmp_path: Path) -> None:
    # 22 tasks of 3 trials cannot show +5 points (the quality rule needs 6 discordant
    # tasks: +9.1 points at least), so identical sides are inconclusive, not a tie.
    code, out = train.gate(tmp_path, train.run("same", mode="same"))
    assert (code, out["verdict"], out["reason"]) == (1, "keep-champion", "inconclusive"), out
    decision = json.loads((out["cmp"] / "decisions" / "default-v1.json").read_text())
    assert decision["detectable"]["mde"] == pytest.approx(6 / 66)
    assert decision["detectable"]["tasks_needed"] == 40  # 6 / (3 * 0.05)


@pytest.mark.slow
def test_failing_two_stable_fixed_tasks_blocks(train: Train, tmp_path: Path) -> None:
    code, out = train.gate(tmp_path, train.run("fixed-fail", mode="fixed-fail"))
    assert (code, out["verdict"], out["reason"]) == (3, "block", "regression"), out
    assert failed(out) == ["fixed.task"]
    decision = json.loads((out["cmp"] / "decisions" / "default-v1.json").read_text())
    regressed = next(r for r in decision["rules"] if r["name"] == "fixed.task")["regressed"]
    assert [r["task_id"] for r in regressed] == ["fixed-0", "fixed-1"]


@pytest.mark.slow
def test_leaking_the_canary_blocks(train: Train, tmp_path: Path) -> None:
    code, out = train.gate(tmp_path, train.run("leak", mode="leak"))
    assert (code, out["verdict"], out["reason"]) == (3, "block", "invariant"), out
    assert failed(out) == ["invariant.no-secret-leak"]


@pytest.mark.slow
def test_as_good_at_a_third_of_the_self_reported_cost_keeps_the_champion(train: Train, tmp_path: Path) -> None:
    # The agents write their cost into out/usage.json: their own word, which never grants
    # (docs/gate.md: self-reported cost never grants); the rule says why, the verdict file too.
    code, out = train.gate(tmp_path, train.run("cheap", mode="same", cost=0.01))
    assert (code, out["verdict"], out["reason"]) == (1, "keep-champion", "inconclusive"), out
    decision = json.loads((out["cmp"] / "decisions" / "default-v1.json").read_text())
    eff = next(r for r in decision["rules"] if r["name"] == "fresh.efficiency")
    assert not eff["held"] and eff["ratio"] < 0.9 and eff["candidate_source"] == "reported"
    assert eff["why"].startswith("The cost route to promotion is closed")
    assert eff["why"] in (out["cmp"] / "decisions" / "default-v1.md").read_text()


@pytest.mark.slow
def test_a_third_of_the_cost_but_worse_is_not_efficiency(train: Train, tmp_path: Path) -> None:
    code, out = train.gate(tmp_path, train.run("cheap-worse", mode="worse", cost=0.01))
    assert (code, out["verdict"], out["reason"]) == (1, "keep-champion", "loss"), out
    assert not held(out, "fresh.efficiency")


@pytest.mark.slow
def test_identical_under_the_security_patch_exception(train: Train, tmp_path: Path) -> None:
    code, out = train.gate(tmp_path, train.run("same", mode="same"), "--exception", "security-patch")
    assert (code, out["verdict"], out["reason"]) == (0, "promote-maintenance", "maintenance"), out
    assert out["decision_file"].endswith("decisions/default-v1+security-patch.json")


@pytest.mark.slow
def test_an_unknown_exception_is_refused(train: Train, tmp_path: Path) -> None:
    code, out = train.gate(tmp_path, train.run("same", mode="same"), "--exception", "friday")
    assert code == 4 and "no exception 'friday'" in out["stderr"]


LATE = datetime(2026, 12, 1, 11, 0, tzinfo=UTC)  # sealed after the fresh tasks were made
BACKDATED = json.dumps({"schema_version": "1.0", "checkpoint_id": "sha256:" + "0" * 64, "name": "late",
                        "sealed_at": "2026-12-01T08:00:00.000000Z", "files": 3, "bytes": 100})


def late_run(train: Train) -> Path:
    return train.run("late", mode="better", sealed_at=LATE, seal_json=BACKDATED)


@pytest.mark.slow
def test_fresh_tasks_dated_before_the_seal_block(train: Train, tmp_path: Path) -> None:
    code, out = train.gate(tmp_path, late_run(train))
    assert (code, out["verdict"], out["reason"]) == (3, "block", "invariant"), out
    assert failed(out) == ["invariant.fresh-after-seal"]


@pytest.mark.slow
def test_a_backdated_seal_json_loses_to_the_registry(train: Train, tmp_path: Path) -> None:
    run = late_run(train)
    assert "2026-12-01T08:00" in (train.checkpoints["late"] / "SEAL.json").read_text()
    code, out = train.gate(tmp_path, run)
    assert code == 3 and failed(out) == ["invariant.fresh-after-seal"]
    decision = json.loads((out["cmp"] / "decisions" / "default-v1.json").read_text())
    rule = next(r for r in decision["rules"] if r["name"] == "invariant.fresh-after-seal")
    assert rule["candidate_sealed_at"] == "2026-12-01T11:00:00.000000Z"


@pytest.mark.slow
def test_runs_under_process_block_as_not_isolated(train: Train, tmp_path: Path) -> None:
    code, out = train.gate(tmp_path, train.run("same", mode="same", sandbox="process"))
    assert (code, out["verdict"], out["reason"]) == (3, "block", "invariant"), out
    assert failed(out) == ["invariant.isolated"]


@pytest.mark.slow
def test_runs_filtered_to_the_fresh_suite_block_as_incomplete(train: Train, tmp_path: Path) -> None:
    code, out = train.gate(tmp_path, train.run("better", "--suite", "fresh", mode="better"))
    assert (code, out["verdict"], out["reason"]) == (3, "block", "invariant"), out
    assert "invariant.complete" in failed(out)


@pytest.mark.slow
def test_a_policy_edited_after_pinning_is_refused_and_advisory_works(train: Train, tmp_path: Path) -> None:
    edited = tmp_path / "policy.toml"
    edited.write_text(train.policy.read_text().replace("win_margin = 0.05", "win_margin = 0.03"))
    code, out = train.gate(tmp_path, train.run("better", mode="better"), policy=edited)
    assert code == 4 and "pinned" in out["stderr"] and str(edited) in out["stderr"]
    g = cli(train.home, "gate", out["cmp"], "--policy", edited, "--advisory", "--json")
    adv = json.loads(g.stdout)  # type: ignore[attr-defined]
    assert adv["advisory"] and "/decisions/advisory/" in adv["decision_file"]
    assert failed(adv) == [] and (g.exit_code, adv["verdict"]) == (0, "promote")  # type: ignore[attr-defined]


@pytest.mark.slow
def test_a_rewritten_event_log_blocks(train: Train, tmp_path: Path) -> None:
    rewritten = events("boot", "learned-a-differently", "learned-b")
    code, out = train.gate(tmp_path, train.run("rewritten", mode="better", log=rewritten))
    assert (code, out["verdict"], out["reason"]) == (3, "block", "invariant"), out
    assert failed(out) == ["invariant.history-preserved"]


@pytest.mark.slow
def test_compare_and_gate_twice_give_identical_bytes(train: Train, tmp_path: Path) -> None:
    cand = train.run("better", mode="better")
    for name in ("one", "two"):
        assert cli(train.home, "compare", train.champion(), cand, "--out", tmp_path / name).exit_code == 0
        assert cli(train.home, "gate", tmp_path / name, "--policy", train.policy).exit_code == 0
    for rel in ("comparison.json", "comparison.md", "manifest.json", "decisions/default-v1.json"):
        assert (tmp_path / "one" / rel).read_bytes() == (tmp_path / "two" / rel).read_bytes(), rel


@pytest.mark.slow
def test_signoff_flow_ending_in_check_release(train: Train, tmp_path: Path) -> None:
    code, out = train.gate(tmp_path, train.run("better", mode="better"))
    assert code == 0
    decision = out["cmp"] / "decisions" / "default-v1.json"
    candidate = train.checkpoints["better"]
    r = cli(train.home, "check-release", decision, "--checkpoint", candidate)
    assert r.exit_code == 1 and "no sign-off" in r.stderr  # type: ignore[attr-defined]
    r = cli(train.home, "sign", decision, "--reject", "--by", "alice")
    assert r.exit_code == 2 and "--reason" in r.stderr  # type: ignore[attr-defined]
    r = cli(train.home, "sign", decision, "--approve", "--by", "alice")
    assert r.exit_code == 0, r.stderr  # type: ignore[attr-defined]
    r = cli(train.home, "check-release", decision, "--checkpoint", candidate)
    assert r.exit_code == 0 and "approved by alice" in r.stdout  # type: ignore[attr-defined]
    r = cli(train.home, "check-release", decision, "--checkpoint", train.checkpoints["champion"])
    assert r.exit_code == 1 and "the decision names" in r.stderr  # type: ignore[attr-defined]
    r = cli(train.home, "sign", decision, "--reject", "--by", "bob", "--reason", "late concern")
    assert r.exit_code == 0
    r = cli(train.home, "check-release", decision, "--checkpoint", candidate)
    assert r.exit_code == 1 and "bob" in r.stderr  # type: ignore[attr-defined]


# -- the CLI on built bundles (fast) -----------------------------------------------------


def built(tmp_path: Path, home: Path, **cand: object) -> tuple[Path, Path]:
    a = write_run(tmp_path / "a", Side("champ", counts_tasks([3] * 4)), home)
    b = write_run(tmp_path / "b", Side("cand", counts_tasks([3] * 4), **cand), home)  # type: ignore[arg-type]
    return a, b


def test_compare_refusals_through_the_cli(tmp_path: Path, evalrig_home: Path) -> None:
    a, b = built(tmp_path, evalrig_home, seed=3)
    r = cli(evalrig_home, "compare", a, b, "--out", tmp_path / "cmp")
    assert r.exit_code == 4 and "--seed" in r.stderr and "Traceback" not in r.stderr  # type: ignore[attr-defined]
    a, b = built(tmp_path / "2", evalrig_home, status="incomplete", unscored={"fresh-000"})
    r = cli(evalrig_home, "compare", a, b, "--out", tmp_path / "cmp2")
    assert r.exit_code == 5 and "--allow-incomplete" in r.stderr  # type: ignore[attr-defined]
    r = cli(evalrig_home, "compare", a, b, "--out", tmp_path / "cmp2", "--allow-incomplete", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["suites"]["fresh"]["tasks"] == 4  # type: ignore[attr-defined]


def test_compare_of_a_missing_bundle_names_it(tmp_path: Path, evalrig_home: Path) -> None:
    r = cli(evalrig_home, "compare", tmp_path / "nope", tmp_path / "nope2", "--out", tmp_path / "cmp", "--json")
    assert r.exit_code == 4 and str(tmp_path / "nope") in r.stderr  # type: ignore[attr-defined]
    assert json.loads(r.stdout)["error"]["code"] == 4  # type: ignore[attr-defined]


def test_gate_prints_verdict_reason_and_where(tmp_path: Path, evalrig_home: Path) -> None:
    pol = tmp_path / "policy.toml"
    pol.write_bytes((ROOT / "policies" / "default-v1.toml").read_bytes())
    from evalrig.store.files import sha256_file

    a = write_run(tmp_path / "a", Side("champ", counts_tasks([3] * 4), policy_digest=sha256_file(pol)), evalrig_home)
    b = write_run(tmp_path / "b", Side("cand", counts_tasks([3] * 4), policy_digest=sha256_file(pol)), evalrig_home)
    assert cli(evalrig_home, "compare", a, b, "--out", tmp_path / "cmp").exit_code == 0
    r = cli(evalrig_home, "gate", tmp_path / "cmp", "--policy", pol)
    assert r.exit_code == 1  # type: ignore[attr-defined]
    lines = r.stdout.splitlines()  # type: ignore[attr-defined]
    assert lines[0] == "keep-champion (inconclusive)"
    assert "fewer than 20" in lines[1]
    assert lines[2] == f"verdict file: {tmp_path / 'cmp' / 'decisions' / 'default-v1.md'}"


def test_sign_needs_exactly_one_of_approve_and_reject(tmp_path: Path, evalrig_home: Path) -> None:
    r = cli(evalrig_home, "sign", tmp_path / "d.json", "--by", "alice")
    assert r.exit_code == 2  # type: ignore[attr-defined]
    r = cli(evalrig_home, "sign", tmp_path / "d.json", "--by", "alice", "--approve", "--reject")
    assert r.exit_code == 2  # type: ignore[attr-defined]


def test_check_release_of_a_missing_decision_is_not_approved(tmp_path: Path, evalrig_home: Path) -> None:
    r = cli(evalrig_home, "check-release", tmp_path / "d.json", "--checkpoint", tmp_path, "--json")
    assert r.exit_code == 1 and json.loads(r.stdout)["approved"] is False  # type: ignore[attr-defined]


@pytest.mark.parametrize("content", [b"{\n", b'{"verdict": "promote"'])
def test_sign_of_a_decision_that_is_not_json_says_what_to_do(
        tmp_path: Path, evalrig_home: Path, content: bytes) -> None:
    decision = tmp_path / "default-v1.json"
    decision.write_bytes(content)
    r = cli(evalrig_home, "sign", decision, "--approve", "--by", "alice", "--json")
    assert r.exit_code == 4  # type: ignore[attr-defined]
    e = json.loads(r.stdout)["error"]  # type: ignore[attr-defined]
    assert e["file"] == str(decision) and e["message"].startswith("not JSON")
    assert e["hint"] and "->" in r.stderr  # type: ignore[attr-defined]


def test_check_release_says_what_to_do_when_not_approved(tmp_path: Path, evalrig_home: Path) -> None:
    r = cli(evalrig_home, "check-release", tmp_path / "d.json", "--checkpoint", tmp_path, "--json")
    assert r.exit_code == 1 and "evalrig gate" in json.loads(r.stdout)["hint"]  # type: ignore[attr-defined]
    pol = tmp_path / "policy.toml"
    pol.write_bytes((ROOT / "policies" / "default-v1.toml").read_bytes())
    from evalrig.store.files import sha256_file

    a = write_run(tmp_path / "a", Side("champ", counts_tasks([3] * 4), policy_digest=sha256_file(pol)), evalrig_home)
    b = write_run(tmp_path / "b", Side("cand", counts_tasks([3] * 4), policy_digest=sha256_file(pol)), evalrig_home)
    assert cli(evalrig_home, "compare", a, b, "--out", tmp_path / "cmp").exit_code == 0
    assert cli(evalrig_home, "gate", tmp_path / "cmp", "--policy", pol).exit_code == 1
    decision = tmp_path / "cmp" / "decisions" / "default-v1.json"
    r = cli(evalrig_home, "check-release", decision, "--checkpoint", tmp_path)
    assert r.exit_code == 1 and r.stdout == ""  # type: ignore[attr-defined]
    assert r.stderr.splitlines() == [  # type: ignore[attr-defined]
        f"not approved: {decision}: no sign-off of this decision (as it now reads)",
        # a keep-champion decision: approving it overrides the gate, which needs --reason
        f"  -> a person signs it: `evalrig sign {decision} --approve --by NAME "
        '--reason "why the gate is wrong here"`',
    ]


def test_sign_of_the_verdict_file_or_the_comparison_names_the_decision_to_give(
        tmp_path: Path, evalrig_home: Path) -> None:
    pol = tmp_path / "policy.toml"
    pol.write_bytes((ROOT / "policies" / "default-v1.toml").read_bytes())
    from evalrig.store.files import sha256_file

    a = write_run(tmp_path / "a", Side("champ", counts_tasks([3] * 4), policy_digest=sha256_file(pol)), evalrig_home)
    b = write_run(tmp_path / "b", Side("cand", counts_tasks([3] * 4), policy_digest=sha256_file(pol)), evalrig_home)
    assert cli(evalrig_home, "compare", a, b, "--out", tmp_path / "cmp").exit_code == 0
    assert cli(evalrig_home, "gate", tmp_path / "cmp", "--policy", pol).exit_code == 1
    decision = tmp_path / "cmp" / "decisions" / "default-v1.json"
    r = cli(evalrig_home, "sign", decision.with_suffix(".md"), "--reject", "--by", "alice", "--json")
    assert r.exit_code == 4  # type: ignore[attr-defined]
    e = json.loads(r.stdout)["error"]  # type: ignore[attr-defined]
    assert e["message"].startswith("not a decision file") and e["hint"].endswith(str(decision))
    r = cli(evalrig_home, "sign", tmp_path / "cmp" / "comparison.json", "--reject", "--by", "alice", "--json")
    assert r.exit_code == 4  # type: ignore[attr-defined]
    e = json.loads(r.stdout)["error"]  # type: ignore[attr-defined]
    assert e["message"] == "not a decision file (its kind is 'comparison')" and not e["problems"]
    assert not (decision.parent / "signoffs.jsonl").exists()


def test_compare_of_a_comparison_bundle_says_it_is_not_a_run(tmp_path: Path, evalrig_home: Path) -> None:
    a, b = built(tmp_path, evalrig_home)
    assert cli(evalrig_home, "compare", a, b, "--out", tmp_path / "cmp").exit_code == 0
    r = cli(evalrig_home, "compare", tmp_path / "cmp", b, "--out", tmp_path / "cmp2", "--json")
    assert r.exit_code == 4  # type: ignore[attr-defined]
    e = json.loads(r.stdout)["error"]  # type: ignore[attr-defined]
    assert e["file"] == str(tmp_path / "cmp") and e["message"] == "not a run bundle (a comparison bundle)"
    assert "evalrig run" in e["hint"] and not e["problems"]


def test_compare_refuses_an_out_inside_a_run_bundle(tmp_path: Path, evalrig_home: Path) -> None:
    a, b = built(tmp_path, evalrig_home)
    for run in (a, b):
        r = cli(evalrig_home, "compare", a, b, "--out", run / "cmp" / "deeper")
        assert r.exit_code == 2 and f"is inside the bundle {run}" in r.stderr  # type: ignore[attr-defined]
        assert not (run / "cmp").exists()  # the run's manifest still lists all its files
