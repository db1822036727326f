"""Faults never help the candidate (issue 20, findings 5 and 6; docs/security.md), through
`eval.sh` as a release script calls it.

- An agent that re-rolls an episode by crashing its driver (a well-formed `lookup` with
  `{"item": ["x"]}`): the bundled shop driver answers it with an error; a driver that is not
  total crashes, and that fault, after the agent's first frame, is final: one attempt per
  trial, never re-rolled, counted as a failure of the candidate by `compare`.
- An agent that chooses a verifier fault (a report with `passed = 2 x total`, so reward.json
  says 2.0): the run exits 5, `--resume` re-verifies the stored evidence and never starts
  the agent again, and the candidate is not promoted.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from redteam import (
    ROOT,
    add_task,
    bwrap_works,
    eval_sh,
    make_checkpoint,
    results,
    utc_now,
    write_policy,
)

SHOP = ROOT / "tasks" / "fixed"
REPEAT = 2
FRESH = 6  # the small policy's min_tasks

# Speaks the episode frames; `reroll` says whether it crashes the driver on an attempt.
SHOP_AGENT = """\
import json, os, sys

attempt = int(os.environ["EVALRIG_ATTEMPT_ID"].rsplit("-", 2)[-2])


def say(message):
    sys.stdout.write(json.dumps({"type": "message", "message": message}) + "\\n")
    sys.stdout.flush()


def hear():
    line = sys.stdin.readline()
    return json.loads(line) if line else {"type": "end"}


def call(name, args):
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}


hear()  # the session
if REROLL and attempt == 1:
    # a coin that always lands tails first: crash the driver, hoping for a new attempt
    say(call("lookup", {"item": ["x"]}))
    if hear()["type"] == "turn":
        say({"role": "assistant", "content": "Sorry, I could not find it."})
        hear()
    sys.exit(0)
say(call("order", {"item": "lamp", "qty": 2}))
if hear()["type"] == "turn":
    say({"role": "assistant", "content": "Your order of 2 lamp is placed."})
    hear()
"""

# A driver of the shop's kind that is not total: a list where the item goes crashes it
# (`unhashable type: 'list'`), as the bundled one did before issue 20.
FRAGILE_DRIVER = """\
import json, os, sys

CATALOG = {"lamp": 30, "chair": 45}
TOOLS = [{"type": "function", "function": {"name": n, "description": n, "parameters": {"type": "object"}}}
         for n in ("lookup", "order")]


def send(frame):
    sys.stdout.write(json.dumps(frame) + "\\n")
    sys.stdout.flush()


sys.stdin.readline()
send({"type": "session", "tools": TOOLS,
      "messages": [{"role": "user", "content": "I would like to order 2 lamp, please."}]})
orders = []
for line in sys.stdin:
    frame = json.loads(line)
    if frame["type"] == "finish":
        break
    calls = frame["message"].get("tool_calls") or []
    if not calls:
        send({"type": "end", "reason": "the customer hung up"})
        continue
    replies = []
    for c in calls:
        args = json.loads(c["function"]["arguments"])
        item = args["item"]
        if item not in CATALOG:
            replies.append({"role": "tool", "tool_call_id": c["id"], "content": "no such item", "error": True})
        elif c["function"]["name"] == "order":
            orders.append({"item": item, "qty": args["qty"]})
            replies.append({"role": "tool", "tool_call_id": c["id"], "content": "placed"})
        else:
            replies.append({"role": "tool", "tool_call_id": c["id"], "content": str(CATALOG[item])})
    send({"type": "reply", "messages": replies})
with open(os.path.join(os.environ["EVALRIG_DRIVER_OUT"], "world.json"), "w") as f:
    json.dump({"orders": orders}, f)
"""

# A verifier that trusts the agent's own count: reward = passed / total.
COUNTING_VERIFIER = """\
import json, os, sys
report = json.load(open(os.path.join(os.environ["EVALRIG_EVIDENCE"], "out", "report.json")))
reward = report["passed"] / report["total"]
with open(os.path.join(os.environ["EVALRIG_VERDICT"], "reward.json"), "w") as f:
    json.dump({"reward": reward}, f)
"""
REPORTING_AGENT = """\
import json, os
with open(os.path.join(os.environ["EVALRIG_OUT"], "report.json"), "w") as f:
    json.dump({"passed": PASSED, "total": 3}, f)
"""


def level() -> str:
    return "bwrap" if bwrap_works() else "process"


def shop_agent(dir: Path, reroll: bool) -> Path:
    return make_checkpoint(dir, SHOP_AGENT.replace("REROLL", str(reroll)), name=dir.name)


def shop_task(tasks: Path, suite: str, task_id: str, source: Path = SHOP / "shop-order",
              driver: str | None = None) -> None:
    d = tasks / suite / task_id
    shutil.copytree(source, d)
    if suite == "fresh":
        toml = d / "task.toml"
        toml.write_text(f"created_at = {utc_now()}\n" + toml.read_text())
    if driver is not None:
        (d / "driver" / "driver.py").write_text(driver)


def run(home: Path, ck: Path, tasks: Path, out: Path, *more: str | Path) -> object:
    return eval_sh(home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", out, "--repeat", str(REPEAT),
                   "--sandbox", level(), "--jobs", "2", *more)


def starts(bundle: Path) -> Counter[str]:
    """Attempts started per trial (attempts.jsonl's start lines): each one a start of the agent."""
    lines = [json.loads(x) for x in (bundle / "attempts.jsonl").read_text().splitlines()]
    return Counter(x["trial_id"] for x in lines if x["event"] == "start")


def compare_and_gate(home: Path, root: Path, champion: Path, candidate: Path, policy: Path) -> dict:
    cmp = eval_sh(home, "compare", champion, candidate, "--out", root / "cmp")
    assert cmp.code == 0, cmp
    gate = eval_sh(home, "gate", root / "cmp", "--policy", policy, "--json")
    assert gate.code in (0, 1, 3), gate
    return json.loads((root / "cmp" / "comparison.json").read_text())


def test_the_bundled_shop_driver_answers_a_crashing_lookup_so_nothing_is_re_rolled(tmp_path: Path) -> None:
    """Issue 20 finding 5, the bundled driver: `{"item": ["x"]}` gets an error tool message, the
    episode goes on, and each trial has one attempt, scored (before: driver_fault, a new
    attempt, and the re-roll passed)."""
    home = tmp_path / "home"
    ck = shop_agent(tmp_path / "reroller", reroll=True)
    assert eval_sh(home, "seal", ck).code == 0
    tasks = tmp_path / "tasks"
    for name in ("shop-order", "shop-hang-up", "shop-chatty", "shop-unknown-item", "shop-budget"):
        shop_task(tasks, "fixed", name, SHOP / name)
    out = tmp_path / "out"
    r = run(home, ck, tasks, out, "--max-retries", "3")
    assert r.code == 0, r  # type: ignore[attr-defined]
    assert set(starts(out).values()) == {1} and len(starts(out)) == 5 * REPEAT
    got = results(out)
    assert len(got) == 5 * REPEAT
    assert all(x["status"] in ("passed", "failed") and x["termination"] != "driver_fault" for x in got), got
    # nothing was ordered: only the task whose customer wants nothing the shop has passes
    assert {x["status"] for x in got if x["task_id"] != "shop-unknown-item"} == {"failed"}
    lines = [json.loads(x) for x in (out / "attempts" / str(got[0]["attempt_id"]) / "transcript.jsonl")
             .read_text().splitlines()]
    reply = next(x["frame"] for x in lines if x["from"] == "driver" and x["frame"]["type"] == "reply")
    assert reply["messages"][0]["error"] is True


def test_an_agent_that_crashes_its_driver_gets_no_new_attempt_and_counts_worst(tmp_path: Path) -> None:
    """Issue 20 finding 5, a driver that is not total: the crash follows the agent's first
    frame, so the attempt is a final infra_error; one attempt per trial (before: a new attempt
    that the re-roller passed), `run` exits 5 naming the trials, `compare` counts every one as
    a failure of the candidate, and the candidate is not promoted."""
    home = tmp_path / "home"
    champion = shop_agent(tmp_path / "honest", reroll=False)
    candidate = shop_agent(tmp_path / "reroller", reroll=True)
    for ck in (champion, candidate):
        assert eval_sh(home, "seal", ck).code == 0
    tasks = tmp_path / "tasks"
    for i in range(FRESH):
        shop_task(tasks, "fresh", f"shop-{i}", driver=FRAGILE_DRIVER)
    policy = write_policy(tmp_path / "policies")
    a, b = tmp_path / "runs" / "champion", tmp_path / "runs" / "candidate"
    assert run(home, champion, tasks, a, "--policy", policy).code == 0  # type: ignore[attr-defined]
    r = run(home, candidate, tasks, b, "--policy", policy)  # --max-retries 2: room for re-rolls
    assert r.code == 5, r  # type: ignore[attr-defined]
    trials = FRESH * REPEAT
    assert starts(b) == Counter({f"shop-{i}:{rep}": 1 for i in range(FRESH) for rep in range(REPEAT)})
    got = results(b)
    assert len(got) == trials
    assert {(x["status"], x["termination"], x["fault"], x["final"]) for x in got} == {
        ("infra_error", "driver_fault", "agent", True)}
    assert f"complete, but {trials} trials are unscored for good" in r.stderr  # type: ignore[attr-defined]
    assert "shop-0:0" in r.stderr  # type: ignore[attr-defined]
    assert json.loads((b / "manifest.json").read_text())["status"] == "complete"

    c = compare_and_gate(home, tmp_path, a, b, policy)
    fresh = c["suites"]["fresh"]
    assert fresh["unscored_counted_worst"] == {"champion": 0, "candidate": trials}
    assert fresh["candidate"]["pass_rate"] == 0 and fresh["champion"]["pass_rate"] == 1
    assert [r["candidate_n"] for r in fresh["per_task"]] == [REPEAT] * FRESH
    assert len(c["facts"]["candidate"]["unscored_counted_worst"]) == trials
    decision = json.loads((tmp_path / "cmp" / "decisions" / "redteam-v1.json").read_text())
    assert decision["verdict"] not in ("promote", "promote-maintenance")
    verdict_md = (tmp_path / "cmp" / "decisions" / "redteam-v1.md").read_text()
    assert "Unscored trials, counted against the candidate" in verdict_md and "`shop-0:0`" in verdict_md


def test_a_chosen_verifier_fault_is_re_verified_on_resume_never_the_agent_and_is_not_promoted(
        tmp_path: Path) -> None:
    """Issue 20 finding 6: a report of passed = 2 x total makes reward.json 2.0, a verifier
    fault. The run exits 5; `--resume` re-verifies the stored evidence (the verifier runs
    again, the agent does not: no new start in attempts.jsonl; before, a new attempt started),
    the fault stays, final; a second resume changes nothing; the gate does not promote."""
    home = tmp_path / "home"
    champion = make_checkpoint(tmp_path / "honest", REPORTING_AGENT.replace("PASSED", "3"), name="honest")
    candidate = make_checkpoint(tmp_path / "forger", REPORTING_AGENT.replace("PASSED", "6"), name="forger")
    for ck in (champion, candidate):
        assert eval_sh(home, "seal", ck).code == 0
    tasks = tmp_path / "tasks"
    for i in range(FRESH):
        add_task(tasks, "fresh", f"count-{i}", verifier='kind = "command"\ncommand = ["python3", "check.py"]',
                 verifier_files={"check.py": COUNTING_VERIFIER})
    policy = write_policy(tmp_path / "policies")
    a, b = tmp_path / "runs" / "champion", tmp_path / "runs" / "candidate"
    assert run(home, champion, tasks, a, "--policy", policy).code == 0  # type: ignore[attr-defined]
    first = run(home, candidate, tasks, b, "--policy", policy)
    assert first.code == 5, first  # type: ignore[attr-defined]
    trials = FRESH * REPEAT
    once = Counter({f"count-{i}:{rep}": 1 for i in range(FRESH) for rep in range(REPEAT)})
    assert starts(b) == once
    got = results(b)
    assert {x["status"] for x in got} == {"infra_error"}
    assert all("reward: expected a number in [0, 1], got 2.0" in str(x["error"]) for x in got)

    resumed = eval_sh(home, "run", "--out", b, "--resume")
    assert resumed.code == 5, resumed
    assert starts(b) == once  # the agent never started again (before: a new attempt per trial)
    assert {(x["status"], x.get("fault"), x.get("final")) for x in got} == {("infra_error", "verifier", None)}
    again = results(b)[trials:]
    assert len(again) == trials and {x["attempt_id"] for x in again} == {x["attempt_id"] for x in got}
    assert {(x["status"], x["fault"], x["final"]) for x in again} == {("infra_error", "verifier", True)}
    assert all(x["verifier_runs"] == 2 * 3 for x in again)  # 1 + --max-retries (2), twice
    assert f"complete, but {trials} trials are unscored for good" in resumed.stderr
    assert json.loads((b / "manifest.json").read_text())["status"] == "complete"
    before = (b / "results.jsonl").read_bytes()
    still = eval_sh(home, "run", "--out", b, "--resume")
    assert still.code == 5 and (b / "results.jsonl").read_bytes() == before and starts(b) == once
    verified = eval_sh(home, "verify", b)
    assert verified.code == 0, verified

    c = compare_and_gate(home, tmp_path, a, b, policy)
    assert c["suites"]["fresh"]["unscored_counted_worst"] == {"champion": 0, "candidate": trials}
    decision = json.loads((tmp_path / "cmp" / "decisions" / "redteam-v1.json").read_text())
    assert decision["verdict"] not in ("promote", "promote-maintenance")


@pytest.mark.parametrize("side", ["champion", "candidate"])
def test_an_unscored_trial_never_moves_the_verdict_toward_the_candidate(tmp_path: Path, side: str) -> None:
    """docs/statistics.md: whichever side faults, the unscored trial is a failure on the
    candidate's side and a pass on the champion's."""
    home = tmp_path / "home"
    honest = make_checkpoint(tmp_path / "honest", REPORTING_AGENT.replace("PASSED", "3"), name="honest")
    forger = make_checkpoint(tmp_path / "forger", REPORTING_AGENT.replace("PASSED", "6"), name="forger")
    for ck in (honest, forger):
        assert eval_sh(home, "seal", ck).code == 0
    tasks = tmp_path / "tasks"
    for i in range(FRESH):
        add_task(tasks, "fresh", f"count-{i}", verifier='kind = "command"\ncommand = ["python3", "check.py"]',
                 verifier_files={"check.py": COUNTING_VERIFIER})
    policy = write_policy(tmp_path / "policies")
    champion, candidate = (forger, honest) if side == "champion" else (honest, forger)
    a, b = tmp_path / "runs" / "champion", tmp_path / "runs" / "candidate"
    for ck, out in ((champion, a), (candidate, b)):
        run(home, ck, tasks, out, "--policy", policy, "--max-retries", "0")
        eval_sh(home, "run", "--out", out, "--resume")  # re-verified once: final
    c = compare_and_gate(home, tmp_path, a, b, policy)
    fresh = c["suites"]["fresh"]
    # every trial of the faulting side counted worst for the candidate: the two sides tie at 1.0
    # (champion faulted) or the candidate scores 0 (candidate faulted); never a candidate win
    assert fresh["unscored_counted_worst"][side] == FRESH * REPEAT
    assert fresh["champion"]["pass_rate"] == 1
    assert fresh["candidate"]["pass_rate"] == (0 if side == "candidate" else 1)
    assert fresh["better"] == 0
