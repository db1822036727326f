"""A test agent for the release-train scenarios of the gate. Deterministic given the seed.

The prompt says `answer: TEXT` (the right answer) and `p: P` (the champion's chance of
getting it right). The checkpoint's pinned env says how this build differs:
  MODE=same        passes when u < P, u a uniform drawn from the seed and the task
  MODE=better      passes fresh tasks when u < P + 0.5
  MODE=worse       passes fresh tasks when u < P - 0.5
  MODE=fixed-fail  fails the fixed tasks fixed-0 and fixed-1, otherwise as `same`
  MODE=leak        as `same`, and prints the release token it finds in its environment
  COST=0.03        the cost it reports in out/usage.json
Since champion and candidate get the same seed on the same trial, two `same` builds give
identical outcomes.
"""

import hashlib
import json
import os
import sys


def main() -> int:
    env = os.environ
    with open(env["EVALRIG_PROMPT"]) as f:
        lines = dict(line.split(": ", 1) for line in f.read().splitlines() if ": " in line)
    task, mode = env["EVALRIG_TASK_ID"], env.get("MODE", "same")
    digest = hashlib.sha256(f"{env['EVALRIG_SEED']}:{task}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    p = float(lines.get("p", "1"))
    fresh = task.startswith("fresh-")
    if mode == "better" and fresh:
        p += 0.5
    elif mode == "worse" and fresh:
        p -= 0.5
    ok = u < p and not (mode == "fixed-fail" and task in ("fixed-0", "fixed-1"))
    if mode == "leak":
        print(env.get("RELEASE_SIGNING_TOKEN", "no token"))
    out = env["EVALRIG_OUT"]
    with open(os.path.join(out, "answer.txt"), "w") as f:
        f.write((lines["answer"] if ok else "wrong") + "\n")
    with open(os.path.join(out, "usage.json"), "w") as f:
        json.dump({"cost_usd": float(env.get("COST", "0.03"))}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
