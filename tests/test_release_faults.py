"""The release log under bad input and faults (docs/release-engineers.md): a log edited by one
byte or torn by a crash, two ships at once (real processes), a tripwire interrupted with Ctrl-C
or killed with kill -9 and then resumed, hostile names in what history prints."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from agents.run_kit import add_task
from release_kit import BETTER, ROOT, agent, cli, ok, recompute_chain, train

from evalrig.store.checkpoint import checkpoint_id

FIRST = "sha256:" + "a" * 64


@pytest.fixture
def shipped(tmp_path: Path, evalrig_home: Path) -> tuple[Path, Path, Path]:
    """A log of two ships (b over FIRST, c over b); returns (log, b, c)."""
    log = tmp_path / "releases.jsonl"
    b = agent(tmp_path / "b", evalrig_home, "agent-b")
    c = agent(tmp_path / "c", evalrig_home, "agent-c", answer="no")
    d1 = train(tmp_path, evalrig_home, "t1", FIRST, b, BETTER)
    d2 = train(tmp_path, evalrig_home, "t2", checkpoint_id(b).digest, c, BETTER)
    for d, ck in ((d1, b), (d2, c)):
        ok(cli("sign", d, "--approve", "--by", "alice"))
        ok(cli("ship", d, "--checkpoint", ck, "--log", log))
    return log, b, c


def every_command(tmp_path: Path, log: Path, b: Path, c: Path) -> list[list[object]]:
    decision = tmp_path / "t2" / "cmp" / "decisions" / "default-v2.json"
    tasks = tmp_path / "tasks"
    return [
        ["history", "--log", log], ["history", "--verify-only", "--log", log], ["champion", "--log", log],
        ["ship", decision, "--checkpoint", c, "--log", log],
        ["rollback", "--to", "previous", "--by", "bob", "--reason", "x", "--log", log],
        ["tripwire", "--checkpoint", c, "--tasks", tasks, "--out", tmp_path / "tw", "--log", log],
    ]


@pytest.mark.parametrize(("where", "line"), [("first", 2), ("last", 2)])
def test_a_log_edited_by_one_byte_is_refused_by_every_command(
        tmp_path: Path, shipped: tuple[Path, Path, Path], where: str, line: int) -> None:
    log, b, c = shipped
    data = log.read_bytes()
    at = data.find(b"alice") if where == "first" else data.rfind(b"alice")
    edited = data[:at] + b"A" + data[at + 1:]
    log.write_bytes(edited)
    for argv in every_command(tmp_path, log, b, c):
        r = ok(cli(*argv), 4)
        assert f"{log}:{line}: " in r.stderr, (argv, r.stderr)  # type: ignore[attr-defined]
        r = ok(cli(*argv, "--json"), 4)
        err = json.loads(r.stdout)["error"]  # type: ignore[attr-defined]
        assert (err["file"], err["line"]) == (str(log), line), argv
    assert log.read_bytes() == edited  # nothing written, nothing cut
    assert not (tmp_path / "tw").exists()  # the tripwire ran nothing
    r = cli("history", "--verify-only", "--log", log)
    said = "hash chain breaks at this line" if where == "first" else "not the one the rig last appended"
    assert said in r.stderr  # type: ignore[attr-defined]


def test_a_torn_last_line_is_reported_then_cut_by_the_next_append(
        tmp_path: Path, shipped: tuple[Path, Path, Path]) -> None:
    log, b, c = shipped
    whole = log.read_bytes()
    log.write_bytes(whole + b'{"at":"2026-12-02T12:00:00.000000Z","by":"bo')
    for argv in (["history", "--log", log], ["champion", "--log", log]):
        r = ok(cli(*argv))
        assert f"warning: {log}:3: the last line is torn" in r.stderr  # type: ignore[attr-defined]
    r = ok(cli("rollback", "--to", "previous", "--by", "bob", "--reason", "x", "--log", log))
    assert f"warning: {log}:3: the last line is torn" in r.stderr and "it was cut" in r.stderr  # type: ignore[attr-defined]
    assert log.read_bytes().startswith(whole)
    events = recompute_chain(log)
    assert [e["kind"] for e in events] == ["ship", "ship", "rollback"]
    assert events[2]["to"] == checkpoint_id(b).digest


def eval_sh(home: Path, *args: object) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALRIG_")}
    env.update({"EVALRIG_HOME": str(home), "NO_COLOR": "1"})
    return subprocess.Popen([str(ROOT / "eval.sh"), *map(str, args)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)


def test_two_ships_at_once_one_wins_and_the_log_stays_a_chain(tmp_path: Path, evalrig_home: Path) -> None:
    log = tmp_path / "releases.jsonl"
    ships = []
    for name in ("x", "y"):
        ck = agent(tmp_path / name, evalrig_home, f"agent-{name}")
        d = train(tmp_path, evalrig_home, f"t-{name}", FIRST, ck, BETTER)
        ok(cli("sign", d, "--approve", "--by", "alice"))
        ships.append(("ship", d, "--checkpoint", ck, "--log", log))
    procs = [eval_sh(evalrig_home, *argv) for argv in ships]
    done = [(p.wait(120), p.stdout.read(), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
    assert sorted(code for code, _, _ in done) == [0, 4], done
    loser = next(err for code, _, err in done if code == 4)
    assert "no longer serves" in loser
    events = recompute_chain(log)
    assert [e["kind"] for e in events] == ["ship"] and events[0]["replaces"] == FIRST


def slow_tasks(tmp_path: Path) -> Path:
    tasks = tmp_path / "slow-tasks"
    for i in range(2):
        add_task(tasks, f"inv-{i}", "sleep: 3\nanswer: yes\n", suite="invariant", expected="yes")
    return tasks


def start_tripwire(home: Path, ck: Path, tasks: Path, out: Path, log: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALRIG_")}
    env.update({"EVALRIG_HOME": str(home), "NO_COLOR": "1"})
    return subprocess.Popen(
        [sys.executable, "-m", "evalrig", "tripwire", "--checkpoint", str(ck), "--tasks", str(tasks),
         "--out", str(out), "--log", str(log), "--repeat", "1", "--jobs", "2", "--sandbox", "bwrap"],
        cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_attempt_started(out: Path) -> None:
    import time

    deadline = time.monotonic() + 120
    while not ((out / "attempts.jsonl").is_file() and b"start" in (out / "attempts.jsonl").read_bytes()):
        assert time.monotonic() < deadline, "the tripwire run never started an attempt"
        time.sleep(0.05)


@pytest.mark.parametrize("how", ["ctrl-c", "kill-9"])
def test_an_interrupted_tripwire_appends_nothing_and_its_resume_appends_once(
        tmp_path: Path, shipped: tuple[Path, Path, Path], evalrig_home: Path, how: str) -> None:
    log, b, c = shipped
    ok(cli("rollback", "--to", "previous", "--by", "bob", "--reason", "b again", "--log", log))  # b serves
    before = log.read_bytes()
    tasks, out = slow_tasks(tmp_path), tmp_path / "tw"
    p = start_tripwire(evalrig_home, b, tasks, out, log)
    wait_attempt_started(out)
    p.send_signal(signal.SIGINT if how == "ctrl-c" else signal.SIGKILL)
    _, stderr = p.communicate(timeout=60)
    if how == "ctrl-c":
        assert p.returncode == 130, stderr
        assert "nothing was appended to the release log" in stderr
    assert log.read_bytes() == before
    r = ok(cli("tripwire", "--checkpoint", b, "--tasks", tasks, "--out", out, "--log", log, "--repeat", "1",
               "--jobs", "2", "--sandbox", "bwrap", "--json"))
    assert json.loads(r.stdout)["held"]  # type: ignore[attr-defined]
    r = ok(cli("tripwire", "--checkpoint", b, "--tasks", tasks, "--out", out, "--log", log, "--repeat", "1",
               "--jobs", "2", "--sandbox", "bwrap", "--json"))
    assert json.loads(r.stdout)["already"]  # type: ignore[attr-defined]
    events = recompute_chain(log)
    assert [e["kind"] for e in events] == ["ship", "ship", "rollback", "tripwire"]


def test_names_and_reasons_are_escaped_in_what_history_prints(
        tmp_path: Path, shipped: tuple[Path, Path, Path]) -> None:
    log, _, _ = shipped
    ok(cli("rollback", "--to", "previous", "--by", "bob\x1b[2J", "--reason", "x\x1b]0;owned\x07", "--log", log))
    r = ok(cli("history", "--log", log))
    assert "\x1b" not in r.stdout and "\\x1b[2J" in r.stdout  # type: ignore[attr-defined]


HOSTILE_AGENT = '''
import os, pathlib
prompt = pathlib.Path(os.environ["EVALRIG_PROMPT"]).read_text()
log = pathlib.Path(prompt.split("log: ", 1)[1].split("\\n", 1)[0])
tried = []
for target, data in ((log, b'{"kind":"rollback","forged":true}\\n'), (log.with_name("." + log.name + ".head"), b"0" * 64)):
    try:
        with open(target, "ab") as f:
            f.write(data)
        tried.append(f"wrote {target}")
    except OSError as e:
        tried.append(f"refused {target}: {e.strerror}")
out = pathlib.Path(os.environ["EVALRIG_OUT"])
(out / "attack.txt").write_text("\\n".join(tried) + "\\n")
(out / "answer.txt").write_text("yes\\n")
'''


def test_a_hostile_champion_cannot_touch_the_release_log_from_its_tripwire_run(
        tmp_path: Path, evalrig_home: Path) -> None:
    log = tmp_path / "releases.jsonl"
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    (hostile / "agent.py").write_text(HOSTILE_AGENT)
    (hostile / "checkpoint.toml").write_text('name = "hostile"\n[agent]\ncommand = ["python3", "agent.py"]\n')
    from datetime import timedelta

    from release_kit import NOW

    from evalrig.store.checkpoint import seal

    seal(hostile, evalrig_home, NOW - timedelta(days=1))  # before the train's fresh tasks
    d = train(tmp_path, evalrig_home, "t1", FIRST, hostile, BETTER)
    ok(cli("sign", d, "--approve", "--by", "alice"))
    ok(cli("ship", d, "--checkpoint", hostile, "--log", log))
    tasks = tmp_path / "tasks"
    add_task(tasks, "inv-0", f"log: {log}\n", suite="invariant", expected="yes")
    for sandbox in ("bwrap", "process"):
        r = cli("tripwire", "--checkpoint", hostile, "--tasks", tasks, "--out", tmp_path / f"tw-{sandbox}",
                "--log", log, "--repeat", "1", "--sandbox", sandbox, "--json")
        assert r.exit_code in (0, 3), r.stderr  # type: ignore[attr-defined]
        said = "".join(p.read_text() for p in (tmp_path / f"tw-{sandbox}").rglob("attack.txt"))
        assert said.count("refused") == 2 and "wrote" not in said, said  # the agent tried, and failed
        if r.exit_code == 3:  # process: not isolated, so the tripwire fails and rolls back; fine
            break
    events = recompute_chain(log)  # every line the rig's, the chain and the head intact
    assert "forged" not in log.read_text()
    assert events[0]["kind"] == "ship" and all(e["kind"] in ("tripwire", "rollback") for e in events[1:])
    ok(cli("history", "--verify-only", "--log", log))


def test_an_incomplete_tripwire_run_fails_and_rolls_back(
        tmp_path: Path, shipped: tuple[Path, Path, Path], evalrig_home: Path) -> None:
    log, b, c = shipped  # c serves
    tasks = tmp_path / "faulty"
    add_task(tasks, "inv-0", "answer: even\n", suite="invariant", crash_verifier=True)
    r = ok(cli("tripwire", "--checkpoint", c, "--tasks", tasks, "--out", tmp_path / "tw", "--log", log,
               "--repeat", "1", "--sandbox", "bwrap", "--max-retries", "0", "--json"), 3)
    got = json.loads(r.stdout)  # type: ignore[attr-defined]
    assert got["status"] == "incomplete"
    assert [(x["name"], x["held"]) for x in got["checks"]][0] == ("complete", False)
    assert got["rollback"]["to"] == checkpoint_id(b).digest


def test_a_kill_between_the_tripwire_event_and_its_rollback_is_finished_by_the_next_run(
        tmp_path: Path, shipped: tuple[Path, Path, Path]) -> None:
    from evalrig.store.chain import chain_hash
    from evalrig.store.releases import head_path

    log, b, c = shipped  # c serves, and fails every invariant task
    tasks = tmp_path / "tasks"
    add_task(tasks, "inv-0", "answer: yes\n", suite="invariant", expected="yes")
    argv = ["tripwire", "--checkpoint", c, "--tasks", tasks, "--out", tmp_path / "tw", "--log", log,
            "--repeat", "1", "--sandbox", "bwrap", "--json"]
    record = Path(os.environ["EVALRIG_HOME"]) / "verified-logs"
    before = {p.name: p.read_bytes() for p in record.iterdir()}
    ok(cli(*argv), 3)
    # What a kill after the tripwire line and before the rollback line leaves: the rollback
    # line missing, the head still naming the line before the tripwire event, and the home's
    # record of the log (written after the head) as it was before the tripwire's appends.
    lines = log.read_bytes().split(b"\n")[:-1]
    assert json.loads(lines[-1])["kind"] == "rollback"
    log.write_bytes(b"".join(x + b"\n" for x in lines[:-1]))
    head_path(log).write_text(chain_hash(lines[-3]) + "\n")
    for name, data in before.items():
        (record / name).write_bytes(data)
    r = ok(cli(*argv), 3)
    got = json.loads(r.stdout)  # type: ignore[attr-defined]
    assert got["already"] and got["rollback"]["evidence"] == got["event"]["seq"]
    events = recompute_chain(log)
    assert [e["kind"] for e in events] == ["ship", "ship", "tripwire", "rollback"]
    ok(cli(*argv), 3)  # and once more: nothing new
    assert len(recompute_chain(log)) == 4


def test_rollback_to_a_named_checkpoint_by_a_prefix_of_its_id(
        tmp_path: Path, shipped: tuple[Path, Path, Path]) -> None:
    log, b, c = shipped  # c serves, b served before it
    b_id, c_id = checkpoint_id(b).digest, checkpoint_id(c).digest
    r = ok(cli("rollback", "--to", b_id[7:10], "--by", "bob", "--reason", "x", "--log", log), 4)
    assert "too short" in r.stderr  # type: ignore[attr-defined]
    r = ok(cli("rollback", "--to", c_id, "--by", "bob", "--reason", "x", "--log", log), 4)
    assert "is the checkpoint serving now" in r.stderr  # type: ignore[attr-defined]
    r = ok(cli("rollback", "--to", b_id[7:17], "--by", "bob", "--reason", "x", "--log", log, "--json"))
    e = json.loads(r.stdout)["event"]  # type: ignore[attr-defined]
    assert (e["from"], e["to"], e["trigger"]) == (c_id, b_id, "person")


def test_a_champion_changed_during_its_tripwire_run_fails_sealed_and_rolls_back(
        tmp_path: Path, shipped: tuple[Path, Path, Path], evalrig_home: Path) -> None:
    log, b, c = shipped
    ok(cli("rollback", "--to", "previous", "--by", "bob", "--reason", "b again", "--log", log))  # b serves
    tasks, out = slow_tasks(tmp_path), tmp_path / "tw"
    p = start_tripwire(evalrig_home, b, tasks, out, log)
    wait_attempt_started(out)
    (b / "injected.txt").write_text("changed after the seal\n")  # the build in service changes
    _, stderr = p.communicate(timeout=120)
    assert p.returncode == 3, stderr
    assert "the checkpoint changed during the run" in stderr
    events = recompute_chain(log)
    tw, rb = events[-2], events[-1]
    assert tw["kind"] == "tripwire" and {x["name"]: x["held"] for x in tw["checks"]}["sealed"] is False
    assert (rb["trigger"], rb["from"], rb["to"], rb["evidence"]) == ("tripwire", tw["checkpoint_id"], FIRST, tw["seq"])
