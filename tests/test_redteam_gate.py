"""Red team, the gate's half (issue #10 attacks 2, 3 and 13), through `eval.sh`.

- Attack 3: a candidate identical to the champion that writes a tenth of its real cost
  into out/usage.json was promoted on efficiency. A self-reported cost never grants now
  (docs/gate.md); a figure the rig meters itself (wall time) still does.
- Attack 2, the gate's half: attempts that had network fail `invariant.isolated` unless the
  policy says `allow_network = true` (policies/networked.toml), and then the decision lists
  the hosts reached and the verdict file says the canary check cannot see what was sent.
  `run --allow-network` is the network engineer's; here the runs are bundles built with the
  models (tests/gate_bundles.py) and taken through `eval.sh compare` and `eval.sh gate`.
- `invariant.fresh-after-seal`, revised: a regenerated copy of a fresh task another
  candidate was gated on (a new created_at, the same prompt, files and verifier) is not fresh.
- Attack 13: task and policy inputs that validated and then broke every attempt.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from gate_bundles import Side, counts_tasks, write_run
from redteam import (
    SMALL_POLICY,
    add_task,
    bwrap_works,
    eval_sh,
    make_checkpoint,
    run_train,
    utc_now,
    write_policy,
)

from evalrig.store.files import sha256_file

ROOT = Path(__file__).resolve().parent.parent

# The small policy, with a non-inferiority margin wide enough that six tasks of two trials
# can show it: without it, no efficiency route is open on a train this small, and the
# attack would prove nothing.
EFFICIENCY_POLICY = SMALL_POLICY.replace("noninferiority_margin = 0.05", "noninferiority_margin = 0.5")
PROCESS_CHECKS = ('checks = ["complete", "sealed", "policy-pinned", "fresh-after-seal",\n'
                  '          "no-secret-leak", "history-preserved", "bundle-integrity", "invariant-suite"]')


def policy_for(sandbox: str, text: str = EFFICIENCY_POLICY) -> str:
    """Under `process` the policy leaves out `isolated` (which that sandbox never holds),
    so that the verdict shows the rule under attack, not the sandbox."""
    if sandbox == "bwrap":
        return text
    start = text.index("checks = [")
    end = text.index("]", start) + 1
    return text[:start] + PROCESS_CHECKS + text[end:]


def skip_without(sandbox: str) -> None:
    if sandbox == "bwrap" and not bwrap_works():
        pytest.skip("bwrap cannot run on this machine")


def reporting_agent(cost: float, sleep_s: float = 0.0) -> str:
    """The honest agent, writing `cost` as its own spend into out/usage.json."""
    return f"""\
import json, os, time
time.sleep({sleep_s})
out = os.environ["EVALRIG_OUT"]
with open(os.path.join(out, "answer.txt"), "w") as f:
    f.write("ok\\n")
with open(os.path.join(out, "usage.json"), "w") as f:
    json.dump({{"cost_usd": {cost}, "input_tokens": 1200, "output_tokens": 300}}, f)
"""


def decision_rule(path: Path, name: str) -> dict:
    return next(r for r in json.loads(path.read_text())["rules"] if r["name"] == name)


# -- attack 3: a cost the agent reports itself ----------------------------------------------


@pytest.mark.parametrize("sandbox", ["bwrap", "process"])
def test_an_under_reported_cost_is_not_an_efficiency_win(tmp_path: Path, evalrig_home: Path, sandbox: str) -> None:
    skip_without(sandbox)
    champion = make_checkpoint(tmp_path / "champion", reporting_agent(0.05), name="champ")
    candidate = make_checkpoint(tmp_path / "candidate", reporting_agent(0.005), name="cand")  # real cost × 0.1
    policy = write_policy(tmp_path / "policies", policy_for(sandbox))
    train = run_train(evalrig_home, tmp_path, champion, candidate, policy=policy, sandbox=sandbox)
    gate = train.steps["gate"]
    assert gate.code == 1, gate
    decision = json.loads(train.decision.read_text())
    assert decision["verdict"] == "keep-champion" and decision["reason"] in ("tie", "inconclusive"), gate
    eff = decision_rule(train.decision, "fresh.efficiency")
    assert not eff["held"] and eff["ratio"] == pytest.approx(0.1)  # the figures are shown ...
    assert (eff["champion_source"], eff["candidate_source"], eff["metered"]) == ("reported", "reported", False)
    assert eff["why"] == (  # ... and why they cannot grant, in one sentence
        "The cost route to promotion is closed: a cost win needs cost the rig metered on both sides, and both "
        "sides' cost figures are self-reported (the agents' own usage.json), which never grant, since an agent "
        "that under-reports its cost must not win by it (cost is metered only when a model gateway serves both "
        "runs: run --gateway FILE).")
    verdict = train.decision.with_suffix(".md").read_text()
    assert f"**Cost.** {eff['why']}" in verdict
    assert "reported by the agent itself" in verdict
    comparison = json.loads((train.cmp / "comparison.json").read_text())
    cost = comparison["suites"]["fresh"]["efficiency"]["cost"]
    assert (cost["champion_source"], cost["candidate_source"]) == ("reported", "reported")
    assert comparison["facts"]["candidate"]["cost_source"] == {"reported": 16}
    md = (train.cmp / "comparison.md").read_text()
    assert "| cost source | reported by the agent itself | reported by the agent itself |" in md
    assert "are its own word: shown here, never used to grant a promotion" in md


@pytest.mark.parametrize("sandbox", ["bwrap", "process"])
def test_wall_time_the_rig_measures_still_grants(tmp_path: Path, evalrig_home: Path, sandbox: str) -> None:
    """The route the fix must leave open: a candidate that is as good and measurably faster
    (wall time is the rig's own measurement) is promoted on efficiency."""
    skip_without(sandbox)
    champion = make_checkpoint(tmp_path / "champion", reporting_agent(0.01, sleep_s=0.6), name="champ")
    candidate = make_checkpoint(tmp_path / "candidate", reporting_agent(0.01), name="cand")
    text = policy_for(sandbox).replace('efficiency_metric = "cost"', 'efficiency_metric = "wall_s"')
    train = run_train(evalrig_home, tmp_path, champion, candidate, policy=write_policy(tmp_path / "p", text),
                      sandbox=sandbox)
    gate = train.steps["gate"]
    assert gate.code == 0, gate
    decision = json.loads(train.decision.read_text())
    assert (decision["verdict"], decision["reason"]) == ("promote", "efficiency"), gate
    eff = decision_rule(train.decision, "fresh.efficiency")
    assert eff["held"] and eff["ratio"] < 0.9 and eff["why"] is None
    assert (eff["champion_source"], eff["candidate_source"]) == ("metered", "metered")


def test_the_release_train_policy_says_its_cost_route_is_closed() -> None:
    """The default policy's efficiency metric is cost, which the rig does not meter yet: its
    route is closed, and docs/gate.md says so."""
    assert 'efficiency_metric = "cost"' in (ROOT / "policies" / "default-v1.toml").read_text()
    assert "cost route is closed" in (ROOT / "docs" / "gate.md").read_text()


# -- attack 2, the gate's half: attempts with network ----------------------------------------


def networked_train(tmp_path: Path, home: Path, policy: Path, **cand: object) -> tuple[Path, Path]:
    digest = sha256_file(policy)
    tasks = counts_tasks([3] * 6)
    champ = write_run(tmp_path / "champion", Side("champ", tasks, policy_digest=digest), home)
    candidate = write_run(tmp_path / "candidate", Side("cand", tasks, policy_digest=digest, **cand), home)  # type: ignore[arg-type]
    return champ, candidate


def test_network_fails_isolated_under_the_default_policy(tmp_path: Path, evalrig_home: Path) -> None:
    policy = ROOT / "policies" / "default-v1.toml"
    a, b = networked_train(tmp_path, evalrig_home, policy, network=True, network_hosts=["api.example.com:443"])
    assert eval_sh(evalrig_home, "compare", a, b, "--out", tmp_path / "cmp").code == 0
    gate = eval_sh(evalrig_home, "gate", tmp_path / "cmp", "--policy", policy, "--json")
    assert gate.code == 3, gate
    decision = json.loads((tmp_path / "cmp" / "decisions" / "default-v1.json").read_text())
    assert (decision["verdict"], decision["reason"]) == ("block", "invariant")
    failed = [r["name"] for r in decision["rules"] if not r["held"] and r["name"].startswith("invariant.")]
    assert failed == ["invariant.isolated"]
    iso = decision_rule(tmp_path / "cmp" / "decisions" / "default-v1.json", "invariant.isolated")
    assert (iso["candidate_network_attempts"], iso["allow_network"]) == (50, False)
    assert iso["candidate_hosts_reached"] == ["api.example.com:443"]
    facts = json.loads((tmp_path / "cmp" / "comparison.json").read_text())["facts"]
    assert (facts["candidate"]["hosts_reached"], facts["champion"]["hosts_reached"]) == (["api.example.com:443"], [])


def test_the_networked_policy_allows_network_and_lists_the_hosts(tmp_path: Path, evalrig_home: Path) -> None:
    policy = tmp_path / "networked.toml"
    shutil.copy(ROOT / "policies" / "networked.toml", policy)
    hosts = ["api.example.com:443", "models.example.org:8443"]
    a, b = networked_train(tmp_path, evalrig_home, policy, network=True, network_hosts=hosts)
    assert eval_sh(evalrig_home, "compare", a, b, "--out", tmp_path / "cmp").code == 0
    gate = eval_sh(evalrig_home, "gate", tmp_path / "cmp", "--policy", policy, "--json")
    decision_file = tmp_path / "cmp" / "decisions" / "networked-v1.json"
    iso = decision_rule(decision_file, "invariant.isolated")
    assert iso["held"] and iso["allow_network"] and iso["candidate_hosts_reached"] == hosts, gate
    assert "cannot see what was sent" in iso["note"]
    assert gate.json["verdict"] != "block"  # type: ignore[index]
    verdict = decision_file.with_suffix(".md").read_text()
    assert "**Network.** The policy allows network" in verdict and "api.example.com:443" in verdict
    assert "the canary check cannot see what was sent over the network" in verdict


def test_the_default_policy_is_kept_and_the_networked_one_is_its_twin() -> None:
    import tomllib

    default = tomllib.loads((ROOT / "policies" / "default-v1.toml").read_text())
    networked = tomllib.loads((ROOT / "policies" / "networked.toml").read_text())
    assert "allow_network" not in default["invariants"]
    assert networked["invariants"].pop("allow_network") is True
    assert (networked.pop("name"), networked.pop("version")) == ("networked", 1)
    default.pop("name"), default.pop("version")
    assert networked == default


# -- invariant.fresh-after-seal: a regenerated copy of another candidate's fresh task ----------


def test_a_regenerated_copy_of_an_old_fresh_task_blocks_the_next_candidate(tmp_path: Path,
                                                                          evalrig_home: Path) -> None:
    skip_without("bwrap")
    champion = make_checkpoint(tmp_path / "champion", name="champ")
    first = make_checkpoint(tmp_path / "first", name="first")
    train = run_train(evalrig_home, tmp_path / "t1", champion, first)
    assert train.steps["gate"].code in (0, 1), train.steps["gate"]
    # The next train: a second candidate, sealed now; its "fresh" set is the first train's
    # tasks made again after that seal (new folder names, new created_at, same content).
    second = make_checkpoint(tmp_path / "second", name="second")
    assert eval_sh(evalrig_home, "seal", second).code == 0
    tasks = tmp_path / "t2" / "tasks"
    for old in sorted((train.tasks / "fixed").iterdir()):
        shutil.copytree(old, tasks / "fixed" / old.name)
    for old in sorted((train.tasks / "fresh").iterdir()):
        add_task(tasks, "fresh", "again-" + old.name, prompt=(old / "prompt.md").read_text(), created_at=utc_now())
    again = run_train(evalrig_home, tmp_path / "t2", champion, second, tasks=tasks)
    gate = again.steps["gate"]
    assert gate.code == 3, gate
    rule = decision_rule(again.decision, "invariant.fresh-after-seal")
    assert not rule["held"] and rule["not_after_seal"] == 0  # every created_at is after the seal ...
    assert rule["seen_before"] == 6 and rule["seen_before_tasks"][0] == "again-fr0"  # ... but not fresh
    first_id = json.loads(train.decision.read_text())["candidate"]["checkpoint_id"]
    assert rule["seen_by_candidates"] == [first_id]
    failed = [r["name"] for r in json.loads(again.decision.read_text())["rules"]
              if not r["held"] and r["name"].startswith(("invariant.", "fixed."))]
    assert failed == ["invariant.fresh-after-seal"]
    # The same second candidate on a set made fresh for it passes the rule.
    fresh = tmp_path / "t3" / "tasks"
    for old in sorted((train.tasks / "fixed").iterdir()):
        shutil.copytree(old, fresh / "fixed" / old.name)
    for i in range(6):
        add_task(fresh, "fresh", f"new{i}", prompt=f"Answer ok. ({i}, made for the second train)\n")
    third = run_train(evalrig_home, tmp_path / "t3", champion, second, tasks=fresh)
    assert third.steps["gate"].code == 1, third.steps["gate"]  # a tie: both answer ok; no block
    assert decision_rule(third.decision, "invariant.fresh-after-seal")["held"]


# -- attack 13: inputs that validate and then break every attempt ------------------------------


def assert_refused(step: object, file: Path, field: str) -> None:
    out = step.stderr  # type: ignore[attr-defined]
    assert step.code == 4, step  # type: ignore[attr-defined]
    assert any(line.startswith(f"{file}") and f" {field}: " in line for line in out.splitlines()), out


@pytest.mark.parametrize(("extra", "field"), [
    ('evidence = ["work/[z-a]*.py"]', "evidence[0]"),
    ("[resources]\nmemory_mb = 9223372036854775807", "resources.memory_mb"),
    ("[resources]\nmax_processes = 9223372036854775807", "resources.max_processes"),
    ("max_evidence_bytes = 9223372036854775807", "max_evidence_bytes"),
    ("max_output_bytes = 1099511627777", "max_output_bytes"),
    ("max_evidence_bytes = 0", "max_evidence_bytes"),
    ("timeout_s = 604801", "timeout_s"),
    ("timeout_s = -1", "timeout_s"),
])
def test_validate_refuses_a_limit_or_glob_that_breaks_every_attempt(tmp_path: Path, evalrig_home: Path,
                                                                    extra: str, field: str) -> None:
    tasks = tmp_path / "tasks"
    if extra.startswith("timeout_s"):  # add_task writes one: replace it
        d = add_task(tasks, "fixed", "bad")
        (d / "task.toml").write_text((d / "task.toml").read_text().replace("timeout_s = 30", extra))
    else:
        d = add_task(tasks, "fixed", "bad", extra=extra + "\n")
    assert_refused(eval_sh(evalrig_home, "validate", "--tasks", tasks), d / "task.toml", field)


def test_validate_and_run_refuse_a_command_verifier_timeout_beyond_a_week(tmp_path: Path,
                                                                        evalrig_home: Path) -> None:
    tasks = tmp_path / "tasks"
    d = add_task(tasks, "fixed", "slow", verifier='kind = "command"\ncommand = ["sh", "check.sh"]\n'
                 "timeout_s = 1e9", verifier_files={"check.sh": "exit 0\n"})
    assert_refused(eval_sh(evalrig_home, "validate", "--tasks", tasks), d / "task.toml", "verifier.timeout_s")


def test_a_locked_fixed_task_whose_files_are_a_link_out_is_refused(tmp_path: Path, evalrig_home: Path) -> None:
    tasks = tmp_path / "tasks"
    d = add_task(tasks, "fixed", "linked")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "input.txt").write_text("one\n")
    (d / "files").symlink_to(elsewhere)
    # Before the fix, lock took the link's target string as the content, and editing what it
    # points to changed the task under an unchanged lock.
    step = eval_sh(evalrig_home, "validate", "--tasks", tasks)
    assert step.code == 4 and f"{d / 'files'}: is a symbolic link leading out of the task folder" in step.stderr
    assert eval_sh(evalrig_home, "lock", "--tasks", tasks).code == 4
    ck = make_checkpoint(tmp_path / "ck")
    assert eval_sh(evalrig_home, "seal", ck).code == 0
    run = eval_sh(evalrig_home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "run",
                  "--sandbox", "process")
    assert run.code == 4 and "is a symbolic link leading out of the task folder" in run.stderr, run


def test_a_task_folder_that_is_a_link_is_refused_and_links_inside_are_kept(tmp_path: Path,
                                                                          evalrig_home: Path) -> None:
    tasks = tmp_path / "tasks"
    real = add_task(tmp_path / "elsewhere", "fixed", "real")
    (tasks / "fixed").mkdir(parents=True)
    (tasks / "fixed" / "real").symlink_to(real)
    step = eval_sh(evalrig_home, "validate", "--tasks", tasks)
    assert step.code == 4 and f"{tasks / 'fixed' / 'real'}: the task folder is a symbolic link" in step.stderr
    # A link that stays inside the task folder is the task's own content.
    (tasks / "fixed" / "real").unlink()
    d = add_task(tasks, "fixed", "inside")
    (d / "files").mkdir()
    (d / "files" / "a.txt").write_text("a\n")
    (d / "files" / "b.txt").symlink_to("a.txt")
    assert eval_sh(evalrig_home, "validate", "--tasks", tasks).code == 0


@pytest.mark.parametrize(("edit", "field", "words"), [
    (("checks = [", 'checks = []  # ['), "invariants.checks", "lists no invariants"),
    (("min_tasks = 6", "min_tasks = 0"), "fresh.min_tasks", "min_tasks = 0"),
])
def test_a_policy_that_gives_up_a_protection_validates_with_a_warning(
        tmp_path: Path, evalrig_home: Path, edit: tuple[str, str], field: str, words: str) -> None:
    text = SMALL_POLICY.replace(*edit)
    if edit[1].startswith("checks = []"):  # drop the list's continuation line too
        text = text.replace('\n          "no-secret-leak", "history-preserved", "bundle-integrity", "invariant-suite"]',
                            "")
    policy = write_policy(tmp_path / "policies", text)
    step = eval_sh(evalrig_home, "validate", "--policies", policy)
    assert step.code == 0, step
    assert f"warning: {policy}: {field}: {words}" in step.stderr, step.stderr
