"""Episodes through eval.sh (docs/episodes.md): real agents and a real scripted driver,
each termination of the table, the transcript's keys and prefixes, the driver's files,
verify's re-derivation and a one-byte tamper, the driver's faults and bad tasks."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.episodes import add_episode_task, episode_checkpoint, transcript
from tests.redteam import bwrap_works, eval_sh, results


def _level() -> str:
    return "bwrap" if bwrap_works() else "process"


def _run(home: Path, ck: Path, tasks: Path, out: Path, *args: str):  # type: ignore[no-untyped-def]
    seal = eval_sh(home, "seal", ck)
    assert seal.code == 0, seal
    return eval_sh(home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", out, "--repeat", "1",
                   "--sandbox", _level(), "--jobs", "2", *args)


def _one(tmp_path: Path, agent: str, **task: object) -> tuple[object, dict, list[dict], Path]:
    """One episode task run by one agent: (the run's step, its result, its transcript, bundle)."""
    tasks = tmp_path / "tasks"
    add_episode_task(tasks, "bank", **task)  # type: ignore[arg-type]
    ck = episode_checkpoint(tmp_path / "ck", agent)
    out = tmp_path / "out"
    step = _run(tmp_path / "home", ck, tasks, out, "--max-retries", "0")
    assert step.code in (0, 5), step
    [res] = results(out)
    return step, res, transcript(out, str(res["attempt_id"])), out


def _canonical(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def test_gold_episode_passes_with_a_full_transcript_and_the_driver_files(tmp_path: Path) -> None:
    step, res, lines, out = _one(tmp_path, "gold")
    assert step.code == 0, step
    assert res["status"] == "passed" and res["termination"] == "driver_end"
    # every frame in both directions, in order, with exactly the documented keys
    assert [x["seq"] for x in lines] == list(range(len(lines)))
    route = [(x["from"], x["to"], x["frame"]["type"]) for x in lines]
    assert route == [
        ("rig", "driver", "start"), ("driver", "rig", "session"), ("rig", "agent", "session"),
        ("agent", "rig", "message"), ("rig", "driver", "message"), ("driver", "rig", "reply"),
        ("rig", "agent", "turn"), ("agent", "rig", "message"), ("rig", "driver", "message"),
        ("driver", "rig", "end"), ("rig", "agent", "end"), ("rig", "driver", "finish")]
    t = [x["t_ms"] for x in lines]
    assert t == sorted(t) and t[0] >= 0
    # prefix: on agent frames carrying chat messages only, recomputed here from the transcript
    seen: list[object] = []
    for x in lines:
        carries = x["to"] == "agent" or x["from"] == "agent"
        carries = carries and x["frame"]["type"] in ("session", "turn", "message")
        if not carries:
            assert set(x) == {"seq", "from", "to", "frame", "t_ms"}, x
            continue
        assert set(x) == {"seq", "from", "to", "frame", "t_ms", "prefix"}, x
        assert x["prefix"] == "sha256:" + hashlib.sha256(_canonical(seen)).hexdigest()
        msgs = x["frame"]["messages"] if "messages" in x["frame"] else [x["frame"]["message"]]
        seen.extend(msgs)
    # per-turn usage kept as the agent sent it, and summed as the attempt's usage
    assert lines[3]["frame"]["usage"] == {"cost_usd": 0.01, "input_tokens": 10, "output_tokens": 2}
    [actual] = [json.loads(x) for x in (out / "actuals.jsonl").read_bytes().splitlines()]
    assert actual["cost_usd"] == pytest.approx(0.02) and actual["input_tokens"] == 20
    world = json.loads((out / "attempts" / str(res["attempt_id"]) / "driver" / "world.json").read_text())
    assert world == {"balance": 5, "calls": 1, "termination": "driver_end"}
    ok = eval_sh(tmp_path / "home", "verify", out)
    assert ok.code == 0, ok


def test_one_byte_of_the_transcript_changed_fails_verify(tmp_path: Path) -> None:
    _, res, _, out = _one(tmp_path, "gold")
    path = out / "attempts" / str(res["attempt_id"]) / "transcript.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    [i] = [i for i, x in enumerate(lines) if b'"from":"agent"' in x and b'"content":"done"' in x]
    lines[i] = lines[i].replace(b'"content":"done"', b'"content":"Done"')  # one byte
    path.write_bytes(b"".join(lines))
    bad = eval_sh(tmp_path / "home", "verify", out)
    assert bad.code == 4, bad
    assert "transcript.jsonl" in bad.stderr
    assert "recorded passed, re-derived failed" in bad.stderr  # the answer is read from the transcript


def test_verify_rederives_a_command_verdict_from_the_driver_files_without_the_driver(tmp_path: Path) -> None:
    judge = ("import json, os, sys\n"
             "w = json.load(open(os.path.join(os.environ['EVALRIG_EVIDENCE'], 'driver', 'world.json')))\n"
             "sys.exit(0 if w['balance'] == 5 else 1)\n")
    _, res, _, out = _one(tmp_path, "gold", verifier='kind = "command"\ncommand = ["python3", "judge.py"]',
                          verifier_files={"judge.py": judge})
    assert res["status"] == "passed", res
    # the driver is gone: verify never needs it
    (tmp_path / "tasks" / "fixed" / "bank" / "driver" / "driver.py").write_text("raise SystemExit(9)\n")
    ok = eval_sh(tmp_path / "home", "verify", out)
    # the task's digest changed (its driver did), but the verifier's identity did not
    assert ok.code == 0, ok


@pytest.mark.parametrize(("agent", "termination", "status"), [
    ("noop", "agent_exit", "failed"),
    ("exit_mid_ok", "agent_exit", "failed"),
    ("exit_mid", "agent_error", "agent_error"),
    ("garbage", "agent_error", "agent_error"),
    ("flood", "agent_error", "agent_error"),
    ("user_role", "agent_error", "agent_error"),
    ("after_end", "agent_error", "agent_error"),
    ("deep", "agent_error", "agent_error"),
    ("empty", "agent_error", "agent_error"),
    ("empty_null", "agent_error", "agent_error"),
])
def test_what_the_agent_does_ends_the_episode(tmp_path: Path, agent: str, termination: str,
                                              status: str) -> None:
    _, res, lines, out = _one(tmp_path, agent, scenario={})
    assert (res["termination"], res["status"]) == (termination, status), res
    verified = eval_sh(tmp_path / "home", "verify", out)  # the termination re-derived from the transcript
    assert verified.code == 0, verified
    if termination == "agent_error" and agent != "exit_mid":
        offending = [x for x in lines if x["from"] == "agent" and "reason" in x]
        assert offending, lines  # the offending line is in the evidence
        if agent == "deep":  # refused for its depth, before the transcript would have to nest it
            assert "nested over 128 deep" in str(res["error"]), res
        if agent.startswith("empty"):  # neither content nor tool calls, as tau2 rejects it
            assert "neither content" in str(res["error"]), res
        assert not any(x["from"] == "rig" and x["to"] == "driver" and "spam 1" in json.dumps(x)
                       for x in lines)  # never reaches the driver


def test_a_line_over_max_output_bytes_is_the_agents_error(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    d = add_episode_task(tasks, "bank")
    toml = (d / "task.toml").read_text().replace("timeout_s = 30\n", "timeout_s = 30\nmax_output_bytes = 1000\n", 1)
    (d / "task.toml").write_text(toml)
    ck = episode_checkpoint(tmp_path / "ck", "big_line")
    _run(tmp_path / "home", ck, tasks, tmp_path / "out")
    [res] = results(tmp_path / "out")
    assert res["termination"] == "agent_error" and "max_output_bytes" in str(res["error"])


def test_an_agent_that_does_not_answer_times_out(tmp_path: Path) -> None:
    _, res, _, _ = _one(tmp_path, "hang", bounds="turn_timeout_s = 1\n")
    assert (res["termination"], res["status"]) == ("agent_timeout", "timeout"), res


def test_timeout_scale_scales_the_turn_and_driver_limits_too(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    add_episode_task(tasks, "bank", bounds="turn_timeout_s = 1\ndriver_timeout_s = 2\n")
    out = tmp_path / "out"
    step = _run(tmp_path / "home", episode_checkpoint(tmp_path / "ck", "hang"), tasks, out,
                "--max-retries", "0", "--timeout-scale", "2.5")
    assert step.code == 0, step
    [res] = results(out)
    assert (res["termination"], res["status"]) == ("agent_timeout", "timeout"), res
    assert "did not answer within turn_timeout_s (2.5 s)" in str(res["error"]), res


@pytest.mark.parametrize(("agent", "bounds", "termination", "turns"), [
    ("loop", "max_turns = 3\n", "max_turns", 3),
    ("bad_tool", "max_tool_errors = 2\n", "max_tool_errors", 2),
    ("loop", "max_cost_usd = 1.0\n", "budget", 2),
])
def test_each_bound_ends_the_episode_and_the_verifier_decides(tmp_path: Path, agent: str, bounds: str,
                                                                termination: str, turns: int) -> None:
    _, res, lines, out = _one(tmp_path, agent, bounds=bounds)
    assert res["termination"] == termination, res
    verified = eval_sh(tmp_path / "home", "verify", out)
    assert verified.code == 0, verified
    assert res["status"] == "failed"  # the verifier decided: no "done" was said
    said = [x for x in lines if x["from"] == "agent"]
    assert len(said) == turns
    # the message (or reply) that reached the bound is recorded, not relayed
    last_in = [x for x in lines if x["to"] == "rig"][-1]
    assert not any(x["seq"] > last_in["seq"] and x["frame"]["type"] in ("message", "turn") for x in lines)


def test_a_driver_fault_after_the_agents_first_frame_is_final_never_retried(tmp_path: Path) -> None:
    """docs/attempts.md, "Faults never help the candidate": a driver that answers tool calls
    wrongly has already given the agent its session; the attempt is a final infra_error, the
    trial is not attempted again (this used to be retried), and the run exits 5, complete."""
    tasks = tmp_path / "tasks"
    add_episode_task(tasks, "bank", scenario={"mode": "bad_tools"}, bounds="driver_timeout_s = 1\n")
    ck = episode_checkpoint(tmp_path / "ck", "gold")
    step = _run(tmp_path / "home", ck, tasks, tmp_path / "out", "--max-retries", "1")
    assert step.code == 5, step
    [r] = results(tmp_path / "out")
    assert (r["status"], r["termination"], r["fault"], r["final"]) == (
        "infra_error", "driver_fault", "agent", True), r
    assert "answered wrongly" in str(r["error"])
    assert "unscored for good" in step.stderr and "bank:0" in step.stderr, step
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["status"] == "complete"


@pytest.mark.parametrize(("scenario", "why"), [
    ({"mode": "crash"}, "exited 3"),
    ({"mode": "garbage"}, "not a valid frame"),
    ({"mode": "no_session"}, "did not answer within driver_timeout_s"),
])
def test_a_driver_fault_is_an_infra_error_retried_then_the_run_is_incomplete(
        tmp_path: Path, scenario: dict, why: str) -> None:
    tasks = tmp_path / "tasks"
    add_episode_task(tasks, "bank", scenario=scenario, bounds="driver_timeout_s = 1\n")
    ck = episode_checkpoint(tmp_path / "ck", "gold")
    step = _run(tmp_path / "home", ck, tasks, tmp_path / "out", "--max-retries", "1")
    assert step.code == 5, step
    got = results(tmp_path / "out")
    assert len(got) == 2  # retried as a new attempt
    for r in got:
        assert (r["status"], r["termination"]) == ("infra_error", "driver_fault"), r
        assert why in str(r["error"])
    if scenario["mode"] == "crash":
        assert "the world's database is gone" in str(got[0]["error"])  # the driver's stderr tail
    assert "the driver of task bank is at fault" in step.stderr, step


def test_the_agent_cannot_see_the_driver_under_bwrap(tmp_path: Path) -> None:
    if not bwrap_works():
        pytest.skip("bwrap cannot run on this machine")
    tasks = tmp_path / "tasks"
    d = add_episode_task(tasks, "bank")
    spy = (f"import os, json\nfound = [p for p in {[str(d / 'driver'), str(d)]!r} if os.path.exists(p)]\n"
           "import glob\nfor top in ('/tmp', '/dev/shm', '/work', '/root', '/home', '/var'):\n"
           "    found += glob.glob(top + '/**/scenario.json', recursive=True)\n"
           "open(os.path.join(os.environ['EVALRIG_OUT'], 'answer.txt'), 'w').write(json.dumps(found))\n")
    from tests.redteam import make_checkpoint

    ck = make_checkpoint(tmp_path / "ck", spy)
    _run(tmp_path / "home", ck, tasks, tmp_path / "out")
    [res] = results(tmp_path / "out")
    seen = (tmp_path / "out" / "attempts" / str(res["attempt_id"]) / "out" / "answer.txt").read_text()
    assert json.loads(seen) == [], seen


@pytest.mark.parametrize(("change", "field"), [
    ("no_driver_dir", "episode.driver"),
    ("missing_program", "episode.driver[0]"),
    ("missing_script", "episode.driver[1]"),
    ("negative_bound", "episode.max_turns"),
])
def test_validate_and_run_refuse_a_bad_episode_task(tmp_path: Path, change: str, field: str) -> None:
    import shutil

    tasks = tmp_path / "tasks"
    d = add_episode_task(tasks, "bank")
    toml = d / "task.toml"
    if change == "no_driver_dir":
        shutil.rmtree(d / "driver")
    elif change == "missing_program":
        toml.write_text(toml.read_text().replace('["python3", "driver.py"]', '["no-such-program-x", "driver.py"]'))
    elif change == "missing_script":
        (d / "driver" / "driver.py").unlink()
    else:
        toml.write_text(toml.read_text().replace("turn_timeout_s = 10\n", "turn_timeout_s = 10\nmax_turns = -1\n"))
        assert "max_turns = -1" in toml.read_text()
    home = tmp_path / "home"
    v = eval_sh(home, "validate", "--tasks", tasks)
    assert v.code == 4, v
    assert field in v.stdout + v.stderr and "task.toml" in v.stdout + v.stderr, v
    ck = episode_checkpoint(tmp_path / "ck", "gold")
    r = _run(home, ck, tasks, tmp_path / "out")
    assert r.code == 4 and field in r.stderr, r


def test_the_canary_said_to_the_driver_is_found_and_secrets_are_redacted(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    add_episode_task(tasks, "bank")
    ck = episode_checkpoint(tmp_path / "ck", "leaky")
    secret = "s3cr3t-value-0123456789"
    seal = eval_sh(tmp_path / "home", "seal", ck)
    assert seal.code == 0, seal
    run = eval_sh(tmp_path / "home", "run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "out",
                  "--repeat", "1", "--sandbox", _level(), "--secret", "API_KEY", env={"API_KEY": secret})
    assert run.code == 0, run
    [res] = results(tmp_path / "out")
    assert res["termination"] == "driver_end"
    assert res["canary"]["found"] is True and "transcript.jsonl" in res["canary"]["where"], res["canary"]
    data = (tmp_path / "out" / "attempts" / str(res["attempt_id"]) / "transcript.jsonl").read_text()
    assert secret not in data and "[REDACTED:API_KEY]" in data


def test_a_driver_with_network_is_the_operators_grant_through_the_proxy(tmp_path: Path) -> None:
    from tests.redteam import Listener

    if not bwrap_works():
        pytest.skip("bwrap cannot run on this machine")
    listener = Listener(lambda data: b"ack")
    try:
        tasks = tmp_path / "tasks"
        add_episode_task(tasks, "bank", scenario={"net_port": listener.port}, bounds="network = true\n")
        ck = episode_checkpoint(tmp_path / "ck", "gold")
        refused = _run(tmp_path / "home", ck, tasks, tmp_path / "refused")
        assert refused.code == 4 and "episode.network" in refused.stderr, refused
        host = f"127.0.0.1:{listener.port}"
        ok = _run(tmp_path / "home", ck, tasks, tmp_path / "out", "--allow-network", "--allow-host", host)
        assert ok.code == 0, ok
        [res] = results(tmp_path / "out")
        assert res["status"] == "passed" and res["network"] is True and res["network_hosts"] == [host]
        report = json.loads((tmp_path / "out" / "attempts" / str(res["attempt_id"]) / "driver" / "net.json").read_text())
        assert report["direct"] != "connected" and report["connect"] == 200 and report["reply"] == "ack"
    finally:
        listener.close()


def test_an_agent_that_never_reads_a_flood_times_out_and_the_rig_never_blocks(tmp_path: Path) -> None:
    import time

    t0 = time.monotonic()
    _, res, lines, _ = _one(tmp_path, "deaf", scenario={"mode": "big_session"}, bounds="turn_timeout_s = 2\n")
    assert (res["termination"], res["status"]) == ("agent_timeout", "timeout"), res
    assert time.monotonic() - t0 < 25  # the turn's limit ended it, not the task's 30 s
    assert [x["frame"]["type"] for x in lines if x["to"] == "agent"] == ["session", "end"]


def test_verify_rederives_the_termination_from_the_transcript(tmp_path: Path) -> None:
    from evalrig.store.bundle import file_digests

    _, res, _, out = _one(tmp_path, "gold")
    # a results.jsonl that claims another termination, its digest made to agree again
    results_file = out / "results.jsonl"
    results_file.write_text(results_file.read_text().replace('"termination":"driver_end"',
                                                             '"termination":"max_turns"'))
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["files"] = file_digests(out)
    (out / "manifest.json").write_text(json.dumps(manifest))
    bad = eval_sh(tmp_path / "home", "verify", out)
    assert bad.code == 4, bad
    assert "recorded termination max_turns, its transcript shows driver_end" in bad.stderr, bad
