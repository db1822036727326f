"""A release train whose agents call models only through the gateway, end to end through
eval.sh (docs/gateway.md): the champion on an expensive model, the candidate on a cheap one
with the same answers; compare prices both runs' metered calls with one table and the gate
promotes on efficiency, saying so; then the candidate's run is replayed with the provider
stopped, and the replay is never comparable with a run that called the provider."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from tests.redteam import SMALL_POLICY, eval_sh, make_checkpoint, results, run_train, write_policy
from tests.test_gateway_wire import AGENT, KEY, Standin, _sandbox, sdk, standin  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the gateway needs a namespace of the sandbox's own")

# k = 1 and six fresh tasks: a margin wide enough that equal answers are non-inferior
POLICY = SMALL_POLICY.replace("noninferiority_margin = 0.05", "noninferiority_margin = 0.5")


def _checkpoint(root: Path, sdk_dir: Path, model: str) -> Path:
    env = f'env = {{ PYTHONPATH = "{sdk_dir}", MODEL = "{model}" }}'
    ck = make_checkpoint(root, AGENT.read_text(), name=root.name, agent_toml=env)
    with (ck / "checkpoint.toml").open("a") as f:
        f.write(f'[models]\nallowed = ["openai/{model}"]\n')
    return ck


def _gateway_file(root: Path, port: int) -> Path:
    path = root / "gateway.toml"
    path.write_text(f'[upstreams.openai]\napi = "openai"\nbase_url = "http://127.0.0.1:{port}/v1"\n'
                    'key_env = "STANDIN_KEY"\n[prices]\n'
                    '"openai/standin-large" = { input = 10.0, output = 20.0 }\n'
                    '"openai/standin-small" = { input = 1.0, output = 2.0 }\n')
    return path


def test_a_metered_train_promotes_on_efficiency_and_replays_without_the_provider(
        tmp_path: Path, sdk: Path, standin: Standin, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    _sandbox("bwrap")
    monkeypatch.setenv("STANDIN_KEY", KEY)
    home = tmp_path / "home"
    gw = _gateway_file(tmp_path, standin.port)
    champion = _checkpoint(tmp_path / "champion", sdk, "standin-large")
    candidate = _checkpoint(tmp_path / "candidate", sdk, "standin-small")
    policy = write_policy(tmp_path / "policies", POLICY)
    train = run_train(home, tmp_path, champion, candidate, policy=policy, repeat=1,
                      run_args=("--gateway", str(gw), "--interpreter-prefix", str(sdk)))
    steps = "\n".join(str(s) for s in train.steps.values())
    assert "gate" in train.steps and train.steps["gate"].code == 0, steps
    decision = orjson.loads(train.decision.read_bytes())
    assert (decision["verdict"], decision["reason"]) == ("promote", "efficiency"), steps
    [eff] = [r for r in decision["rules"] if r["name"] == "fresh.efficiency"]
    assert eff["metered"] and eff["champion_source"] == eff["candidate_source"] == "metered", eff
    assert eff["ratio"] == pytest.approx(0.1), eff  # the same tokens at a tenth of the price
    comparison = orjson.loads((train.cmp / "comparison.json").read_bytes())
    cand_manifest = orjson.loads((train.bundle("candidate") / "manifest.json").read_bytes())
    assert comparison["pricing"]["as_of"] == cand_manifest["created_at"]
    assert comparison["pricing"]["prices_digest"] == cand_manifest["gateway"]["prices_digest"]
    verdict = " ".join(train.decision.with_suffix(".md").read_text().split())
    assert "Its cost was metered by the model gateway on every scored attempt of both runs" in verdict
    assert eval_sh(home, "verify", train.bundle("candidate")).code == 0

    # the provider stopped: the candidate's run replayed from its recording, no key given
    standin.proc.kill()
    standin.proc.wait()
    monkeypatch.delenv("STANDIN_KEY")
    replay = tmp_path / "runs" / "replay"
    step = eval_sh(home, "run", "--checkpoint", candidate, "--tasks", train.tasks, "--out", replay,
                   "--policy", policy, "--repeat", "1", "--sandbox", "bwrap", "--jobs", "2",
                   "--interpreter-prefix", str(sdk), "--replay", train.bundle("candidate"))
    assert step.code == 0, step
    assert all(r["status"] == "passed" for r in results(replay)), results(replay)
    manifest = orjson.loads((replay / "manifest.json").read_bytes())
    assert manifest["replay_of"]["run_id"] == cand_manifest["run_id"] and "gateway" not in manifest
    lines = [orjson.loads(x) for a in (replay / "attempts").iterdir()
             for x in (a / "model.jsonl").read_bytes().splitlines()]
    assert lines and all(x["usage_source"] == "replayed" and x["status"] == 200 for x in lines), lines
    refused = eval_sh(home, "compare", train.bundle("champion"), replay, "--out", tmp_path / "cmp-replay")
    assert refused.code == 4 and "replay_of: the runs differ in replays" in refused.stderr, refused

    # a response body changed after the bundle's digests were checked is not served: each body
    # read for replay must be the one its model.jsonl line names
    import shutil

    from evalrig.core.errors import EvalrigError
    from evalrig.store.recording import _attempt_calls

    attempt = next(a for a in (train.bundle("candidate") / "attempts").iterdir() if (a / "model").is_dir())
    copy = tmp_path / "attempt-copy"
    shutil.copytree(attempt, copy)
    assert _attempt_calls(copy)  # as written, every kept body is served
    body = sorted((copy / "model").glob("*.response.*"))[0]
    body.write_bytes(body.read_bytes().replace(b"}", b" }", 1))
    with pytest.raises(EvalrigError) as refused_body:
        _attempt_calls(copy)
    error = refused_body.value
    assert error.file == str(body) and error.field == "model.jsonl seq 0.response_sha256", error
    assert "--replay: the response body is not the one its line records" in error.message, error
