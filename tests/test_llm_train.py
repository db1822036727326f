"""examples/llm-train.sh, run for real through eval.sh (docs/gateway.md, examples/README.md
"The LLM agent and its train"): an agent written with the official `openai` SDK, the
champion on openai/gpt-4.1 and the candidate on openai/gpt-4.1-mini, served by the rig's
model gateway from the stand-in provider on loopback. The gate must promote on efficiency
with both sides' cost metered (never reported), the key must appear nowhere the rig wrote,
and the candidate's replay must run with the stand-in stopped, every call served from the
recording.

Also the agent itself against the stand-in, with the gateway's variables set by hand, as
docs/models.md tells an author to try it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "llm-train.sh"
STANDIN = ROOT / "examples" / "model-standin" / "standin.py"
AGENT = ROOT / "examples" / "llm-agent" / "candidate" / "agent.py"
KEY = "standin-key-llm-train-5f3c9e"


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def model_calls(bundle: Path) -> list[dict[str, Any]]:
    return [c for f in sorted((bundle / "attempts").glob("*/model.jsonl")) for c in lines(f)]


def test_the_two_builds_are_one_program_on_two_models() -> None:
    import tomllib

    champion, candidate = (ROOT / "examples" / "llm-agent" / side for side in ("champion", "candidate"))
    assert (champion / "agent.py").read_bytes() == (candidate / "agent.py").read_bytes()
    got = {side.name: tomllib.loads((side / "checkpoint.toml").read_text()) for side in (champion, candidate)}
    assert {k: (v["agent"]["env"]["LLM_MODEL"], v["models"]["allowed"]) for k, v in got.items()} == {
        "champion": ("gpt-4.1", ["openai/gpt-4.1"]), "candidate": ("gpt-4.1-mini", ["openai/gpt-4.1-mini"])}
    assert not any(v["agent"]["network"] for v in got.values())


@pytest.mark.parametrize("stream", ["0", "1"])
def test_the_agent_answers_through_the_sdk_from_the_variables_alone(tmp_path: Path, stream: str) -> None:
    """The variables the gateway sets, set by hand against the stand-in: the SDK needs
    nothing else; a refusal in the provider's shape is reported and the exit is 1."""
    pytest.importorskip("openai")
    prompt = tmp_path / "prompt.md"
    prompt.write_text("# sum\n\nAdd the numbers.\n\nINPUT: 1 + 2\n")
    (tmp_path / "answers.json").write_text(json.dumps({prompt.read_text(): "3"}))
    port_file, log = tmp_path / "port", tmp_path / "requests.jsonl"
    standin = subprocess.Popen([sys.executable, str(STANDIN), "--port", "0", "--port-file", str(port_file),
                                "--key", "attempt-token", "--answers", str(tmp_path / "answers.json"),
                                "--log", str(log)], stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if port_file.is_file() and port_file.read_text().strip():
                break
            time.sleep(0.05)
        out = tmp_path / "out"
        out.mkdir()
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "EVALRIG_PROMPT": str(prompt),
               "EVALRIG_OUT": str(out), "EVALRIG_SEED": "11", "LLM_MODEL": "gpt-4.1-mini", "LLM_STREAM": stream,
               "OPENAI_BASE_URL": f"http://127.0.0.1:{port_file.read_text().strip()}/v1",
               "OPENAI_API_KEY": "attempt-token"}
        ok = subprocess.run([sys.executable, str(AGENT)], env=env, capture_output=True, text=True, timeout=60)
        assert ok.returncode == 0, ok.stderr
        assert (out / "answer.txt").read_text() == "3\n"
        refused = subprocess.run([sys.executable, str(AGENT)], env={**env, "OPENAI_API_KEY": "wrong"},
                                 capture_output=True, text=True, timeout=60)
        assert refused.returncode == 1 and "HTTP 401" in refused.stderr, refused.stderr
    finally:
        standin.terminate()
        standin.wait(timeout=10)
    calls = lines(log)
    assert [(c["path"], c["key_ok"]) for c in calls] == [("/v1/chat/completions", True),
                                                          ("/v1/chat/completions", False)]
    body = calls[0]["body"]
    assert (body["model"], body["temperature"], body["seed"], body.get("stream", False)) == (
        "gpt-4.1-mini", 0, 11, stream == "1")


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
def test_the_llm_train_promotes_on_metered_cost_and_replays_with_the_stand_in_stopped(tmp_path: Path) -> None:
    home, train = tmp_path / "home", tmp_path / "train"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALRIG_")}
    env.update({"EVALRIG_HOME": str(home), "NO_COLOR": "1", "JOBS": "2", "STANDIN_API_KEY": KEY})
    p = subprocess.run([str(SCRIPT), str(train)], capture_output=True, text=True, env=env, timeout=1800,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    check_train(train, home, p.stdout, KEY)


def check_train(train: Path, home: Path, stdout: str, key: str) -> None:
    # the verdict line, and the decision behind it
    assert "promote (efficiency)" in stdout.splitlines(), stdout[-3000:]
    decision = json.loads((train / "comparison" / "decisions" / "default-v2.json").read_text())
    assert (decision["verdict"], decision["reason"]) == ("promote", "efficiency")
    held = {r["name"]: r["held"] for r in decision["rules"]}
    assert held["invariant.isolated"] and held["fresh.efficiency"] and not held["fresh.quality"]
    comparison = json.loads((train / "comparison" / "comparison.json").read_text())
    assert comparison["pricing"]["genai_prices"] and comparison["pricing"]["as_of"]
    assert "metered" in (train / "comparison" / "decisions" / "default-v2.md").read_text()

    # metered cost on both sides, every attempt: the champion's model costs five times more
    cost = {}
    for side in ("champion", "candidate"):
        actuals = lines(train / side / "actuals.jsonl")
        assert len(actuals) == 60  # 20 fresh tasks x 3 trials
        assert {a["spend"]["candidate"]["source"] for a in actuals} == {"metered"}
        cost[side] = sum(a["spend"]["candidate"]["cost_usd"] for a in actuals)
        assert {(r["status"], r["network"]) for r in lines(train / side / "results.jsonl")} == {("passed", False)}
        calls = model_calls(train / side)
        assert len(calls) == 60 and {(c["role"], c["usage_source"], c["status"]) for c in calls} == {
            ("candidate", "provider", 200)}
        model = json.loads((train / side / "manifest.json").read_text())["gateway"]
        assert model["upstreams"]["openai"]["api"] == "openai"
    assert cost["candidate"] > 0 and cost["candidate"] / cost["champion"] == pytest.approx(0.2, rel=1e-6)
    assert {c["model"] for c in model_calls(train / "champion")} == {"gpt-4.1"}
    assert {c["model"] for c in model_calls(train / "candidate")} == {"gpt-4.1-mini"}

    # the stand-in got exactly the two runs' calls, each with the real key the gateway added
    served = lines(train / "standin-requests.jsonl")
    assert len(served) == 120 and all(r["key_ok"] for r in served)
    # ... which appears nowhere the rig wrote (bundles, evidence, the home)
    for where in (train / "champion", train / "candidate", train / "candidate-replay", home):
        for f in where.rglob("*"):
            if f.is_file():
                assert key.encode() not in f.read_bytes(), f

    # the replay ran after the stand-in stopped: nothing more reached it, and its port is closed
    port = int((train / "standin.port").read_text())
    assert not _port_open(port)
    replay = train / "candidate-replay"
    manifest = json.loads((replay / "manifest.json").read_text())
    assert manifest["replay_of"]["run_id"] == json.loads((train / "candidate" / "manifest.json").read_text())["run_id"]
    assert all(r["status"] == "passed" for r in lines(replay / "results.jsonl"))
    calls = model_calls(replay)
    assert len(calls) == 60 and {(c["usage_source"], c["status"]) for c in calls} == {("replayed", 200)}
    assert {a["spend"]["candidate"]["source"] for a in lines(replay / "actuals.jsonl")} == {"replayed"}
