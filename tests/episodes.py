"""Small programs that play an episode's two sides, for the episode tests (tests/test_episode*.py).

`DRIVER` is a scripted counterpart over a tiny world (a bank balance): it opens with the
customer's request, executes `deposit` tool calls, and ends the conversation when the agent
answers without a tool call. `scenario.json` beside it picks a misbehaviour. The agents are
each a few lines: a gold one, and one per way an agent can go wrong.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.redteam import add_task, make_checkpoint

DRIVER = """\
import json, os, sys, time

scen = json.load(open("scenario.json"))
mode = scen.get("mode", "normal")

def send(o):
    sys.stdout.write(json.dumps(o) + "\\n")
    sys.stdout.flush()

start = json.loads(sys.stdin.readline())
assert start["type"] == "start" and start["task_id"] == os.environ["EVALRIG_TASK_ID"]
if mode == "crash":
    sys.stderr.write("driver: the world's database is gone\\n")
    sys.exit(3)
if mode == "garbage":
    sys.stdout.write("this is not json\\n"); sys.stdout.flush()
    time.sleep(30)
if mode == "no_session":
    time.sleep(30)
if "net_port" in scen:  # a driver that needs the network: direct, then through the rig's proxy
    import socket
    port, report = scen["net_port"], {}
    try:
        socket.create_connection(("127.0.0.1", port), timeout=3).close()
        report["direct"] = "connected"
    except OSError as e:
        report["direct"] = type(e).__name__
    proxy = os.environ.get("HTTPS_PROXY")
    if proxy:
        host, _, pport = proxy.split("//", 1)[1].rstrip("/").rpartition(":")
        s = socket.create_connection((host, int(pport)), timeout=5)
        s.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\\r\\nHost: 127.0.0.1:%d\\r\\n\\r\\n" % (port, port))
        head = b""
        while b"\\r\\n\\r\\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                break
            head += chunk
        report["connect"] = int(head.split()[1]) if head else None
        if report["connect"] == 200:
            s.sendall(b"hello")
            report["reply"] = s.recv(100).decode()
        s.close()
    with open(os.path.join(os.environ["EVALRIG_DRIVER_OUT"], "net.json"), "w") as fh:
        json.dump(report, fh)
world = {"balance": 0, "calls": 0}
if mode == "big_session":  # far more than a pipe holds: the rig must not block writing it
    send({"type": "session", "tools": [], "messages": [{"role": "user", "content": "x" * (4 << 20)}]})
    for line in sys.stdin:
        if json.loads(line)["type"] == "finish":
            break
    sys.exit(0)
send({"type": "session",
      "tools": [{"type": "function", "function": {"name": "deposit", "parameters": {
          "type": "object", "properties": {"amount": {"type": "integer"}}}}}],
      "messages": [{"role": "user", "content": "Please deposit 5."}]})
for line in sys.stdin:
    f = json.loads(line)
    if f["type"] == "finish":
        world["termination"] = f["termination"]
        break
    calls = f["message"].get("tool_calls") or []
    if calls:
        out = []
        for c in calls:
            world["calls"] += 1
            args = json.loads(c["function"]["arguments"])
            if c["function"]["name"] == "deposit" and isinstance(args.get("amount"), int):
                world["balance"] += args["amount"]
                out.append({"role": "tool", "tool_call_id": c["id"], "content": str(world["balance"])})
            else:
                out.append({"role": "tool", "tool_call_id": c["id"], "content": "no such tool", "error": True})
        if mode == "bad_tools":
            out = [{"role": "user", "content": "one answer for all"}]
        send({"type": "reply", "messages": out})
    elif scen.get("chatty"):
        send({"type": "reply", "messages": [{"role": "user", "content": "anything else?"}]})
    else:
        send({"type": "end", "reason": "the customer is done"})
with open(os.path.join(os.environ["EVALRIG_DRIVER_OUT"], "world.json"), "w") as fh:
    json.dump(world, fh)
"""

# The agent side: a helper every agent below starts with.
_AGENT_HEAD = """\
import json, os, sys

def send(message, usage=None):
    frame = {"type": "message", "message": message}
    if usage is not None:
        frame["usage"] = usage
    sys.stdout.write(json.dumps(frame) + "\\n")
    sys.stdout.flush()

def deposit(n, call_id="c1"):
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function",
         "function": {"name": "deposit", "arguments": json.dumps({"amount": n})}}]}
"""

AGENTS = {
    # deposits 5, then says done; spends 0.01 a turn
    "gold": """
assert os.environ["EVALRIG_EPISODE"] == "1"
for line in sys.stdin:
    f = json.loads(line)
    if f["type"] == "end":
        break
    if f["type"] == "session":
        send(deposit(5), {"cost_usd": 0.01, "input_tokens": 10, "output_tokens": 2})
    else:
        send({"role": "assistant", "content": "done"}, {"cost_usd": 0.01, "input_tokens": 10, "output_tokens": 2})
""",
    "noop": "\n",
    # the gold agent, slow in the middle of the episode (a moment to kill the rig in)
    "slow": """
import time
for line in sys.stdin:
    f = json.loads(line)
    if f["type"] == "end":
        break
    if f["type"] == "session":
        send(deposit(5))
    else:
        time.sleep(4)
        send({"role": "assistant", "content": "done"})
""",
    "garbage": """
sys.stdin.readline()
sys.stdout.write("I am not a frame\\n"); sys.stdout.flush()
sys.stdin.read()
""",
    # a well-formed message 200 containers deep in a key of its own: the transcript line that
    # wraps it would be deeper than the JSON writer goes (a red team crashed the relay so)
    "deep": """
sys.stdin.readline()
deep = 1
for _ in range(200):
    deep = [deep]
send({"role": "assistant", "content": "hi", "x": deep})
sys.stdin.read()
""",
    "hang": """
import time
sys.stdin.readline()
time.sleep(60)
""",
    # never reads its stdin at all
    "deaf": """
import time
time.sleep(60)
""",
    "flood": """
sys.stdin.readline()
for i in range(100000):
    send({"role": "assistant", "content": "spam %d" % i})
""",
    "exit_mid": """
sys.stdin.readline()
send(deposit(5))
sys.stdin.readline()
sys.exit(7)
""",
    "exit_mid_ok": """
sys.stdin.readline()
send(deposit(5))
sys.stdin.readline()
""",
    # calls a tool that does not exist every turn
    "bad_tool": """
for line in sys.stdin:
    f = json.loads(line)
    if f["type"] == "end":
        break
    send({"role": "assistant", "content": None, "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "withdraw_all", "arguments": "{}"}}]})
""",
    # deposits 1 forever
    "loop": """
for line in sys.stdin:
    f = json.loads(line)
    if f["type"] == "end":
        break
    send(deposit(1), {"cost_usd": 0.5})
""",
    "after_end": """
for line in sys.stdin:
    f = json.loads(line)
    if f["type"] == "end":
        send({"role": "assistant", "content": "one more thing"})
        break
    if f["type"] == "session":
        send(deposit(5))
    else:
        send({"role": "assistant", "content": "done"})
""",
    "big_line": """
sys.stdin.readline()
send({"role": "assistant", "content": "x" * 5000})
sys.stdin.read()
""",
    # an assistant message with neither content nor tool calls: tau2's own loop rejects it
    "empty": """
sys.stdin.readline()
send({"role": "assistant", "content": "  \\n", "tool_calls": []})
sys.stdin.read()
""",
    "empty_null": """
sys.stdin.readline()
send({"role": "assistant", "content": None})
sys.stdin.read()
""",
    "user_role": """
sys.stdin.readline()
send({"role": "user", "content": "I am the customer now"})
sys.stdin.read()
""",
}


def agent_source(name: str) -> str:
    return _AGENT_HEAD + textwrap.dedent(AGENTS[name])


def episode_checkpoint(dir: Path, agent: str, name: str = "ep") -> Path:
    return make_checkpoint(dir, agent_source(agent), name=name)


def add_episode_task(tasks: Path, task_id: str, *, suite: str = "fixed", scenario: dict | None = None,
                     bounds: str = "", verifier: str | None = None, timeout_s: float = 30,
                     verifier_files: dict[str, str] | None = None) -> Path:
    """An episode task over DRIVER: `[episode]` with `bounds` added, an exact verifier on
    "done" unless `verifier` gives another."""
    table = {"driver": '["python3", "driver.py"]', "turn_timeout_s": "10", "driver_timeout_s": "10"}
    for line in bounds.splitlines():  # `key = value` lines, overriding the defaults above
        if line.strip():
            key, _, value = line.partition("=")
            table[key.strip()] = value.strip()
    episode = "[episode]\n" + "".join(f"{k} = {v}\n" for k, v in table.items())
    d = add_task(tasks, suite, task_id, expected="done", extra=episode, verifier=verifier,
                 verifier_files=verifier_files)
    toml = (d / "task.toml").read_text().replace("timeout_s = 30\n", f"timeout_s = {timeout_s}\n", 1)
    (d / "task.toml").write_text(toml)
    (d / "driver").mkdir()
    (d / "driver" / "driver.py").write_text(DRIVER)
    (d / "driver" / "scenario.json").write_text(json.dumps(scenario or {}))
    return d


def transcript(bundle: Path, attempt_id: str) -> list[dict]:
    data = (bundle / "attempts" / attempt_id / "transcript.jsonl").read_bytes()
    return [json.loads(line) for line in data.splitlines()]


# A hostile agent: says the canary and a secret to the driver, in its messages.
AGENTS["leaky"] = """
for line in sys.stdin:
    f = json.loads(line)
    if f["type"] == "end":
        break
    said = os.environ["RELEASE_SIGNING_TOKEN"] + " " + os.environ.get("API_KEY", "")
    send({"role": "assistant", "content": said})
"""

# Agents whose output ends in the middle of a line (no newline after their last words).
AGENTS["unterminated"] = """
sys.stdin.readline()
sys.stdout.write(json.dumps({"type": "message", "message": {"role": "assistant", "content": "done"}}))
sys.stdout.flush()
"""
AGENTS["unterminated_after_end"] = """
for line in sys.stdin:
    f = json.loads(line)
    if f["type"] == "end":
        sys.stdout.write("bye"); sys.stdout.flush()
        break
    if f["type"] == "session":
        send(deposit(5))
    else:
        send({"role": "assistant", "content": "done"})
"""
