"""A test command verifier for tests/test_trial.py; argv[1] picks the behaviour.

exit: exit 0 when the stored answer is "ok", else 1 (no reward.json).
reward: write reward.json with reward 0.5 and checks {"format": true, "value": answer == "ok"}.
full: reward.json reward 1 when the answer is "ok" (else 0) and a usage.json of the judge.
malformed: write a reward.json that is not JSON.
crash: exit 2.   crash-once STATE: exit 2 the first time (STATE is a file it creates), then as `exit`.
ls: list $EVALRIG_EVIDENCE into reward.json checks (every path → true), reward 1.
write-evidence: try to write into $EVALRIG_EVIDENCE; pass only when that is refused.
hang: sleep past any limit.
env: pass when the environment is exactly the documented set.
"""

import json
import os
import sys


def answer() -> str:
    try:
        with open(os.path.join(os.environ["EVALRIG_EVIDENCE"], "out", "answer.txt")) as f:
            return f.read().strip()
    except FileNotFoundError:
        return ""


def reward(doc: dict) -> None:
    with open(os.path.join(os.environ["EVALRIG_VERDICT"], "reward.json"), "w") as f:
        json.dump(doc, f)


def main() -> int:
    mode = sys.argv[1]
    print("verifier-ran", mode)
    if mode == "crash-once":
        state = sys.argv[2]
        if not os.path.exists(state):
            open(state, "w").close()
            return 2
        mode = "exit"
    if mode == "exit":
        return 0 if answer() == "ok" else 1
    if mode == "reward":
        reward({"reward": 0.5, "checks": {"format": True, "value": answer() == "ok"}})
        return 0
    if mode == "full":
        ok = answer() == "ok"
        reward({"reward": 1 if ok else 0})
        with open(os.path.join(os.environ["EVALRIG_VERDICT"], "usage.json"), "w") as f:
            json.dump({"cost_usd": 0.25, "input_tokens": 10}, f)
        return 0
    if mode == "malformed":
        with open(os.path.join(os.environ["EVALRIG_VERDICT"], "reward.json"), "w") as f:
            f.write("{not json")
        return 0
    if mode == "crash":
        return 2
    if mode == "hang":
        import time

        time.sleep(60)
    if mode == "env":
        want = {"PATH", "HOME", "TMPDIR", "LANG", "EVALRIG_EVIDENCE", "EVALRIG_VERDICT",
                "EVALRIG_ATTEMPT_ID"}
        print(sorted(os.environ))
        return 0 if set(os.environ) == want and os.getcwd() == os.path.dirname(os.path.abspath(__file__)) else 1
    if mode == "ls":
        root = os.environ["EVALRIG_EVIDENCE"]
        seen = {}
        for d, _dirs, files in os.walk(root):
            for n in files:
                seen[os.path.relpath(os.path.join(d, n), root)] = True
        reward({"reward": 1, "checks": seen})
        return 0
    if mode == "write-evidence":
        try:
            open(os.path.join(os.environ["EVALRIG_EVIDENCE"], "forged.txt"), "w").close()
        except OSError:
            return 0
        return 1
    return 3


if __name__ == "__main__":
    sys.exit(main())
