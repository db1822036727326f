"""`run --driver-secret NAME`: a variable of the rig's environment for the drivers and
command verifiers whose task lists it, never for the agent, never in the bundle, redacted
from evidence like --secret. Driven through eval.sh with a hostile agent that hunts for it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.redteam import add_task, eval_sh, make_checkpoint

SECRET = "sk-driver-9f1c2e7a55d04b3e"

# Holds the key, says so to the agent (a careless driver), keeps it in its files and its
# log; then ends the conversation at the agent's first message.
DRIVER = """\
import json, os, sys
def send(o):
    sys.stdout.write(json.dumps(o) + "\\n"); sys.stdout.flush()
start = json.loads(sys.stdin.readline())
key = os.environ.get("SIM_KEY", "")
sys.stderr.write("driver: using key " + key + "\\n")
send({"type": "session", "tools": [], "messages": [{"role": "user", "content": "my key is " + key}]})
for line in sys.stdin:
    f = json.loads(line)
    if f["type"] == "finish":
        break
    send({"type": "end", "reason": "done"})
with open(os.path.join(os.environ["EVALRIG_DRIVER_OUT"], "seen.json"), "w") as fh:
    json.dump({"key": key, "has": "SIM_KEY" in os.environ,
               "other": sorted(k for k in os.environ if k.startswith("OTHER"))}, fh)
"""

# Passes only when it holds exactly the secrets its task lists, and prints them.
VERIFIER = """\
import json, os, sys
want = json.load(open("want.json"))
got = {k: os.environ[k] for k in ("SIM_KEY", "OTHER_KEY") if k in os.environ}
print("verifier: environment", json.dumps(got))
with open(os.path.join(os.environ["EVALRIG_VERDICT"], "usage.json"), "w") as fh:
    json.dump({"cost_usd": 0.5, "note": got.get("SIM_KEY", "")}, fh)
sys.exit(0 if sorted(got) == want else 1)
"""

# Hunts for the secret: its own environment, every process's it can read, the tree it sees.
HOSTILE_AGENT = """\
import json, os, sys
found = {k: v for k, v in os.environ.items() if "KEY" in k}
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            data = open(f"/proc/{pid}/environ", "rb").read()
        except OSError:
            continue
        if b"SIM_KEY" in data:
            found["proc-" + pid] = data.decode(errors="replace")
session = json.loads(sys.stdin.readline())
said = json.dumps(session["messages"])
sys.stdout.write(json.dumps({"type": "message", "message": {"role": "assistant",
                 "content": "found " + json.dumps(found) + " heard " + said}}) + "\\n")
sys.stdout.flush()
with open(os.path.join(os.environ["EVALRIG_OUT"], "found.json"), "w") as fh:
    json.dump(found, fh)
for line in sys.stdin:
    pass
"""


def _episode_task(tasks: Path, task_id: str, verifier_secrets: str, want: list[str]) -> None:
    d = add_task(tasks, "fixed", task_id, extra=(
        '[episode]\ndriver = ["python3", "driver.py"]\nsecrets = ["SIM_KEY"]\n'),
        verifier=f'kind = "command"\ncommand = ["python3", "check.py"]\nsecrets = {verifier_secrets}',
        verifier_files={"check.py": VERIFIER, "want.json": json.dumps(want)})
    (d / "driver").mkdir()
    (d / "driver" / "driver.py").write_text(DRIVER)


@pytest.mark.slow
def test_driver_secrets_reach_the_listed_driver_and_verifier_only_and_never_the_bundle(tmp_path: Path) -> None:
    home, tasks = tmp_path / "home", tmp_path / "tasks"
    ck = make_checkpoint(tmp_path / "ck", HOSTILE_AGENT)
    _episode_task(tasks, "judged", '["SIM_KEY"]', ["SIM_KEY"])
    _episode_task(tasks, "unjudged", "[]", [])
    env = {"SIM_KEY": SECRET, "OTHER_KEY": "other-value-not-listed"}
    assert eval_sh(home, "seal", ck, env=env).code == 0
    bundle = tmp_path / "b"
    r = eval_sh(home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", bundle, "--repeat", "1",
                "--driver-secret", "SIM_KEY", "--driver-secret", "OTHER_KEY", env=env)
    assert r.code == 0, r
    results = {x["task_id"]: x for x in map(json.loads, (bundle / "results.jsonl").read_text().splitlines())}
    # each verifier held exactly what its task lists (it exits 1 otherwise)
    assert results["judged"]["status"] == "passed", results["judged"]
    assert results["unjudged"]["status"] == "passed", results["unjudged"]
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["settings"]["driver_secrets"] == ["OTHER_KEY", "SIM_KEY"]
    # the value is nowhere in the bundle: not the agent's hunt, the driver's files and log,
    # the transcript, the verifier's output
    leaks = [str(p.relative_to(bundle)) for p in bundle.rglob("*")
             if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert leaks == []
    attempt = bundle / "attempts" / results["judged"]["attempt_id"]
    found = json.loads((attempt / "out" / "found.json").read_text())
    assert not any("SIM_KEY" in k or SECRET in v for k, v in found.items()), found
    assert "[redacted:sim_key]" in (attempt / "transcript.jsonl").read_text().lower()
    seen = json.loads((attempt / "driver" / "seen.json").read_text())
    assert seen["has"] is True and seen["key"] == "[REDACTED:SIM_KEY]" and seen["other"] == []
    printed = (attempt / "verifier" / "run-1" / "stdout.txt").read_text()
    assert "[REDACTED:SIM_KEY]" in printed and "OTHER_KEY" not in printed
    assert "[REDACTED:SIM_KEY]" in (attempt / "verifier" / "run-1" / "usage.json").read_text()
    # verify hands the judge the run's names from its own environment
    v = eval_sh(home, "verify", bundle, env=env)
    assert v.code == 0 and "2 re-derived from evidence" in v.stdout, v
    v = eval_sh(home, "verify", bundle)
    assert v.code == 4 and "trial" in v.stderr and "re-derived failed" in v.stderr, v


def test_a_driver_secret_not_set_or_named_like_the_rigs_own_is_refused(tmp_path: Path) -> None:
    home, tasks = tmp_path / "home", tmp_path / "tasks"
    ck = make_checkpoint(tmp_path / "ck")
    add_task(tasks, "fixed", "t1")
    assert eval_sh(home, "seal", ck).code == 0
    r = eval_sh(home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "b",
                "--driver-secret", "NOT_SET_ANYWHERE")
    assert r.code == 4 and "--driver-secret NOT_SET_ANYWHERE: not set" in r.stderr, r
    r = eval_sh(home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", tmp_path / "b",
                "--driver-secret", "EVALRIG_DRIVER_OUT", env={"EVALRIG_DRIVER_OUT": "/x"})
    assert r.code == 4 and "the rig sets this variable for drivers and verifiers itself" in r.stderr, r
    assert not (tmp_path / "b").exists()


def test_verifier_secrets_leave_the_identity_of_a_verifier_that_lists_none_as_it_was(tmp_path: Path) -> None:
    from evalrig.core.digest import sha256_json
    from evalrig.store.tasks import load_taskset
    from evalrig.store.tree import hash_tree

    for task_id, secrets in (("plain", ""), ("judged", 'secrets = ["JUDGE_KEY"]')):
        add_task(tmp_path, "fixed", task_id, verifier=f'kind = "command"\ncommand = ["python3", "c.py"]\n{secrets}',
                 verifier_files={"c.py": "pass\n"})
    tasks = load_taskset(tmp_path).by_id()
    files = hash_tree(tmp_path / "fixed" / "plain" / "verifier").digest
    # the settings every command verifier had before [verifier] secrets existed
    before = {"kind": "command", "command": ["python3", "c.py"], "timeout_s": 60.0, "network": False, "version": "1"}
    assert tasks["plain"].verifier_identity.digest == sha256_json({"settings": before, "files": files})
    assert tasks["judged"].verifier_identity.digest != tasks["plain"].verifier_identity.digest
