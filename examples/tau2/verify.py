"""The verifier of one tau2 task (docs/tau2.md): grades the driver's record of the episode
with tau2's own evaluators, so a verdict means what tau2's reward means.

Reads $EVALRIG_EVIDENCE/driver/trajectory.json and db.json (what the driver left) and
`task.json` beside this file (the gold actions, communicate info, NL assertions), then:
- premature end (any termination but the customer ending the call or the agent leaving):
  reward 0, as tau2 gives a simulation that did not stop by the agent or the user;
- database: tau2's EnvironmentEvaluator replays the recorded tool calls on a fresh world
  (checking each recorded result) and compares its hash with the gold actions' world;
  the driver's own final hash must agree with the replay, or the verifier faults (exit 2);
- communicated information: tau2's CommunicateEvaluator;
- actions: tau2's ActionEvaluator (reported; counted only when the task's basis says so);
- NL assertions (only when the basis has NL_ASSERTION): tau2's NLAssertionsEvaluator, with
  its model call sent to the OpenAI-compatible judge named by the task's verifier secrets;
  the judge's spend goes to $EVALRIG_VERDICT/usage.json.
Writes reward.json ({reward, checks, passed}) and prints the breakdown.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import types
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FINISHED = {"driver_end", "agent_exit"}  # tau2's USER_STOP and AGENT_STOP
FAULT = 2  # the rig's "verifier fault": neither a pass (0) nor a fail (1)


class Fault(Exception):
    """The evidence cannot be graded (a driver record that contradicts itself)."""


def quiet_tau2() -> None:
    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, level="ERROR")


class Judge:
    """tau2's NL-assertion evaluator calls tau2.utils.llm_utils.generate (litellm); this
    stands in for that one function and sends the same messages to the judge endpoint."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.model = config["judge_model"]
        self.base_url = os.environ[config["judge_secrets"]["base_url"]].rstrip("/")
        self.api_key = os.environ.get(config["judge_secrets"]["api_key"], "")
        self.usage: dict[str, Any] = {"cost_usd": None, "input_tokens": 0, "output_tokens": 0}

    def generate(self, model: str, messages: list[Any], **_: Any) -> Any:
        from tau2.data_model.message import AssistantMessage

        body = json.dumps({"model": self.model, "temperature": 0,
                           "messages": [{"role": m.role, "content": m.content} for m in messages]})
        req = urllib.request.Request(self.base_url + "/chat/completions", data=body.encode(),
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {self.api_key}"})
        with urllib.request.urlopen(req, timeout=50) as resp:
            doc = json.loads(resp.read())
        usage = doc.get("usage") or {}
        self.usage["input_tokens"] += int(usage.get("prompt_tokens") or 0)
        self.usage["output_tokens"] += int(usage.get("completion_tokens") or 0)
        if isinstance(usage.get("cost"), (int, float)):
            self.usage["cost_usd"] = (self.usage["cost_usd"] or 0.0) + usage["cost"]
        return AssistantMessage(role="assistant", content=doc["choices"][0]["message"].get("content"))

    def install(self) -> None:
        stub = types.ModuleType("tau2.utils.llm_utils")
        stub.generate = self.generate  # type: ignore[attr-defined]
        sys.modules["tau2.utils.llm_utils"] = stub


def messages_of(doc: dict[str, Any]) -> list[Any]:
    from tau2.data_model.message import AssistantMessage, ToolCall, ToolMessage, UserMessage

    out: list[Any] = []
    for m in doc["messages"]:
        if m["role"] == "assistant":
            calls = [ToolCall(**c) for c in m["tool_calls"]] if m.get("tool_calls") else None
            out.append(AssistantMessage(role="assistant", content=m.get("content"), tool_calls=calls))
        elif m["role"] == "user":
            out.append(UserMessage(role="user", content=m.get("content")))
        else:
            out.append(ToolMessage(role="tool", id=m["id"], content=m.get("content"),
                                   requestor=m.get("requestor", "assistant"), error=m.get("error", False)))
    return out


def grade(task_doc: dict[str, Any], config: dict[str, Any], evidence: Path,
          verdict_dir: Path) -> dict[str, Any]:
    quiet_tau2()
    judge = Judge(config) if config.get("judge_model") else None
    if judge is not None:
        judge.install()
    from tau2.data_model.tasks import RewardType, Task
    from tau2.evaluator.evaluator_action import ActionEvaluator
    from tau2.evaluator.evaluator_communicate import CommunicateEvaluator
    from tau2.evaluator.evaluator_env import EnvironmentEvaluator

    task = Task.model_validate(task_doc)
    traj = json.loads((evidence / "driver" / "trajectory.json").read_text())
    db = json.loads((evidence / "driver" / "db.json").read_text())
    if traj["termination"] not in FINISHED:
        return {"reward": 0.0, "passed": False, "checks": {"finished": False},
                "note": f"the episode ended early ({traj['termination']}): tau2 gives 0"}
    messages = messages_of(traj)
    env_mod = importlib.import_module(f"tau2.domains.{config['domain']}.environment")
    built: list[Any] = []

    def environment(**kwargs: Any) -> Any:
        """tau2's constructor, keeping what it builds: the evaluator's first world is the
        replay of the recorded calls (its second the gold one)."""
        built.append(env_mod.get_environment(**kwargs))
        return built[-1]

    db_info = EnvironmentEvaluator.calculate_reward(environment, task, messages)
    if not built:  # the evaluator had nothing to compare: replay here to check the record
        environment().set_state(initialization_data=None, initialization_actions=None,
                                message_history=messages)
    if built[0].get_db_hash() != db["db_hash"]:
        raise Fault(f"the driver's final database {db['db_hash']} is not the replay's "
                    f"{built[0].get_db_hash()}")
    basis = set(task.evaluation_criteria.reward_basis) if task.evaluation_criteria else set()
    parts = {
        "db": db_info,
        "communicate": CommunicateEvaluator.calculate_reward(task, messages),
        "actions": ActionEvaluator.calculate_reward(task, messages),
    }
    counted = {"db": bool(basis & {RewardType.DB, RewardType.ENV_ASSERTION}),
               "communicate": RewardType.COMMUNICATE in basis,
               "actions": RewardType.ACTION in basis}
    if RewardType.NL_ASSERTION in basis:
        from tau2.evaluator.evaluator_nl_assertions import NLAssertionsEvaluator

        parts["nl_assertions"] = NLAssertionsEvaluator.calculate_reward(task, messages)
        counted["nl_assertions"] = True
    reward = 1.0
    for name, info in parts.items():
        if counted[name]:
            reward *= info.reward
    if judge is not None:
        (verdict_dir / "usage.json").write_text(json.dumps(judge.usage))
    return {"reward": reward, "passed": reward == 1.0,
            "checks": {name: info.reward == 1.0 for name, info in parts.items() if counted[name]},
            "breakdown": {name: {"reward": info.reward, "counted": counted[name],
                                 "detail": info.model_dump(mode="json", exclude_none=True)}
                          for name, info in parts.items()}}


def main() -> int:
    config = json.loads((HERE / "config.json").read_text())
    task_doc = json.loads((HERE / "task.json").read_text())
    verdict_dir = Path(os.environ["EVALRIG_VERDICT"])
    try:
        got = grade(task_doc, config, Path(os.environ["EVALRIG_EVIDENCE"]), verdict_dir)
    except Exception as e:  # a crash must never read as the agent's failure (exit 1)
        print(f"verify: cannot grade: {type(e).__name__}: {e}", file=sys.stderr)
        return FAULT
    (verdict_dir / "reward.json").write_text(json.dumps(
        {k: got[k] for k in ("reward", "checks", "passed")}))
    print(json.dumps(got, indent=1, default=str))
    return 0 if got["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
