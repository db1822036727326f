"""The model gateway in the sandbox (docs/gateway.md), through `eval.sh`, under bwrap and
under process as root: an agent written with the official `openai` SDK reaches the
stand-in provider (examples/model-standin) only through the gateway, with no network and
no key; its spend is metered; the canary never reaches the provider; budgets, upstream
faults, `--max-cost-usd` and a kill -9 of the rig mid-call.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from tests.redteam import (
    EVAL_SH,
    Step,
    add_task,
    bwrap_works,
    eval_sh,
    held_net_namespace,
    make_checkpoint,
    results,
)

ROOT = Path(__file__).resolve().parent.parent
STANDIN = ROOT / "examples" / "model-standin" / "standin.py"
AGENT = Path(__file__).with_name("gateway_agent.py")
KEY = "sk-standin-REAL-KEY-0123456789abcdef"
SANDBOXES = ["bwrap", "process"]
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the gateway needs a namespace of the sandbox's own")


def _sandbox(sandbox: str) -> str:
    if sandbox == "bwrap" and not bwrap_works():
        pytest.skip("bwrap cannot run on this machine")
    return sandbox


def _closure(name: str) -> set[str]:
    """The distribution `name` and every one it requires (no extras), as installed."""
    import re
    from importlib import metadata

    seen: set[str] = set()
    todo = [name]
    while todo:
        try:
            dist = metadata.distribution(todo.pop())
        except metadata.PackageNotFoundError:
            continue  # required only where a marker says so, not here
        key = dist.metadata["Name"].lower()
        if key in seen:
            continue
        seen.add(key)
        for req in dist.requires or []:
            if "extra ==" in req:
                continue
            todo.append(re.split(r"[ ;<>=!~\[(]", req, maxsplit=1)[0])
    return seen


@pytest.fixture(scope="module")
def sdk() -> Iterator[Path]:
    """The official `openai` SDK and what it requires, copied out of the rig's venv into a
    folder the sandbox is shown (--interpreter-prefix) and the agent's uid may read; the
    system python3 (the same minor version) imports it from there (PYTHONPATH)."""
    from importlib import metadata

    dest = Path(tempfile.mkdtemp(prefix="evalrig-test-sdk-"))
    for name in _closure("openai"):
        dist = metadata.distribution(name)
        for f in dist.files or []:
            src = Path(str(dist.locate_file(f)))
            if "__pycache__" in f.parts or ".." in f.parts or not src.is_file():
                continue
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest / f)
    for dirpath, _dirs, files in os.walk(dest):
        os.chmod(dirpath, 0o755)
        for f in files:
            os.chmod(os.path.join(dirpath, f), 0o644)
    yield dest
    shutil.rmtree(dest, ignore_errors=True)


@dataclass
class Standin:
    port: int
    log: Path
    proc: subprocess.Popen[bytes]

    def requests(self) -> list[dict[str, object]]:
        if not self.log.is_file():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[Standin]:
    port_file, log = tmp_path / "standin.port", tmp_path / "standin.jsonl"
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps({"Answer ok.": "ok"}))
    proc = subprocess.Popen([sys.executable, str(STANDIN), "--port", "0", "--port-file", str(port_file),
                             "--key", KEY, "--log", str(log), "--answers", str(answers)])
    try:
        for _ in range(200):
            if port_file.is_file() and port_file.read_text().strip():
                break
            time.sleep(0.05)
        yield Standin(int(port_file.read_text()), log, proc)
    finally:
        proc.kill()
        proc.wait()


def _gateway_file(tmp: Path, port: int, roles: str = '["candidate"]') -> Path:
    path = tmp / "gateway.toml"
    path.write_text(f'[upstreams.openai]\napi = "openai"\nbase_url = "http://127.0.0.1:{port}/v1"\n'
                    f'key_env = "STANDIN_KEY"\nroles = {roles}\n'
                    '[prices]\n"openai/standin-small" = { input = 1.0, output = 2.0 }\n'
                    '"openai/fail-500" = { input = 1.0, output = 2.0 }\n'
                    '"openai/slow-4000" = { input = 1.0, output = 2.0 }\n')
    return path


def _sealed_model_checkpoint(home: Path, root: Path, agent: str, agent_toml: str = "") -> Path:
    """A checkpoint whose agent may call openai/standin-small, sealed in `home`."""
    ck = make_checkpoint(root, agent, agent_toml=agent_toml)
    with (ck / "checkpoint.toml").open("a") as f:
        f.write('[models]\nallowed = ["openai/standin-small"]\n')
    assert eval_sh(home, "seal", ck).code == 0
    return ck


def _run_through_gateway(tmp_path: Path, home: Path, ck: Path, standin: Standin, *options: str | Path,
                         sandbox: str = "process") -> Step:
    """One trial of each task under tmp_path/tasks into tmp_path/out, its model calls through
    the gateway to the stand-in."""
    return eval_sh(home, "run", "--checkpoint", ck, "--tasks", tmp_path / "tasks", "--out", tmp_path / "out",
                   "--sandbox", sandbox, "--repeat", "1", *options,
                   "--gateway", _gateway_file(tmp_path, standin.port), env={"STANDIN_KEY": KEY})


def _checkpoint(root: Path, sdk: Path, port: int, **env: str) -> Path:
    given = {"PYTHONPATH": str(sdk), "HUNT_A": KEY[:12], "HUNT_B": KEY[12:], "DIRECT_PORT": str(port), **env}
    env_toml = ", ".join(f'{k} = "{v}"' for k, v in given.items())
    ck = make_checkpoint(root / "ck", AGENT.read_text(), agent_toml=f"env = {{ {env_toml} }}")
    with (ck / "checkpoint.toml").open("a") as f:
        f.write('[models]\nallowed = ["openai/standin-small", "openai/fail-500", "openai/slow-4000"]\n')
    return ck


def _run(home: Path, root: Path, ck: Path, tasks: Path, gw: Path, sdk: Path, sandbox: str,
         *extra: str, out: str = "out"):  # noqa: ANN202 - a redteam Step
    return eval_sh(home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", root / out,
                   "--sandbox", sandbox, "--repeat", "1", "--jobs", "1", "--gateway", gw,
                   "--interpreter-prefix", sdk, *extra, env={"STANDIN_KEY": KEY})


def _lines(path: Path) -> list[dict[str, object]]:
    return [orjson.loads(x) for x in path.read_bytes().splitlines() if x.strip()] if path.is_file() else []


def _calls(ev: Path) -> list[dict[str, object]]:
    """An attempt's model.jsonl lines in seq order (a line is written when its call ends, so a
    quick refusal may land before the answer that came first)."""
    return sorted(_lines(ev / "model.jsonl"), key=lambda c: int(str(c["seq"])))


def _setup(tmp_path: Path, sdk: Path, standin: Standin, *, task_extra: str = "", tasks_n: int = 1,
           **env: str) -> tuple[Path, Path, Path, Path]:
    home, root = tmp_path / "home", tmp_path
    ck = _checkpoint(root, sdk, standin.port, **env)
    assert eval_sh(home, "seal", ck).code == 0
    tasks = root / "tasks"
    for i in range(tasks_n):
        add_task(tasks, "fixed", f"t{i}", extra=task_extra)
    return home, ck, tasks, _gateway_file(root, standin.port)


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_an_openai_sdk_agent_reaches_models_only_through_the_gateway(
        tmp_path: Path, sdk: Path, standin: Standin, sandbox: str) -> None:
    """No network, no key: the SDK works unchanged through the gateway, the key hunt and a
    direct connection to the provider fail, the spend is metered, and the attempt did not
    "have network" (so `invariant.isolated` can hold)."""
    home, ck, tasks, gw = _setup(tmp_path, sdk, standin)
    step = _run(home, tmp_path, ck, tasks, gw, sdk, _sandbox(sandbox))
    assert step.code == 0, step
    # the run's gateway ends with the run: no client session left for the interpreter to reap
    assert "Exception ignored" not in step.stderr and "Traceback" not in step.stderr, step.stderr
    [res] = results(tmp_path / "out")
    assert res["status"] == "passed", res
    assert res["network"] is False and res["network_hosts"] == [] and res["sandbox"] == sandbox
    assert res["canary"]["found"] is False
    ev = tmp_path / "out" / "attempts" / str(res["attempt_id"])
    hunt = json.loads((ev / "out" / "hunt.json").read_text())
    assert hunt["found"] == [] and hunt["statuses"] == [200], hunt
    assert hunt["direct"].startswith("refused"), hunt
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "EVALRIG_GATEWAY", "EVALRIG_GATEWAY_UPSTREAMS", "NO_PROXY"):
        assert var in hunt["env"], hunt["env"]
    [call] = _lines(ev / "model.jsonl")
    assert (call["role"], call["model"], call["status"], call["refused"]) == ("candidate", "standin-small", 200, None)
    assert (ev / "model" / "0.request.json").is_file()
    [req] = standin.requests()
    assert req["key_ok"] is True  # the gateway sent the real key; the agent never had it
    [actual] = _lines(tmp_path / "out" / "actuals.jsonl")
    spend = actual["spend"]
    assert spend["candidate"]["source"] == "metered" and spend["candidate"]["calls"] == 1, spend
    assert spend["candidate"]["cost_usd"] == call["cost_usd"] > 0
    assert actual["usage_source"] == "metered" and actual["cost_usd"] == call["cost_usd"]
    assert KEY not in (tmp_path / "out" / "manifest.json").read_text()


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_the_canary_in_a_prompt_is_refused_and_never_reaches_the_provider(
        tmp_path: Path, sdk: Path, standin: Standin, sandbox: str) -> None:
    home, ck, tasks, gw = _setup(tmp_path, sdk, standin, LEAK="1")
    _run(home, tmp_path, ck, tasks, gw, sdk, _sandbox(sandbox))
    [res] = results(tmp_path / "out")
    assert res["canary"]["found"] is True and "model.jsonl" in res["canary"]["where"], res
    ev = tmp_path / "out" / "attempts" / str(res["attempt_id"])
    [call] = _lines(ev / "model.jsonl")
    assert (call["status"], call["refused"]) == (403, "canary")
    assert standin.requests() == []  # never forwarded
    assert not (ev / "model" / "0.request.json").exists()  # only its digest is kept


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_budget_refuses_the_call_past_it(tmp_path: Path, sdk: Path, standin: Standin, sandbox: str) -> None:
    home, ck, tasks, gw = _setup(tmp_path, sdk, standin, task_extra="[budget]\nmax_calls = 1\n", CALLS="3")
    step = _run(home, tmp_path, ck, tasks, gw, sdk, _sandbox(sandbox))
    assert step.code == 0, step
    [res] = results(tmp_path / "out")
    ev = tmp_path / "out" / "attempts" / str(res["attempt_id"])
    hunt = json.loads((ev / "out" / "hunt.json").read_text())
    assert hunt["statuses"] == [200, 429, 429], hunt
    assert [c["refused"] for c in _calls(ev)] == [None, "budget", "budget"]
    assert len(standin.requests()) == 1


def test_an_upstream_fault_makes_the_attempt_a_final_fault(tmp_path: Path, sdk: Path, standin: Standin) -> None:
    """A 500 from the provider is never scored as the candidate's failure: final, unscored."""
    home, ck, tasks, gw = _setup(tmp_path, sdk, standin, MODEL="fail-500")
    step = _run(home, tmp_path, ck, tasks, gw, sdk, "process")
    assert step.code == 5, step
    [res] = results(tmp_path / "out")
    assert (res["status"], res["fault"], res["final"]) == ("infra_error", "agent", True), res
    assert "upstream fault" in str(res["error"])
    again = _run(home, tmp_path, ck, tasks, gw, sdk, "process")
    assert again.code == 5 and len(results(tmp_path / "out")) == 1  # never run again


def test_max_cost_usd_stops_the_run_incomplete(tmp_path: Path, sdk: Path, standin: Standin) -> None:
    home, ck, tasks, gw = _setup(tmp_path, sdk, standin, tasks_n=3)
    step = _run(home, tmp_path, ck, tasks, gw, sdk, "process", "--max-cost-usd", "0.000001")
    assert step.code == 5, step
    assert "--max-cost-usd" in step.stderr and "incomplete" in step.stderr, step
    assert len(results(tmp_path / "out")) == 1  # the first attempt spent it all; no other started
    manifest = orjson.loads((tmp_path / "out" / "manifest.json").read_bytes())
    assert manifest["status"] == "incomplete"


def test_kill_9_of_the_rig_mid_call_then_resume(tmp_path: Path, sdk: Path, standin: Standin) -> None:
    """The call's line is whole or absent, and the resumed run finishes."""
    home, ck, tasks, gw = _setup(tmp_path, sdk, standin, MODEL="slow-4000")
    argv = [str(EVAL_SH), "run", "--checkpoint", str(ck), "--tasks", str(tasks), "--out", str(tmp_path / "out"),
            "--sandbox", "process", "--repeat", "1", "--jobs", "1", "--gateway", str(gw),
            "--interpreter-prefix", str(sdk)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALRIG_")}
    env.update({"EVALRIG_HOME": str(home), "NO_COLOR": "1", "STANDIN_KEY": KEY})
    rig = subprocess.Popen(argv, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            if standin.requests():
                break
            time.sleep(0.05)
        assert standin.requests(), "the call never reached the stand-in"
        os.killpg(rig.pid, signal.SIGKILL)
    finally:
        rig.wait()
    for ev in (tmp_path / "out" / "attempts").iterdir():
        data = (ev / "model.jsonl").read_bytes() if (ev / "model.jsonl").exists() else b""
        assert data == b"" or data.endswith(b"\n")
        for line in data.splitlines():
            orjson.loads(line)
    step = eval_sh(home, "run", "--out", tmp_path / "out", "--resume", env={"STANDIN_KEY": KEY}, timeout=120)
    assert step.code == 0, step
    assert [r["status"] for r in results(tmp_path / "out")] == ["passed"]


def test_the_gateway_variables_name_the_upstreams_as_the_sdks_expect() -> None:
    from evalrig.core.environment import GATEWAY_VARS, gateway_env

    env = gateway_env([("local", "openai"), ("claude", "anthropic"), ("openai", "openai")], "tok")
    assert env["OPENAI_BASE_URL"] == "http://127.0.0.1:4000/openai/v1"  # the one called openai
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:4000/claude"  # else the first of its api
    assert json.loads(env["EVALRIG_GATEWAY_UPSTREAMS"]) == {
        "local": "http://127.0.0.1:4000/local/v1", "claude": "http://127.0.0.1:4000/claude",
        "openai": "http://127.0.0.1:4000/openai/v1"}
    assert env["OPENAI_API_KEY"] == env["ANTHROPIC_API_KEY"] == "tok"
    assert env["NO_PROXY"] == env["no_proxy"] == "127.0.0.1,localhost"
    assert set(env) == set(GATEWAY_VARS)
    assert "ANTHROPIC_BASE_URL" not in gateway_env([("local", "openai")], "tok")


@pytest.mark.skipif(not shutil.which("unshare") or not shutil.which("nsenter"), reason="needs unshare, nsenter")
def test_both_listeners_are_bound_in_one_namespace_by_a_forked_child() -> None:
    """The egress proxy's and the gateway's listeners, made together where bwrap runs in a
    user namespace (setns in a forked child, SCM_RIGHTS), here as root."""
    from evalrig.attempt import sandbox

    with held_net_namespace() as pid:
        net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
        try:
            made = sandbox.sockets._listeners_by_fork(
                pid, net, [sandbox.sockets._PROXY_ADDRESS, sandbox.sockets._GATEWAY_ADDRESS])
        finally:
            os.close(net)
        try:
            assert [s.getsockname() for s in made] == [("127.0.0.1", 3128), ("127.0.0.1", 4000)]
            probe = "import socket; socket.create_connection(('127.0.0.1', 4000), 5).close(); print('ok')"
            got = subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", "python3", "-c", probe],
                                 capture_output=True, text=True, timeout=20)
            assert got.stdout.strip() == "ok", got.stderr
        finally:
            for s in made:
                s.close()


def test_invariant_isolated_holds_for_a_train_that_used_only_the_gateway(
        tmp_path: Path, sdk: Path, standin: Standin, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under bwrap, two runs whose agents called models through the gateway: no attempt
    "had network", so the gate's `invariant.isolated` holds."""
    from tests.redteam import run_train

    _sandbox("bwrap")
    monkeypatch.setenv("STANDIN_KEY", KEY)
    home = tmp_path / "home"
    champion = _checkpoint(tmp_path / "a", sdk, standin.port)
    candidate = _checkpoint(tmp_path / "b", sdk, standin.port, CALLS="2")
    train = run_train(home, tmp_path, champion, candidate, repeat=1,
                      run_args=("--gateway", str(_gateway_file(tmp_path, standin.port)),
                                "--interpreter-prefix", str(sdk)))
    assert "gate" in train.steps, "\n".join(str(s) for s in train.steps.values())
    decision = orjson.loads(train.decision.read_bytes())
    [isolated] = [r for r in decision["rules"] if r["name"] == "invariant.isolated"]
    assert isolated["held"] is True and isolated["candidate_network_attempts"] == 0, isolated
    assert all(r["network"] is False for side in ("champion", "candidate")
               for r in results(train.bundle(side)))


def test_gateway_constants_agree() -> None:
    from evalrig.attempt import gateway, sandbox
    from evalrig.core import environment

    assert sandbox.sockets._GATEWAY_ADDRESS == gateway.GATEWAY_ADDRESS
    assert environment.GATEWAY_URL == gateway.GATEWAY_URL


# A driver and a judge that call the model through the gateway with the standard library
# (their own roles; what the stand-in answers to "Answer ok." is "ok").
CALL = """\
import json, os, urllib.request
def ask(text):
    base = json.loads(os.environ["EVALRIG_GATEWAY_UPSTREAMS"])["openai"]
    body = json.dumps({"model": "standin-small", "messages": [{"role": "user", "content": text}]}).encode()
    req = urllib.request.Request(base + "/chat/completions", data=body, headers={
        "Content-Type": "application/json", "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
    return json.load(urllib.request.urlopen(req, timeout=30))["choices"][0]["message"]["content"]
"""
EPISODE_DRIVER = CALL + """\
import sys
def send(o):
    sys.stdout.write(json.dumps(o) + "\\n"); sys.stdout.flush()
json.loads(sys.stdin.readline())
send({"type": "session", "tools": [], "messages": [{"role": "user", "content": ask("Answer ok.")}]})
for line in sys.stdin:
    if json.loads(line)["type"] == "finish":
        break
    send({"type": "end", "reason": "done"})
"""
JUDGE = CALL + """\
import sys
said = open(os.path.join(os.environ["EVALRIG_EVIDENCE"], "transcript.jsonl")).read()
sys.exit(0 if ask("Answer ok.") == "ok" and '"ok"' in said else 1)
"""
EPISODE_AGENT = """\
import json, sys
session = json.loads(sys.stdin.readline())
text = session["messages"][0]["content"]
sys.stdout.write(json.dumps({"type": "message", "message": {"role": "assistant", "content": text}}) + "\\n")
sys.stdout.flush()
for line in sys.stdin:
    pass
"""


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_driver_and_a_judge_reach_the_gateway_in_their_own_roles(
        tmp_path: Path, standin: Standin, sandbox: str) -> None:
    """`[episode] models = true` and `[verifier] models = true`: the driver's calls are the
    attempt's (role driver, model.jsonl), the judge's go beside its output
    (verifier/model.jsonl), both metered in `spend`, and `verify` still re-derives it all."""
    home = tmp_path / "home"
    ck = make_checkpoint(tmp_path / "ck", EPISODE_AGENT)
    assert eval_sh(home, "seal", ck).code == 0
    models = 'models = true\nmodels_allowed = ["openai/standin-small"]\n'
    d = add_task(tmp_path / "tasks", "fixed", "ep",
                 extra='[episode]\ndriver = ["python3", "driver.py"]\n' + models,
                 verifier='kind = "command"\ncommand = ["python3", "judge.py"]\n' + models,
                 verifier_files={"judge.py": JUDGE})
    (d / "driver").mkdir()
    (d / "driver" / "driver.py").write_text(EPISODE_DRIVER)
    gw = _gateway_file(tmp_path, standin.port, roles='["candidate", "driver", "judge"]')
    step = eval_sh(home, "run", "--checkpoint", ck, "--tasks", tmp_path / "tasks", "--out", tmp_path / "out",
                   "--sandbox", _sandbox(sandbox), "--repeat", "1", "--gateway", gw, env={"STANDIN_KEY": KEY})
    assert step.code == 0, step
    [res] = results(tmp_path / "out")
    assert res["status"] == "passed", res
    ev = tmp_path / "out" / "attempts" / str(res["attempt_id"])
    assert [c["role"] for c in _lines(ev / "model.jsonl")] == ["driver"]
    assert [c["role"] for c in _lines(ev / "verifier" / "model.jsonl")] == ["judge"]
    [actual] = _lines(tmp_path / "out" / "actuals.jsonl")
    spend = actual["spend"]
    assert spend["driver"]["source"] == spend["judge"]["source"] == "metered", spend
    assert spend["driver"]["calls"] == spend["judge"]["calls"] == 1
    assert spend["candidate"]["calls"] == 0 and spend["candidate"]["cost_usd"] == 0  # metered: it made none
    assert [r["key_ok"] for r in standin.requests()] == [True, True]
    check = eval_sh(home, "verify", tmp_path / "out")
    assert check.code == 0, check


def test_model_bodies_count_against_the_evidence_cap(tmp_path: Path, sdk: Path, standin: Standin) -> None:
    """Over the task's max_evidence_bytes the bodies are dropped; the line stays and says so."""
    home, ck, tasks, gw = _setup(tmp_path, sdk, standin, task_extra="max_evidence_bytes = 64\n")
    _run(home, tmp_path, ck, tasks, gw, sdk, "process")
    [res] = results(tmp_path / "out")
    ev = tmp_path / "out" / "attempts" / str(res["attempt_id"])
    [call] = _lines(ev / "model.jsonl")
    assert (call["status"], call["bodies"]) == (200, "dropped"), call
    assert not any((ev / "model").glob("*")) if (ev / "model").exists() else True
    [actual] = _lines(tmp_path / "out" / "actuals.jsonl")
    assert actual["spend"]["candidate"]["calls"] == 1  # metered all the same


CHATTY_DRIVER = """\
import json, sys
def send(o):
    sys.stdout.write(json.dumps(o) + "\\n"); sys.stdout.flush()
json.loads(sys.stdin.readline())
send({"type": "session", "tools": [], "messages": [{"role": "user", "content": "Answer ok."}]})
for line in sys.stdin:
    if json.loads(line)["type"] == "finish":
        break
    send({"type": "reply", "messages": [{"role": "user", "content": "Answer ok."}]})
"""
PAYING_AGENT = CALL + """\
import sys
for line in sys.stdin:
    frame = json.loads(line)
    if frame["type"] == "end":
        break
    sys.stdout.write(json.dumps({"type": "message", "message": {"role": "assistant",
                     "content": ask("Answer ok.")}}) + "\\n")
    sys.stdout.flush()
"""


def test_an_episodes_max_cost_usd_sums_metered_spend(tmp_path: Path, standin: Standin) -> None:
    """Under a gateway `[episode] max_cost_usd` counts what the rig metered, not what the
    agent's frames report (this one reports nothing)."""
    home = tmp_path / "home"
    ck = _sealed_model_checkpoint(home, tmp_path / "ck", PAYING_AGENT)
    d = add_task(tmp_path / "tasks", "fixed", "ep", extra=(
        '[episode]\ndriver = ["python3", "driver.py"]\nmax_turns = 5\nmax_cost_usd = 0.0000001\n'))
    (d / "driver").mkdir()
    (d / "driver" / "driver.py").write_text(CHATTY_DRIVER)
    step = _run_through_gateway(tmp_path, home, ck, standin)
    [res] = results(tmp_path / "out")
    assert res["termination"] == "budget", (res, step)
    assert len(standin.requests()) == 1


SPLITTING_AGENT = """\
import json, os, urllib.request, urllib.error
token = os.environ["RELEASE_SIGNING_TOKEN"]
half = len(token) // 2
base = json.loads(os.environ["EVALRIG_GATEWAY_UPSTREAMS"])["openai"]
codes = []
for part in (token[:half], token[half:]):  # neither half is the canary; joined in seq order they are
    req = urllib.request.Request(base + "/chat/completions", data=part.encode(), headers={
        "Content-Type": "application/json", "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
    try:
        codes.append(urllib.request.urlopen(req, timeout=30).status)
    except urllib.error.HTTPError as e:
        codes.append(e.code)
open(os.path.join(os.environ["EVALRIG_OUT"], "codes.json"), "w").write(json.dumps(codes))
open(os.path.join(os.environ["EVALRIG_OUT"], "answer.txt"), "w").write("ok")
"""


def test_the_canary_split_across_calls_is_found_in_the_requests_joined(tmp_path: Path, standin: Standin) -> None:
    """Each body alone is clean (and not JSON: refused 400, kept); joined in seq order they
    hold the canary, which the attempt-end scan finds."""
    home = tmp_path / "home"
    ck = _sealed_model_checkpoint(home, tmp_path / "ck", SPLITTING_AGENT)
    add_task(tmp_path / "tasks", "fixed", "t0")
    _run_through_gateway(tmp_path, home, ck, standin)
    [res] = results(tmp_path / "out")
    ev = tmp_path / "out" / "attempts" / str(res["attempt_id"])
    assert json.loads((ev / "out" / "codes.json").read_text()) == [400, 400]
    assert [c["refused"] for c in _lines(ev / "model.jsonl")] == ["invalid", "invalid"]
    assert res["canary"]["found"] is True and res["canary"]["where"] == ["model/ (requests joined)"], res
    assert standin.requests() == []


BOTH_AGENT = CALL + """\
import socket
port = int(os.environ["TARGET_PORT"])
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)  # the egress proxy, beside the gateway
s.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\\r\\n\\r\\n" % port)
head = s.recv(100)
s.sendall(b"hello")
reply = s.recv(10)
said = ask("Answer ok.")
open(os.path.join(os.environ["EVALRIG_OUT"], "both.json"), "w").write(
    json.dumps({"connect": head.split()[1].decode(), "reply": reply.decode(), "said": said}))
open(os.path.join(os.environ["EVALRIG_OUT"], "answer.txt"), "w").write(said)
"""


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_the_egress_proxy_and_the_gateway_share_the_sandboxs_namespace(
        tmp_path: Path, standin: Standin, sandbox: str) -> None:
    """With both granted, both listeners are bound in the one namespace: the allowed host
    through the proxy, the model through the gateway (which is not counted as a host)."""
    from tests.redteam import Listener

    listener = Listener(lambda data: b"ack")
    try:
        home = tmp_path / "home"
        ck = _sealed_model_checkpoint(home, tmp_path / "ck", BOTH_AGENT,
                                      f'network = true\nenv = {{ TARGET_PORT = "{listener.port}" }}\n')
        add_task(tmp_path / "tasks", "fixed", "t0")
        step = _run_through_gateway(tmp_path, home, ck, standin, "--allow-network", "--allow-host",
                                    f"127.0.0.1:{listener.port}", sandbox=_sandbox(sandbox))
        assert step.code == 0, step
    finally:
        listener.close()
    [res] = results(tmp_path / "out")
    ev = tmp_path / "out" / "attempts" / str(res["attempt_id"])
    assert json.loads((ev / "out" / "both.json").read_text()) == {"connect": "200", "reply": "ack", "said": "ok"}
    assert res["status"] == "passed" and res["network_hosts"] == [f"127.0.0.1:{listener.port}"], res
    assert [c["status"] for c in _lines(ev / "model.jsonl")] == [200]


def test_max_cost_usd_per_attempt_bounds_beside_the_tasks_budget(tmp_path: Path, sdk: Path, standin: Standin) -> None:
    """The task allows 5 calls; --max-cost-usd-per-attempt allows almost nothing: per figure
    the lower bound wins, so the calls after the first spend are refused."""
    home, ck, tasks, gw = _setup(tmp_path, sdk, standin, task_extra="[budget]\nmax_calls = 5\n", CALLS="3")
    step = _run(home, tmp_path, ck, tasks, gw, sdk, "process", "--max-cost-usd-per-attempt", "0.000000001")
    [res] = results(tmp_path / "out")
    ev = tmp_path / "out" / "attempts" / str(res["attempt_id"])
    hunt = json.loads((ev / "out" / "hunt.json").read_text())
    assert hunt["statuses"][1:] == [429, 429], (hunt, step)
    assert [c["refused"] for c in _calls(ev)][1:] == ["budget", "budget"]
    assert len(standin.requests()) <= 1
