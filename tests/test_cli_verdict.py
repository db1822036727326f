"""What a person reads and is told after compare: the verdict file (issue #12 item 9), the
hints on a decision or comparison that changed (item 5), and compare's refusals that say
what differs (item 7). Built bundles (tests/gate_bundles.py), driven through the CLI.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from gate_bundles import Side, Task, counts_tasks, register_run, write_run
from redteam import EVAL_SH, add_task, eval_sh
from typer.testing import CliRunner

from evalrig.cli import app
from evalrig.core.digest import sha256_bytes
from evalrig.models.run import RunManifest
from evalrig.store.bundle import write_run_manifest
from evalrig.store.tasks import load_taskset

ROOT = Path(__file__).resolve().parent.parent
CHAMP = [5, 4, 5, 3, 2, 5, 0, 1, 4, 5, 3, 2, 5, 4, 1, 0, 5, 3, 4, 2, 3, 3, 4, 1, 2, 5, 0, 4, 3, 2]
BETTER = [min(5, c + 2) if i % 3 else c for i, c in enumerate(CHAMP)]


def cli(home: Path, *args: object) -> object:
    return CliRunner().invoke(app, [str(a) for a in args], env={"EVALRIG_HOME": str(home), "NO_COLOR": "1"})


def policy(tmp_path: Path) -> tuple[Path, str]:
    pol = tmp_path / "policy.toml"
    pol.write_bytes((ROOT / "policies" / "default-v1.toml").read_bytes())
    return pol, sha256_bytes(pol.read_bytes())


def runs(tmp_path: Path, home: Path, champ: dict[str, Task], cand: dict[str, Task],
         **cand_kw: object) -> tuple[Path, Path, Path]:
    pol, digest = policy(tmp_path)
    a = write_run(tmp_path / "a", Side("champion-build", champ, policy_digest=digest), home)
    b = write_run(tmp_path / "b", Side("candidate-build", cand, **{"policy_digest": digest, **cand_kw}), home)  # type: ignore[arg-type]
    return a, b, pol


def gated(tmp_path: Path, home: Path, champ: dict[str, Task], cand: dict[str, Task]) -> tuple[Path, int]:
    a, b, pol = runs(tmp_path, home, champ, cand)
    assert cli(home, "compare", a, b, "--out", tmp_path / "cmp").exit_code == 0  # type: ignore[attr-defined]
    r = cli(home, "gate", tmp_path / "cmp", "--policy", pol)
    return tmp_path / "cmp" / "decisions" / "default-v1.json", r.exit_code  # type: ignore[attr-defined]


# -- item 9: the verdict file ---------------------------------------------------------------


def test_a_promotions_verdict_file_reads_as_an_argument(tmp_path: Path, evalrig_home: Path) -> None:
    decision, code = gated(tmp_path, evalrig_home, counts_tasks(CHAMP), counts_tasks(BETTER))
    assert code == 0
    d = json.loads(decision.read_text())
    md = decision.with_suffix(".md").read_text()
    # checkpoints by name and short id, never a bare digest
    cand, champ = d["candidate"]["checkpoint_id"], d["champion"]["checkpoint_id"]
    short = cand.removeprefix("sha256:")[:12]
    assert f"- candidate: `candidate-build` `{short}`" in md  # names are untrusted text: code spans
    assert f"- champion: `champion-build` `{champ.removeprefix('sha256:')[:12]}`" in md
    assert cand not in md and champ not in md
    # the efficiency ratio and its bound
    eff = next(r for r in d["rules"] if r["name"] == "fresh.efficiency")
    assert (f"- efficiency: cost ratio (candidate / champion) {eff['ratio']:.4g}, upper 97.5 % bound "
            f"{eff['upper_bound']:.4g}") in md
    # not signed yet, and the command that signs it
    assert f"**Not signed yet.** A person signs it: `evalrig sign {decision} --approve --by NAME`" in md
    # what would change a promotion
    change = md.split("## What would change the answer\n\n")[1].split("\n\n")[0].splitlines()
    assert change[0].startswith("- The quality win stands on ") and "at least 6 needed" in change[0]
    assert change[-1].startswith("- Any invariant failing, or a stable fixed task regressing, would block it")
    assert not any("fresh tasks, so that" in line for line in change)  # detectability is no reason to doubt a win
    # a veto that holds is not styled like a failure
    assert "| `fresh.loss` | no loss shown |" in md and "**no**" not in md and "**FAILS**" not in md


def test_sign_rewrites_the_verdict_file_and_never_the_decision(tmp_path: Path, evalrig_home: Path) -> None:
    decision, _ = gated(tmp_path, evalrig_home, counts_tasks(CHAMP), counts_tasks(BETTER))
    before = decision.read_bytes()
    r = cli(evalrig_home, "sign", decision, "--approve", "--by", "alice")
    assert r.exit_code == 0 and "now says who signed" in r.stdout  # type: ignore[attr-defined]
    md = decision.with_suffix(".md").read_text()
    assert "**Signed: approved by `alice`** at " in md and "(agrees with the gate)" in md
    assert "Not signed yet" not in md and "## Sign-offs (1)" in md
    r = cli(evalrig_home, "sign", decision, "--reject", "--by", "bob", "--reason", "flaky on Mondays")
    assert r.exit_code == 0  # type: ignore[attr-defined]
    md = decision.with_suffix(".md").read_text()
    assert "**Signed: rejected by `bob`** at " in md and "overrides the gate: `flaky on Mondays`" in md
    assert "(2 sign-offs; the last one counts)" in md
    assert decision.read_bytes() == before
    # a later gate of the same comparison rewrites the verdict file: still signed
    assert cli(evalrig_home, "gate", tmp_path / "cmp", "--policy", tmp_path / "policy.toml").exit_code == 0  # type: ignore[attr-defined]
    md = decision.with_suffix(".md").read_text()
    assert "**Signed: rejected by `bob`**" in md and "Earlier gates of this candidate (1)" in md
    assert decision.read_bytes() == before


def test_a_keep_champion_says_rejecting_agrees(tmp_path: Path, evalrig_home: Path) -> None:
    decision, code = gated(tmp_path, evalrig_home, counts_tasks(CHAMP), counts_tasks(CHAMP))
    assert code == 1
    md = decision.with_suffix(".md").read_text()
    assert f"`evalrig sign {decision} --reject --by NAME` agrees with the gate; `--approve` overrides it" in md


def test_a_block_names_the_failing_task_in_its_first_sentence(tmp_path: Path, evalrig_home: Path) -> None:
    cand = counts_tasks(BETTER)
    cand["fixed-001"] = Task("fixed", [False] * 5)
    decision, code = gated(tmp_path, evalrig_home, counts_tasks(CHAMP), cand)
    assert code == 3
    first = decision.with_suffix(".md").read_text().splitlines()[0]
    assert first.startswith("# BLOCK: fixed.task does not hold: the candidate regressed on the stable fixed "
                            "task fixed-001 (champion 5/5, candidate 0/5, Fisher p ")
    r = cli(evalrig_home, "gate", tmp_path / "cmp", "--policy", tmp_path / "policy.toml")
    assert r.stdout.splitlines()[1].startswith("Blocked: fixed.task does not hold: the candidate regressed on "  # type: ignore[attr-defined]
                                               "the stable fixed task fixed-001")


def test_a_blocked_invariant_suite_names_its_task(tmp_path: Path, evalrig_home: Path) -> None:
    cand = counts_tasks(BETTER)
    cand["inv-000"] = Task("invariant", [True, True, False, True, True])
    decision, code = gated(tmp_path, evalrig_home, counts_tasks(CHAMP), cand)
    assert code == 3
    assert decision.with_suffix(".md").read_text().startswith(
        "# BLOCK: invariant.invariant-suite does not hold: 1 invariant-suite task (inv-000) did not pass on "
        "every trial\n")


def test_through_eval_sh_the_commands_quoted_are_eval_sh_ones(tmp_path: Path, evalrig_home: Path) -> None:
    a, b, pol = runs(tmp_path, evalrig_home, counts_tasks(CHAMP), counts_tasks(BETTER))
    assert eval_sh(evalrig_home, "compare", a, b, "--out", tmp_path / "cmp").code == 0
    gate = eval_sh(evalrig_home, "gate", tmp_path / "cmp", "--policy", pol)
    decision = tmp_path / "cmp" / "decisions" / "default-v1.json"
    assert gate.code == 0, gate
    assert f"a person signs it: {EVAL_SH} sign {decision} --approve|--reject --by NAME" in gate.stdout
    assert f"`{EVAL_SH} sign {decision} --approve --by NAME`" in decision.with_suffix(".md").read_text()
    check = eval_sh(evalrig_home, "check-release", decision, "--checkpoint", tmp_path)
    assert check.code == 1 and f"`{EVAL_SH} sign {decision} --approve --by NAME`" in check.stderr, check


# -- item 5: one true hint per situation -------------------------------------------------------


def hint(r: object) -> str:
    return json.loads(r.stdout)["error"]["hint"]  # type: ignore[attr-defined]


def test_an_edited_decision_gets_one_hint_and_following_it_works(tmp_path: Path, evalrig_home: Path) -> None:
    decision, _ = gated(tmp_path, evalrig_home, counts_tasks(CHAMP), counts_tasks(BETTER))
    decision.write_text(decision.read_text().replace('"quality"', '"efficiency"', 1))
    signed = cli(evalrig_home, "sign", decision, "--approve", "--by", "alice", "--json")
    gate = cli(evalrig_home, "gate", tmp_path / "cmp", "--policy", tmp_path / "policy.toml", "--json")
    check = cli(evalrig_home, "check-release", decision, "--checkpoint", tmp_path, "--json")
    assert (signed.exit_code, gate.exit_code, check.exit_code) == (4, 4, 1)  # type: ignore[attr-defined]
    assert hint(signed) == hint(gate) == json.loads(check.stdout)["hint"]  # type: ignore[attr-defined]
    assert hint(gate).startswith("move the edited file aside and gate the comparison again")
    assert "version" not in hint(gate)  # a new policy version is refused: the runs pinned this one
    assert "it was edited after the gate, or not written by one" in json.loads(gate.stdout)["error"]["message"]  # type: ignore[attr-defined]
    shutil.move(decision, tmp_path / "edited.json")
    assert cli(evalrig_home, "gate", tmp_path / "cmp", "--policy", tmp_path / "policy.toml").exit_code == 0  # type: ignore[attr-defined]
    assert cli(evalrig_home, "sign", decision, "--approve", "--by", "alice").exit_code == 0  # type: ignore[attr-defined]


def test_an_edited_comparison_gets_one_hint_and_following_it_works(tmp_path: Path, evalrig_home: Path) -> None:
    decision, _ = gated(tmp_path, evalrig_home, counts_tasks(CHAMP), counts_tasks(BETTER))
    comparison = tmp_path / "cmp" / "comparison.json"
    comparison.write_bytes(comparison.read_bytes() + b" ")
    a, b = tmp_path / "a", tmp_path / "b"
    signed = cli(evalrig_home, "sign", decision, "--approve", "--by", "alice", "--json")
    gate = cli(evalrig_home, "gate", tmp_path / "cmp", "--policy", tmp_path / "policy.toml", "--json")
    again = cli(evalrig_home, "compare", a, b, "--out", tmp_path / "cmp", "--json")
    check = cli(evalrig_home, "check-release", decision, "--checkpoint", tmp_path, "--json")
    assert (signed.exit_code, gate.exit_code, again.exit_code, check.exit_code) == (4, 4, 4, 1)  # type: ignore[attr-defined]
    assert hint(signed) == hint(gate) == hint(again) == json.loads(check.stdout)["hint"]  # type: ignore[attr-defined]
    assert hint(gate).startswith("compare the two runs again into a new --out, gate that comparison and sign")
    assert cli(evalrig_home, "compare", a, b, "--out", tmp_path / "cmp2").exit_code == 0  # type: ignore[attr-defined]
    assert cli(evalrig_home, "gate", tmp_path / "cmp2", "--policy", tmp_path / "policy.toml").exit_code == 0  # type: ignore[attr-defined]
    new = tmp_path / "cmp2" / "decisions" / "default-v1.json"
    assert cli(evalrig_home, "sign", new, "--approve", "--by", "alice").exit_code == 0  # type: ignore[attr-defined]


def test_a_decision_of_another_rig_version_says_it_still_stands(tmp_path: Path, evalrig_home: Path) -> None:
    """Same comparison, same policy, other bytes, and a gate wrote them: the rig changed."""
    decision, _ = gated(tmp_path, evalrig_home, counts_tasks(CHAMP), counts_tasks(BETTER))
    old = decision.read_text().replace("Promote: the candidate", "Promote: this candidate", 1)
    decision.write_text(old)
    with (decision.parent / "issued.jsonl").open("a") as f:  # as the older rig's gate recorded it
        f.write(json.dumps({"decision_digest": sha256_bytes(old.encode()), "decision_file": decision.name,
                            "issued_at": "2026-12-01T00:00:00.000000Z", "schema_version": "1.0"}) + "\n")
    gate = cli(evalrig_home, "gate", tmp_path / "cmp", "--policy", tmp_path / "policy.toml", "--json")
    assert gate.exit_code == 4  # type: ignore[attr-defined]
    e = json.loads(gate.stdout)["error"]  # type: ignore[attr-defined]
    assert "gated by another version of evalrig" in e["message"]
    assert e["hint"].startswith("that decision stands as issued and can be signed")


# -- item 7: mismatches that say what differs ------------------------------------------------


def test_a_task_set_mismatch_names_the_tasks(tmp_path: Path, evalrig_home: Path) -> None:
    champ = counts_tasks([3] * 4)
    cand = counts_tasks([3] * 12)
    cand["fresh-001"] = Task("fresh", [True] * 5, content=sha256_bytes(b"regenerated"))
    a, b, _ = runs(tmp_path, evalrig_home, champ, cand, taskset_id=sha256_bytes(b"other"))
    r = cli(evalrig_home, "compare", a, b, "--out", tmp_path / "cmp", "--json")
    assert r.exit_code == 4  # type: ignore[attr-defined]
    e = json.loads(r.stdout)["error"]  # type: ignore[attr-defined]
    assert e["message"].startswith(
        "the runs differ in task sets: 8 tasks only the candidate's run has (fresh-004, fresh-005, fresh-006, "
        "fresh-007, fresh-008, and 3 more); 1 tasks with other content (fresh-001)")
    assert e["field"] == "taskset.id"


def test_a_task_set_mismatch_is_exact_while_the_task_folders_are_unchanged(tmp_path: Path,
                                                                           evalrig_home: Path) -> None:
    one, two = tmp_path / "t1", tmp_path / "t2"
    for dir in (one, two):
        add_task(dir, "fixed", "fx0")
        add_task(dir, "invariant", "iv0", prompt="Say ok.\n" if dir == one else "Say OK, please.\n")
        add_task(dir, "fresh", "fr0", created_at="2026-12-01T10:00:00.000000Z")
    add_task(one, "fixed", "fx1")
    # made in a scratch home, then signed and registered in this one as runs over these task sets
    a, b, _ = runs(tmp_path, tmp_path / "scratch-home", counts_tasks([3] * 4), counts_tasks([3] * 4),
                   taskset_id=sha256_bytes(b"other"))
    for run, tasks in ((a, one), (b, two)):
        m = RunManifest.model_validate_json((run / "manifest.json").read_bytes())
        settings = m.settings.model_copy(update={"tasks_dir": str(tasks)})
        taskset = m.taskset.model_copy(update={"id": load_taskset(tasks).id})
        register_run(evalrig_home, write_run_manifest(run, m.model_copy(update={"settings": settings,
                                                                                 "taskset": taskset}), evalrig_home))
    r = cli(evalrig_home, "compare", a, b, "--out", tmp_path / "cmp", "--json")
    assert r.exit_code == 4  # type: ignore[attr-defined]
    message = json.loads(r.stdout)["error"]["message"]  # type: ignore[attr-defined]
    assert message.startswith("the runs differ in task sets: 1 tasks only the champion's run has (fx1); "
                              "1 tasks with other content (iv0) (champion sha256:")


@pytest.mark.parametrize("side", ["champion", "candidate"])
def test_a_missing_policy_pin_is_said_in_words(tmp_path: Path, evalrig_home: Path, side: str) -> None:
    pol, digest = policy(tmp_path)
    a = write_run(tmp_path / "a", Side("c1", counts_tasks([3] * 4),
                                       policy_digest=None if side == "champion" else digest), evalrig_home)
    b = write_run(tmp_path / "b", Side("c2", counts_tasks([3] * 4),
                                       policy_digest=None if side == "candidate" else digest), evalrig_home)
    r = cli(evalrig_home, "compare", a, b, "--out", tmp_path / "cmp")
    assert r.exit_code == 4  # type: ignore[attr-defined]
    pinned = f"default v1 ({digest})"
    unpinned = "no policy pinned (run without --policy)"
    want = (f"champion {unpinned}, candidate {pinned}" if side == "champion"
            else f"champion {pinned}, candidate {unpinned}")
    assert f"the runs differ in pinned policies: {want}" in r.stderr and "None" not in r.stderr  # type: ignore[attr-defined]
