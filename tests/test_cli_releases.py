"""A release's life after the gate, through the CLI: ship, champion, tripwire, rollback, history
(docs/release-engineers.md). Trains are gated comparisons of built bundles (gate_bundles); the
tripwire runs are real runs of real checkpoints; the release log's chain is recomputed here."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from agents.run_kit import add_task
from release_kit import BETTER, CHAMP, NOW, agent, cli, ok, recompute_chain, train

from evalrig.store.checkpoint import checkpoint_id, seal


@pytest.fixture
def invariant_tasks(tmp_path: Path) -> Path:
    tasks = tmp_path / "tasks"
    for i in range(2):
        add_task(tasks, f"inv-{i}", "answer: yes\n", suite="invariant", expected="yes")
    add_task(tasks, "fx-0", "answer: yes\n", suite="fixed", expected="yes")
    return tasks


def tripwire(ckpt: Path, tasks: Path, out: Path, log: Path) -> object:
    return cli("tripwire", "--checkpoint", ckpt, "--tasks", tasks, "--out", out, "--log", log,
               "--repeat", "1", "--jobs", "2", "--sandbox", "bwrap", "--json")


def test_a_release_history_end_to_end(tmp_path: Path, evalrig_home: Path, invariant_tasks: Path) -> None:
    home, log = evalrig_home, tmp_path / "releases.jsonl"
    first = "sha256:" + "a" * 64  # the champion in service before the rig's first ship
    b = agent(tmp_path / "b", home, "agent-b")
    c = agent(tmp_path / "c", home, "agent-c", answer="no")  # fails every invariant task
    b_id, c_id = checkpoint_id(b).digest, checkpoint_id(c).digest

    ok(cli("champion", "--log", log), 1)  # nothing has shipped
    ok(cli("history", "--log", log))
    r = ok(cli("rollback", "--to", "previous", "--by", "bob", "--reason", "x", "--log", log), 4)
    assert "nothing has shipped" in r.stderr and not log.exists()  # type: ignore[attr-defined]

    # train 1: b over the first champion; not approved until a person signs
    d1 = train(tmp_path, home, "t1", first, b, BETTER)
    r = ok(cli("ship", d1, "--checkpoint", b, "--log", log), 1)
    assert "no sign-off" in r.stderr and not log.exists()  # type: ignore[attr-defined]
    ok(cli("sign", d1, "--approve", "--by", "alice"))
    r = ok(cli("ship", d1, "--checkpoint", b, "--log", log, "--json"))
    shipped = json.loads(r.stdout)["event"]  # type: ignore[attr-defined]
    assert (shipped["replaces"], shipped["candidate"]["checkpoint_id"]) == (first, b_id)
    assert shipped["policy"]["version"] == 2 and shipped["tripwires"]["suite"] == "invariant"
    assert shipped["signed_by"] == "alice" and shipped["note"] is None
    before = log.read_bytes()
    r = ok(cli("ship", d1, "--checkpoint", b, "--log", log))  # again: idempotent
    assert "already shipped" in r.stdout and log.read_bytes() == before  # type: ignore[attr-defined]
    r = ok(cli("champion", "--log", log, "--json"))
    got = json.loads(r.stdout)  # type: ignore[attr-defined]
    assert (got["checkpoint_id"], got["name"], got["since"], got["policy"]["version"]) == (b_id, "agent-b", 0, 2)

    # a tripwire on b holds
    r = ok(tripwire(b, invariant_tasks, tmp_path / "tw-b", log))
    held = json.loads(r.stdout)  # type: ignore[attr-defined]
    assert held["held"] and held["rollback"] is None
    assert [c["name"] for c in held["checks"]] == ["complete", "sealed", "isolated", "no-secret-leak",
                                                   "invariant-suite"]

    # train 2: c over b; a train against the first champion (now stale) is refused
    d2 = train(tmp_path, home, "t2", b_id, c, BETTER)
    ok(cli("sign", d2, "--approve", "--by", "alice"))
    ok(cli("ship", d2, "--checkpoint", c, "--log", log))
    stale = agent(tmp_path / "s", home, "agent-stale", answer="stale")
    d3 = train(tmp_path, home, "t3", b_id, stale, BETTER)
    ok(cli("sign", d3, "--approve", "--by", "carol"))
    before = log.read_bytes()
    r = ok(cli("ship", d3, "--checkpoint", stale, "--log", log), 4)
    assert "no longer serves" in r.stderr and log.read_bytes() == before  # type: ignore[attr-defined]

    # a tripwire on a checkpoint that does not serve is refused
    r = ok(tripwire(b, invariant_tasks, tmp_path / "tw-b2", log), 4)
    assert "not the serving champion" in r.stderr  # type: ignore[attr-defined]
    assert not (tmp_path / "tw-b2").exists()

    # a tripwire on c fails: the event and the automatic rollback to b, in one step
    r = ok(tripwire(c, invariant_tasks, tmp_path / "tw-c", log), 3)
    fired = json.loads(r.stdout)  # type: ignore[attr-defined]
    assert not fired["held"]
    assert {c["name"]: c["held"] for c in fired["checks"]}["invariant-suite"] is False
    rb = fired["rollback"]
    assert (rb["from"], rb["to"], rb["trigger"], rb["evidence"]) == (c_id, b_id, "tripwire", fired["event"]["seq"])
    assert fired["event"]["bundle"]["path"] == str(tmp_path / "tw-c")
    assert json.loads(ok(cli("champion", "--log", log, "--json")).stdout)["checkpoint_id"] == b_id  # type: ignore[attr-defined]
    before = log.read_bytes()
    r = ok(tripwire(c, invariant_tasks, tmp_path / "tw-c", log), 3)  # the same run again: recorded once
    assert json.loads(r.stdout)["already"] and log.read_bytes() == before  # type: ignore[attr-defined]

    # a person's rollback: without --by or --reason a usage error; to a checkpoint that never served, 4
    ok(cli("rollback", "--to", "previous", "--reason", "x", "--log", log), 2)
    ok(cli("rollback", "--to", "previous", "--by", "bob", "--log", log), 2)
    ok(cli("rollback", "--to", "previous", "--by", " ", "--reason", "x", "--log", log), 2)
    r = ok(cli("rollback", "--to", checkpoint_id(stale).digest, "--by", "bob", "--reason", "x", "--log", log), 4)
    assert "is not a checkpoint that served before" in r.stderr  # type: ignore[attr-defined]
    assert log.read_bytes() == before
    # previous is the first champion: c left service by a rollback, b serves
    r = ok(cli("rollback", "--to", "previous", "--by", "bob", "--reason", "pages since the ship",
               "--log", log, "--json"))
    person = json.loads(r.stdout)["event"]  # type: ignore[attr-defined]
    assert (person["from"], person["to"], person["trigger"], person["evidence"]) == (b_id, first, "person", None)
    r = ok(cli("champion", "--log", log))
    assert r.stdout.splitlines()[0] == first  # type: ignore[attr-defined]

    # a maintenance release over the first champion (an exception, no win): the note says so
    m = agent(tmp_path / "m", home, "agent-m")
    (m / "patch.txt").write_text("security patch\n")
    seal(m, home, NOW - timedelta(days=1))
    d4 = train(tmp_path, home, "t4", first, m, CHAMP, exception="security-patch")
    assert json.loads(d4.read_text())["verdict"] == "promote-maintenance"
    ok(cli("sign", d4, "--approve", "--by", "dana"))
    r = ok(cli("ship", d4, "--checkpoint", m, "--log", log, "--json"))
    assert json.loads(r.stdout)["event"]["note"] == "shipped as maintenance, no win claimed"  # type: ignore[attr-defined]

    events = recompute_chain(log)
    assert [(e["kind"], e.get("trigger")) for e in events] == [
        ("ship", None), ("tripwire", None), ("ship", None), ("tripwire", None), ("rollback", "tripwire"),
        ("rollback", "person"), ("ship", None)]
    assert [e["held"] for e in events if e["kind"] == "tripwire"] == [True, False]
    r = ok(cli("history", "--log", log, "--json"))
    assert [e["seq"] for e in json.loads(r.stdout)["events"]] == list(range(7))  # type: ignore[attr-defined]
    r = ok(cli("history", "--log", log))
    assert len(r.stdout.splitlines()) == 7 and "FAILED: invariant-suite" in r.stdout  # type: ignore[attr-defined]
    ok(cli("history", "--log", log, "--verify-only"))


def networked_agent(root: Path, home: Path, name: str) -> Path:
    """A real checkpoint whose agent asks for the network (`[agent] network = true`)."""
    d = agent(root, home, name)
    toml = d / "checkpoint.toml"
    toml.write_text(toml.read_text().replace("[agent]\n", "[agent]\nnetwork = true\n"))
    seal(d, home, NOW - timedelta(days=1))
    return d


@pytest.mark.parametrize(("policy", "code"), [("networked.toml", 0), ("default.toml", 3)])
def test_a_tripwire_judges_with_the_promoting_policys_invariants(
        tmp_path: Path, evalrig_home: Path, invariant_tasks: Path, policy: str, code: int) -> None:
    """A champion promoted under a policy that allows network (`[invariants] allow_network =
    true`) runs its tripwire with the network granted, and `isolated` holds as it did at the
    gate; the same champion promoted under the default policy fails it and is rolled back."""
    home, log = evalrig_home, tmp_path / "releases.jsonl"
    n = networked_agent(tmp_path / "n", home, "agent-net")
    d = train(tmp_path, home, "t1", "sha256:" + "a" * 64, n, BETTER, policy=policy)
    ok(cli("sign", d, "--approve", "--by", "alice"))
    r = ok(cli("ship", d, "--checkpoint", n, "--log", log, "--json"))
    allowed = policy == "networked.toml"
    assert json.loads(r.stdout)["event"]["invariants"]["allow_network"] is allowed  # type: ignore[attr-defined]
    # without the grant, a checkpoint that asks for the network is refused before any attempt
    r = ok(tripwire(n, invariant_tasks, tmp_path / "tw-refused", log), 4)
    assert "--allow-network" in r.stderr and log.read_text().count("\n") == 1  # type: ignore[attr-defined]
    r = ok(cli("tripwire", "--checkpoint", n, "--tasks", invariant_tasks, "--out", tmp_path / "tw", "--log", log,
               "--repeat", "1", "--jobs", "2", "--sandbox", "bwrap", "--allow-network", "--json"), code)
    got = json.loads(r.stdout)  # type: ignore[attr-defined]
    checks = {c["name"]: c for c in got["checks"]}
    assert checks["isolated"]["held"] is allowed, checks["isolated"]
    assert all(c["held"] for name, c in checks.items() if name != "isolated")
    assert (got["rollback"] is None) is allowed
    manifest = json.loads((tmp_path / "tw" / "manifest.json").read_text())
    assert manifest["settings"]["allow_network"] is True


@pytest.mark.parametrize("content", [None, b"{\n", b'{"kind": "decision", "verdict": "promote"}\n'])
def test_ship_refuses_a_decision_it_cannot_read_as_bad_input(
        tmp_path: Path, evalrig_home: Path, content: bytes | None) -> None:
    """ship exits 1 only for "not approved" (a readable decision check-release does not approve);
    a decision file that is missing, not JSON or not the decision's format is invalid input,
    exit 4 naming the file, with or without a release log, and nothing is written. check-release,
    the guard a deploy step waits on, answers 1 for anything short of approved, as before."""
    home, log = evalrig_home, tmp_path / "releases.jsonl"
    b = agent(tmp_path / "b", home, "agent-b")
    bad = tmp_path / "default-v2.json"
    if content is not None:
        bad.write_bytes(content)
    r = ok(cli("ship", bad, "--checkpoint", b, "--log", log, "--json"), 4)
    assert json.loads(r.stdout)["error"]["file"] == str(bad) and not log.exists()  # type: ignore[attr-defined]
    ok(cli("check-release", bad, "--checkpoint", b), 1)

    d1 = train(tmp_path, home, "t1", "sha256:" + "a" * 64, b, BETTER)
    ok(cli("sign", d1, "--approve", "--by", "alice"))
    ok(cli("ship", d1, "--checkpoint", b, "--log", log))
    before = log.read_bytes()
    r = ok(cli("ship", bad, "--checkpoint", b, "--log", log), 4)
    assert str(bad) in r.stderr and log.read_bytes() == before  # type: ignore[attr-defined]
    # the verdict file beside a decision is named as such
    r = ok(cli("ship", d1.with_suffix(".md"), "--checkpoint", b, "--log", log), 4)
    assert "not a decision file" in r.stderr and log.read_bytes() == before  # type: ignore[attr-defined]


def test_release_steps_load_neither_the_statistics_nor_the_episode_models(tmp_path: Path, evalrig_home: Path) -> None:
    """check-release, ship and champion are quick calls of a release script (docs/internals.md,
    "Start-up"): in the real entry point, each ends without scipy, the gate's statistics or
    the episode frames loaded, and does its work (approved, shipped, serving)."""
    import subprocess
    import sys

    b = agent(tmp_path / "b", evalrig_home, "agent-b")
    d1 = train(tmp_path, evalrig_home, "t1", "sha256:" + "a" * 64, b, BETTER)
    ok(cli("sign", d1, "--approve", "--by", "alice"))
    log = tmp_path / "releases.jsonl"
    code = ("import sys\nfrom evalrig.cli import main\ntry:\n    main()\nexcept SystemExit as e:\n"
            "    heavy = sorted(m for m in ('scipy', 'evalrig.core.stats', 'evalrig.models.episode') if m in sys.modules)\n"
            "    print('EXIT', e.code, heavy)\n")
    for args in (["check-release", d1, "--checkpoint", b], ["ship", d1, "--checkpoint", b, "--log", log],
                 ["champion", "--log", log]):
        p = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                           timeout=120, env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "EVALRIG_HOME": str(evalrig_home)})
        assert p.stdout.splitlines()[-1] == "EXIT 0 []", (args, p.stdout, p.stderr)
    assert [e["kind"] for e in recompute_chain(log)] == ["ship"]
