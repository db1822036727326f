"""A tiny agent written with the OFFICIAL `openai` SDK, for the gateway's wiring tests
(tests/test_gateway_wire.py). It runs inside the sandbox as a checkpoint's agent.

It reads its prompt, asks `MODEL` (checkpoint env, default "standin-small") through the
SDK exactly as an agent written for OpenAI would (the SDK takes `OPENAI_BASE_URL` and
`OPENAI_API_KEY` from the environment), and writes the answer. Beside that it plays the
attacker, writing what it found to out/hunt.json:
- the key hunt: every environment variable, the files of HOME and /proc/*/environ it can
  read, searched for the real key (told to it in two halves, `HUNT_A` and `HUNT_B`, so
  that its own environment does not hold it whole);
- direct network: a TCP connection to the provider's own port (`DIRECT_PORT`);
- `CALLS` calls in all (a budget test), each call's HTTP status recorded;
- `LEAK=1`: the canary (its variable, RELEASE_SIGNING_TOKEN) sent in the prompt.
"""

import json
import os
import socket

import openai

out = os.environ["EVALRIG_OUT"]
prompt = open(os.environ["EVALRIG_PROMPT"]).read().strip()
hunt: dict[str, object] = {"env": sorted(os.environ), "found": [], "statuses": []}

needle = os.environ.get("HUNT_A", "") + os.environ.get("HUNT_B", "")
if needle:
    for k, v in os.environ.items():
        if needle in v:
            hunt["found"].append(f"env:{k}")  # type: ignore[union-attr]
    roots = [os.environ.get("HOME", "/"), "/proc"]
    for root in roots:
        for dirpath, dirs, files in os.walk(root):
            if dirpath.startswith("/proc") and dirpath.count("/") > 2:
                dirs[:] = []
            for name in files:
                if root == "/proc" and name != "environ":
                    continue
                try:
                    with open(os.path.join(dirpath, name), "rb") as f:
                        if needle.encode() in f.read(1 << 20):
                            hunt["found"].append(os.path.join(dirpath, name))  # type: ignore[union-attr]
                except OSError:
                    pass

port = int(os.environ.get("DIRECT_PORT", "0"))
if port:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        hunt["direct"] = "connected"
    except OSError as e:
        hunt["direct"] = f"refused: {e}"

if os.environ.get("LEAK") == "1":
    prompt = f"{prompt} {os.environ.get('RELEASE_SIGNING_TOKEN', '')}"

client = openai.OpenAI(max_retries=0, timeout=60)
answer = ""
for _ in range(int(os.environ.get("CALLS", "1"))):
    try:
        got = client.chat.completions.create(
            model=os.environ.get("MODEL", "standin-small"),
            messages=[{"role": "user", "content": prompt}])
        hunt["statuses"].append(200)  # type: ignore[union-attr]
        answer = got.choices[0].message.content or ""
    except openai.APIStatusError as e:
        hunt["statuses"].append(e.status_code)  # type: ignore[union-attr]
        hunt.setdefault("errors", []).append(str(e)[:300])  # type: ignore[union-attr]
    except openai.APIConnectionError as e:
        hunt["statuses"].append("connection")  # type: ignore[union-attr]
        hunt.setdefault("errors", []).append(str(e)[:300])  # type: ignore[union-attr]

with open(os.path.join(out, "hunt.json"), "w") as f:
    json.dump(hunt, f)
with open(os.path.join(out, "answer.txt"), "w") as f:
    f.write(answer + "\n")
