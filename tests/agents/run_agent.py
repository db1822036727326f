"""A quick test agent for the runner's tests. What it does comes from its task's prompt.

Lines of prompt.md, each optional:
  sleep: S       sleep S seconds first
  answer: parity write "even" or "odd" (the parity of EVALRIG_SEED) to out/answer.txt
  answer: TEXT   write TEXT to out/answer.txt
  exit: N        exit N after answering
It always writes EVALRIG_SEED to out/seed.txt, so tests can see the seed it was given.
"""

import os
import sys
import time


def main() -> int:
    env = os.environ
    with open(env["EVALRIG_PROMPT"]) as f:
        lines = dict(line.split(": ", 1) for line in f.read().splitlines() if ": " in line)
    if "sleep" in lines:
        time.sleep(float(lines["sleep"]))
    out = env["EVALRIG_OUT"]
    seed = int(env["EVALRIG_SEED"])
    with open(os.path.join(out, "seed.txt"), "w") as f:
        f.write(f"{seed}\n")
    answer = lines.get("answer", "")
    if answer == "parity":
        answer = "odd" if seed % 2 else "even"
    with open(os.path.join(out, "answer.txt"), "w") as f:
        f.write(answer + "\n")
    return int(lines.get("exit", "0"))


if __name__ == "__main__":
    sys.exit(main())
