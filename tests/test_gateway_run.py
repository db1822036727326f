"""`run --gateway FILE` / `--replay BUNDLE` through eval.sh (docs/gateway.md): every refusal
is exit 4 before the first attempt, naming the file and field; a run served by a gateway
records the gateway's facts in its manifest, and never its keys."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest
from redteam import EVAL_SH, add_task, eval_sh, make_checkpoint

KEY = "sk-test-9f8e7d6c5b4a"

GATEWAY = """\
[upstreams.openai]
api = "openai"
base_url = "https://api.openai.com/v1"
key_env = "GW_TEST_OPENAI_KEY"
[upstreams.local]
api = "openai"
base_url = "http://127.0.0.1:11434/v1"
key_env = ""
[prices]
"local/qwen3:8b" = { input = 0.0, output = 0.0 }
"""


def _checkpoint(dir: Path, models: list[str] | None, env: str = "") -> Path:
    ck = make_checkpoint(dir, name=dir.name, agent_toml=env)
    if models is not None:
        with (ck / "checkpoint.toml").open("a") as f:
            f.write("[models]\nallowed = [" + ", ".join(f'"{m}"' for m in models) + "]\n")
    return ck


def _tasks(dir: Path) -> Path:
    add_task(dir, "fixed", "t0")
    return dir


def _run(home: Path, ck: Path, tasks: Path, out: Path, *extra: str | Path,
         env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return eval_sh(home, "run", "--checkpoint", ck, "--tasks", tasks, "--out", out, "--repeat", "1",
                   "--jobs", "1", *extra, env=env)


@pytest.fixture
def sealed(tmp_path: Path, evalrig_home: Path) -> tuple[Path, Path]:
    ck = _checkpoint(tmp_path / "cand", ["openai/gpt-4.1-mini", "local/qwen3:8b"])
    assert eval_sh(evalrig_home, "seal", ck).code == 0
    return ck, _tasks(tmp_path / "tasks")


def _gateway(tmp_path: Path, text: str = GATEWAY) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return path


def test_models_without_a_gateway_are_refused(tmp_path: Path, evalrig_home: Path,
                                              sealed: tuple[Path, Path]) -> None:
    ck, tasks = sealed
    step = _run(evalrig_home, ck, tasks, tmp_path / "run")
    assert step.code == 4, step
    assert f"{ck / 'checkpoint.toml'}:6: models.allowed: the checkpoint names models its agent calls" in step.stderr, step
    assert "--gateway FILE" in step.stderr and "--replay BUNDLE" in step.stderr, step
    assert not (tmp_path / "run" / "manifest.json").exists()


def test_an_unset_key_is_refused_naming_the_file_and_field(tmp_path: Path, evalrig_home: Path,
                                                          sealed: tuple[Path, Path]) -> None:
    ck, tasks = sealed
    gw = _gateway(tmp_path)
    step = _run(evalrig_home, ck, tasks, tmp_path / "run", "--gateway", gw)
    assert step.code == 4, step
    assert (f"{gw}:4: upstreams.openai.key_env: GW_TEST_OPENAI_KEY is not set in the rig's environment"
            in step.stderr), step
    assert "export the key" in step.stderr, step


def test_a_model_whose_upstream_the_file_lacks_is_refused(tmp_path: Path, evalrig_home: Path) -> None:
    ck = _checkpoint(tmp_path / "c2", ["anthropic/claude-haiku-4-5"])
    assert eval_sh(evalrig_home, "seal", ck).code == 0
    gw = _gateway(tmp_path)
    step = _run(evalrig_home, ck, _tasks(tmp_path / "tasks"), tmp_path / "run", "--gateway", gw,
                env={"GW_TEST_OPENAI_KEY": KEY})
    assert step.code == 4, step
    assert (f"models.allowed[0]: 'anthropic/claude-haiku-4-5': the gateway file {gw} has no upstream "
            "'anthropic' (it has: local, openai)") in step.stderr, step


def test_an_unpriced_model_is_refused(tmp_path: Path, evalrig_home: Path) -> None:
    ck = _checkpoint(tmp_path / "c3", ["local/llama-unknown-7b"])
    assert eval_sh(evalrig_home, "seal", ck).code == 0
    gw = _gateway(tmp_path)
    step = _run(evalrig_home, ck, _tasks(tmp_path / "tasks"), tmp_path / "run", "--gateway", gw,
                env={"GW_TEST_OPENAI_KEY": KEY})
    assert step.code == 4, step
    assert "'local/llama-unknown-7b': genai-prices" in step.stderr, step
    assert 'add "local/llama-unknown-7b" = { input = ..., output = ... }' in step.stderr, step


def test_a_base_url_that_is_not_http_is_refused_at_its_line(tmp_path: Path, evalrig_home: Path,
                                                            sealed: tuple[Path, Path]) -> None:
    ck, tasks = sealed
    gw = _gateway(tmp_path, GATEWAY.replace("http://127.0.0.1:11434/v1", "file:///etc/passwd"))
    step = _run(evalrig_home, ck, tasks, tmp_path / "run", "--gateway", gw, env={"GW_TEST_OPENAI_KEY": KEY})
    assert step.code == 4, step
    assert f"{gw}:7: upstreams.local.base_url:" in step.stderr and "is not an http(s) URL" in step.stderr, step


@pytest.mark.parametrize("var", ["OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "EVALRIG_GATEWAY_UPSTREAMS", "no_proxy"])
def test_a_checkpoint_env_setting_a_gateway_variable_is_refused(tmp_path: Path, evalrig_home: Path, var: str) -> None:
    ck = _checkpoint(tmp_path / "c4", None, env=f'env = {{ {var} = "http://evil.example" }}')
    assert eval_sh(evalrig_home, "seal", ck).code == 0
    step = _run(evalrig_home, ck, _tasks(tmp_path / "tasks"), tmp_path / "run")
    assert step.code == 4, step
    assert f"agent.env.{var}: {var} is the model gateway's variable, set by the rig" in step.stderr, step


def test_a_gateway_run_records_its_facts_and_never_the_key(tmp_path: Path, evalrig_home: Path,
                                                           sealed: tuple[Path, Path]) -> None:
    from evalrig.core.digest import sha256_bytes
    from evalrig.core.pricing import genai_prices_version, prices_digest
    from evalrig.models.gateway import GatewayFile

    ck, tasks = sealed
    gw = _gateway(tmp_path)
    out = tmp_path / "run"
    step = _run(evalrig_home, ck, tasks, out, "--gateway", gw, "--max-cost-usd-per-attempt", "0.5",
                "--max-cost-usd", "3", env={"GW_TEST_OPENAI_KEY": KEY})
    assert step.code == 0, step
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    spec = GatewayFile.model_validate(__import__("tomllib").loads(GATEWAY))
    assert manifest["gateway"] == {
        "file_digest": sha256_bytes(gw.read_bytes()), "genai_prices": genai_prices_version(),
        "prices_digest": prices_digest(spec.prices),
        "upstreams": {"local": {"api": "openai", "base_url": "http://127.0.0.1:11434/v1", "price_provider": "openai"},
                      "openai": {"api": "openai", "base_url": "https://api.openai.com/v1", "price_provider": "openai"}},
        "prices": {"local/qwen3:8b": {"input": 0.0, "output": 0.0}}}
    assert manifest["settings"]["gateway"] == str(gw.resolve())
    assert manifest["settings"]["max_cost_usd_per_attempt"] == 0.5
    assert manifest["settings"]["max_cost_usd"] == 3
    assert "replay_of" not in manifest
    for path in out.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
    # the gateway file changed: a resume is refused, naming it
    gw.write_text(GATEWAY.replace("input = 0.0", "input = 1.0"))
    again = _run(evalrig_home, ck, tasks, out, "--gateway", gw, "--max-cost-usd-per-attempt", "0.5",
                 "--max-cost-usd", "3", "--resume", env={"GW_TEST_OPENAI_KEY": KEY})
    assert again.code == 4, again
    assert "--gateway: the gateway file or the price table" in again.stderr, again


def test_bad_budgets_are_usage_errors(tmp_path: Path, evalrig_home: Path, sealed: tuple[Path, Path]) -> None:
    ck, tasks = sealed
    for flag in ("--max-cost-usd", "--max-cost-usd-per-attempt"):
        step = _run(evalrig_home, ck, tasks, tmp_path / "run", flag, "0")
        assert step.code == 2, step
        assert f"{flag} 0.0: must be a finite number of US dollars greater than 0" in step.stderr, step


def test_the_defaults_file_names_the_gateway(tmp_path: Path, evalrig_home: Path,
                                             sealed: tuple[Path, Path]) -> None:
    ck, tasks = sealed
    work = tmp_path / "work"
    work.mkdir()
    (work / "conf").mkdir()
    _gateway(work / "conf")
    (work / "evalrig.toml").write_text('gateway = "conf/gateway.toml"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALRIG_")}
    env.update(EVALRIG_HOME=str(evalrig_home), NO_COLOR="1")
    p = subprocess.run([str(EVAL_SH), "run", "--checkpoint", str(ck), "--tasks", str(tasks), "--out",
                        str(tmp_path / "run"), "--repeat", "1"], cwd=work, capture_output=True, text=True,
                       env=env, timeout=300, stdin=subprocess.DEVNULL)
    assert p.returncode == 4, p.stderr
    # the defaults' file was read: its unset key is what stops the run
    assert f"{work / 'conf' / 'gateway.toml'}:4: upstreams.openai.key_env" in p.stderr, p.stderr


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_a_gateway_under_process_without_root_is_refused(tmp_path: Path, evalrig_home: Path,
                                                         sealed: tuple[Path, Path]) -> None:
    from test_redteam_untrusted import AS_NON_ROOT

    ck, tasks = sealed
    gw = _gateway(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALRIG_")}
    env.update(EVALRIG_HOME=str(evalrig_home), NO_COLOR="1", GW_TEST_OPENAI_KEY=KEY)
    p = subprocess.run([*AS_NON_ROOT, str(EVAL_SH), "run", "--checkpoint", str(ck), "--tasks", str(tasks),
                        "--out", str(tmp_path / "run"), "--sandbox", "process", "--repeat", "1",
                        "--gateway", str(gw)], capture_output=True, text=True, env=env, timeout=300,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 4, p.stderr
    assert "--gateway: under --sandbox process without root" in p.stderr, p.stderr
    assert "a gateway the agent could bypass proves nothing" in p.stderr.replace("\n", " "), p.stderr


def test_validate_reports_gateway_forms_with_their_lines(tmp_path: Path, evalrig_home: Path) -> None:
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "checkpoint.toml").write_text('name = "x"\n[agent]\ncommand = ["python3", "a.py"]\n'
                                        'env = { OPENAI_BASE_URL = "http://evil.example" }\n')
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "checkpoint.toml").write_text('name = "x"\n[agent]\ncommand = ["python3", "a.py"]\n'
                                         '[models]\nallowed = ["gpt-4"]\n')
    tasks = tmp_path / "tasks"
    add_task(tasks, "fixed", "t1", extra="[budget]\nmax_calls = 0\n",
             verifier='kind = "command"\ncommand = ["x"]\nmodels = true\nmodels_allowed = ["nope"]')
    step = eval_sh(evalrig_home, "validate", "--checkpoint", ck, "--checkpoint", bad, "--tasks", tasks)
    assert step.code == 4, step
    toml = tasks / "fixed" / "t1" / "task.toml"
    for said in (f"{ck / 'checkpoint.toml'}:4: agent.env.OPENAI_BASE_URL: OPENAI_BASE_URL is the model "
                 "gateway's variable, set by the rig",
                 f"{bad / 'checkpoint.toml'}:5: models.allowed[0]: 'gpt-4' is not <upstream>/<model>",
                 f"{toml}:4: budget.max_calls: must be greater than 0",
                 f"{toml}:10: verifier.models_allowed[0]: 'nope' is not <upstream>/<model>"):
        assert said in step.stdout + step.stderr, step


def test_replay_takes_only_a_registered_verified_recording_of_this_checkpoint(
        tmp_path: Path, evalrig_home: Path) -> None:
    ck = _checkpoint(tmp_path / "rec", None)
    other = _checkpoint(tmp_path / "other", None, env='env = { X = "1" }')
    for c in (ck, other):
        assert eval_sh(evalrig_home, "seal", c).code == 0
    tasks = _tasks(tmp_path / "tasks")
    rec = tmp_path / "recording"
    assert _run(evalrig_home, ck, tasks, rec, "--sandbox", "process").code == 0
    step = _run(evalrig_home, other, tasks, tmp_path / "r1", "--sandbox", "process", "--replay", rec)
    assert step.code == 4, step
    assert f"{rec / 'manifest.json'}: checkpoint.id: --replay: the recording evaluated checkpoint" in step.stderr, step
    both = _run(evalrig_home, ck, tasks, tmp_path / "r2", "--replay", rec, "--gateway", _gateway(tmp_path))
    assert both.code == 2 and "--gateway and --replay: give one" in both.stderr, both
    (rec / "results.jsonl").write_bytes((rec / "results.jsonl").read_bytes() + b"\n")
    step = _run(evalrig_home, ck, tasks, tmp_path / "r3", "--sandbox", "process", "--replay", rec)
    assert step.code == 4 and "--replay: does not verify" in step.stderr, step
    assert not (tmp_path / "r3" / "manifest.json").exists()


def test_a_judge_that_calls_models_needs_a_gateway_too(tmp_path: Path, evalrig_home: Path) -> None:
    ck = _checkpoint(tmp_path / "plain", None)
    assert eval_sh(evalrig_home, "seal", ck).code == 0
    tasks = tmp_path / "tasks"
    add_task(tasks, "fixed", "j", verifier='kind = "command"\ncommand = ["python3", "judge.py"]\nmodels = true\n'
                                           'models_allowed = ["openai/gpt-4.1-mini"]',
             verifier_files={"judge.py": "print(1)\n"})
    step = _run(evalrig_home, ck, tasks, tmp_path / "run")
    assert step.code == 4, step
    assert (f"{tasks / 'fixed' / 'j' / 'task.toml'}:7: verifier.models: the verifier calls models, and the run "
            "has no model gateway") in step.stderr, step


@pytest.mark.parametrize("flag", ["--secret", "--driver-secret"])
def test_a_secret_named_like_a_gateway_variable_is_refused_under_a_gateway(
        tmp_path: Path, evalrig_home: Path, sealed: tuple[Path, Path], flag: str) -> None:
    """Under a gateway the rig sets OPENAI_API_KEY itself (the attempt's token): a secret of that
    name would be silently shadowed, and the real key the operator meant to pass would then be
    redacted as if the token were it. Without a gateway the name is an ordinary secret."""
    ck, tasks = sealed
    gw = _gateway(tmp_path)
    env = {"GW_TEST_OPENAI_KEY": KEY, "OPENAI_API_KEY": "sk-operator-own"}
    step = _run(evalrig_home, ck, tasks, tmp_path / "run", "--gateway", gw, flag, "OPENAI_API_KEY", env=env)
    assert step.code == 4, step
    assert f"{flag} OPENAI_API_KEY: the rig sets this variable" in step.stderr, step
    assert not (tmp_path / "run" / "manifest.json").exists()
