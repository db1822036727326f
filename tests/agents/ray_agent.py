"""The Ray tests' agent. What it does comes from its task's prompt (lines, each optional):

  answer: parity     write "even" or "odd" (the parity of EVALRIG_SEED) to out/answer.txt
  hang: REP:N        sleep 120 s first when this is attempt N of repetition REP
  env: dump          write its whole environment to out/env.json
  probe: HOST:PORT   try to connect there; write "connected" or the error's name to out/probe.txt

With --estimate it prints an estimate whose p_success is the parity of the seed (0.25 odd,
0.75 even) instead, so a test can tell that the estimate ran on the right trial.
"""

import errno
import json
import os
import socket
import sys
import time


def attempt_of(attempt_id: str) -> tuple[int, int]:
    """(rep, n) from `<task>-<rep>-<n>-<hex>` (a task id may itself contain dashes)."""
    parts = attempt_id.split("-")
    return int(parts[-3]), int(parts[-2])


def probe(target: str) -> str:
    host, port = target.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return "connected"
    except OSError as e:
        return errno.errorcode.get(e.errno or 0, type(e).__name__)


def main() -> int:
    env = os.environ
    if "--estimate" in sys.argv[1:]:
        odd = int(env["EVALRIG_SEED"]) % 2
        print(json.dumps({"p_success": 0.25 if odd else 0.75, "time_s": [0, 5]}))
        return 0
    with open(env["EVALRIG_PROMPT"]) as f:
        lines = dict(line.split(": ", 1) for line in f.read().splitlines() if ": " in line)
    out = env["EVALRIG_OUT"]
    if "hang" in lines:
        rep, n = (int(x) for x in lines["hang"].split(":"))
        if attempt_of(env["EVALRIG_ATTEMPT_ID"]) == (rep, n):
            time.sleep(120)
    if lines.get("env") == "dump":
        with open(os.path.join(out, "env.json"), "w") as f:
            json.dump(dict(env), f)
    if "probe" in lines:
        with open(os.path.join(out, "probe.txt"), "w") as f:
            f.write(probe(lines["probe"]) + "\n")
    seed = int(env["EVALRIG_SEED"])
    answer = lines.get("answer", "")
    if answer == "parity":
        answer = "odd" if seed % 2 else "even"
    with open(os.path.join(out, "answer.txt"), "w") as f:
        f.write(answer + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
